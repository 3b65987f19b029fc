/* Internal to the store: where its records live (records.c): the pack's
 * drive files or the shards, each record's copies, the pack's spine
 * section. Set at open, read-only after it (except the copies' bad bits,
 * under the store's mutex). */
#ifndef DF_STORE_RECORDS_H
#define DF_STORE_RECORDS_H

#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"
#include "store/manifest.h"

typedef struct df_store df_store;

/* One readable copy of a record. */
typedef struct copyloc {
  int drive;     /* index into df_store.drive */
  int file;      /* index into df_store.fds / file_paths */
  int fd;        /* fds[file], kept here so a read needs no lookup */
  uint64_t off;  /* the record's first byte in that file (pack copies are 4 KiB aligned) */
  uint64_t xxh;  /* xxh3-64 of the record (pack only; 0 for shards) */
} copyloc;

/* Where one record (layer, expert) can be read from. */
typedef struct rec {
  uint8_t ncopies;
  uint8_t bad; /* copies found unreadable or corrupt, one bit per copy: never tried again */
  copyloc c[DF_MF_MAX_COPIES];
} rec;

typedef struct df_store_records {
  int from_pack;        /* records come from a pack (else from the shards) */
  char *source;         /* the manifest path or the checkpoint folder */
  int n_fds, *fds;      /* open files: one per pack drive, or one per shard */
  char **file_paths;    /* their paths (df_store_locate) */
  int o_direct;         /* every file opened with O_DIRECT */
  rec *recs;            /* by key */
  int has_spine;        /* the pack has a spine section (pack --spine) */
  df_mf_spine spine;    /* it, taken from the manifest */
  uint64_t *pack_size;  /* per pack drive: its file's size at open (0 = unreadable) */
} df_store_records;

/* records.c: open the records' files (and the drives, sched.h) */
int df_store_open_pack(df_store *s, const df_st_set *set, const char *mpath, df_err *e);
int df_store_open_shards(df_store *s, const df_st_set *set, df_err *e);
void df_store_close_files(df_store *s);

/* The pack's spine section (pack --spine), or NULL (shards, or a pack
 * without one). Its chunks' drives are the store's drives. */
const df_mf_spine *df_store_spine_section(const df_store *s);
/* A pack drive's file: its fd (-1 = unreadable, or not a pack), path and
 * size when the store opened it. */
int df_store_pack_file(const df_store *s, int drive, const char **path, uint64_t *size);
/* 1 when every file of the store (the pack's drive files) was opened with
 * O_DIRECT. */
int df_store_o_direct(const df_store *s);

#endif
