/* The spine stream, part of the weight store: the units of a model's spine
 * (its layers, then its head) that the memory plan leaves out of memory are
 * read every pass into DF_PLAN_RING_SLOTS aligned buffers, by the store, on
 * the store's drives and scheduler (demand > spine > prefetch, rank.h), its
 * trace format and its checksum rule. The model only says what a unit is
 * (its coalesced file extents) and asks for a unit's buffer; it never opens
 * a file (the store does, O_DIRECT where the filesystem allows).
 *
 * When the store's pack has a spine section of the model's kind and layout
 * (deltafin pack --spine), a unit is read from it instead: each chunk from
 * its drive, its xxh3 checked in the drive thread before the unit can be
 * taken; the buffer holds the same bytes as from the shards (the extents'
 * buffer offsets are the same), so ids do not depend on where the spine
 * streams from. A store without drives (a model without routed experts)
 * still owns the reading: the stream then runs the store's I/O engine
 * (io.h) on one drive of its own, with the store's options.
 *
 * A buffer's content is used once: after release it counts as empty, so
 * every pass reads every streamed unit. When the model takes unit U it
 * names the unit it takes next, whose reads start at once into the other
 * buffer; a wrong guess costs the bytes already read (counted as wasted). */
#ifndef DF_STORE_SPINE_H
#define DF_STORE_SPINE_H

#include <stdint.h>

#include "base/err.h"

typedef struct df_store df_store;
typedef struct df_spine df_spine;

/* Bytes per read of a shard extent. */
#define DF_SPINE_CHUNK (8u << 20)

/* One coalesced, 4 KiB-aligned read range of a unit, at boff in its buffer. */
typedef struct df_spine_extent {
  int file; /* index into df_spine_desc.paths */
  uint64_t off, len, boff;
} df_spine_extent;

typedef struct df_spine_unit {
  int streamed;               /* 0: resident, never read here */
  uint64_t bytes;             /* weight bytes (the stats' weight_bytes) */
  uint64_t read;              /* buffer bytes: its extents back to back */
  const df_spine_extent *ex;  /* copied by df_store_spine_open */
  int nex;
} df_spine_unit;

/* What a model streams. Units below n_layers are named "layer U" in
 * messages, the others "the head". */
typedef struct df_spine_desc {
  int nunits, n_layers;
  const df_spine_unit *units;
  int nfiles;
  const char *const *paths; /* the files extents name */
  const char *kind;         /* "bf16" | "int8": the pack section must be of it */
  uint64_t layout_id;       /* ... and of this layout (k3_spine_layout.c) */
  const char *source;       /* "shards" | "shards+int8": where units come from without a section */
} df_spine_desc;

/* Opens the stream of d's streamed units (none: *out = NULL, 0). Errors
 * name the file, or the unit and drive file of an incomplete pack section.
 * Close it before closing the store. */
int df_store_spine_open(df_store *st, const df_spine_desc *d, df_spine **out, df_err *e);
void df_spine_close(df_spine *sp);

/* Unit u's buffer once all its bytes are in (and verified), NULL on error
 * (the message names the unit and the file or chunk); next: the unit the
 * caller takes after this one (-1 = none), whose reads start now. The buffer
 * stays valid until df_spine_release(u). */
const uint8_t *df_spine_acquire(df_spine *sp, int u, int next, df_err *e);
void df_spine_release(df_spine *sp, int u);
/* Waits until no read is in flight (the next unit's, issued ahead): for
 * end-of-run reports, whose figures then agree with the trace. */
void df_spine_settle(df_spine *sp);

typedef struct df_spine_stats {
  int units;             /* units streaming */
  uint64_t bytes;        /* bytes read from the drives (aligned extents) */
  uint64_t weight_bytes; /* tensor bytes of the units the forward pass used */
  uint64_t reads, wasted, passes;
  double wait_s;         /* time the forward pass waited for spine data */
  int direct, registered;
  const char *io;
  const char *source; /* "pack" (its spine section), "shards" or "shards+int8" */
  int drives;         /* drives the spine's reads go to */
} df_spine_stats;
/* sp may be NULL (nothing streams): all zero. */
void df_spine_stats_get(df_spine *sp, df_spine_stats *st);

/* The reads one pass makes (every streamed unit's extents in DF_SPINE_CHUNK
 * pieces, or its chunks of the pack's section, in unit order, with the
 * store drive each goes to), for tools that replay them. Returns the reads
 * in flight per drive (0 when sp is NULL). */
typedef void (*df_spine_read_fn)(void *ud, const char *path, int drive, uint64_t off, uint32_t len);
int df_spine_reads(const df_spine *sp, df_spine_read_fn fn, void *ud);

#endif
