/* Where each routed expert lives in the checkpoint shards, and the model
 * fingerprint a pack is tied to. Internal to the store, pack and doctor. */
#ifndef DF_STORE_SOURCE_H
#define DF_STORE_SOURCE_H

#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "remote/sverify.h"
#include "store/store.h"

typedef struct df_src_loc {
  int file;      /* shard index in the set */
  uint64_t off;  /* absolute offset of the record (w1 packed) in that shard */
} df_src_loc;

/* Fills loc[(layer - first_k_dense) * n_experts + expert]; checks names,
 * dtypes, sizes and that the six tensors are contiguous in upstream order. */
int df_src_locate(const df_st_set *set, const df_config *c, df_src_loc *loc, df_err *e);
/* xxh3-64 over config.json and each shard's name and size: a pack made from
 * other files is refused. */
int df_src_fingerprint(const df_st_set *set, uint64_t *out, df_err *e);
/* 0 if the three scale tensors of a record hold no E8M0 NaN (255). */
int df_src_check_scales(const df_expert_layout *lay, const uint8_t *rec);

/* ---- stream installs: the one hook between the store and the network ----
 * In a stream install (`deltafin setup --stream`) some records' bytes are
 * not local yet; the fetcher (setup/fetcher.h) gets them by range request
 * into the sparse shards. The store asks here before it reads a record. */
typedef struct df_src_remote df_src_remote;

/* 0 with *out = NULL when every record of the set is local (no stream
 * install, or one whose shards are complete), 0 with *out set, or -1. */
int df_src_remote_open(df_src_remote **out, const df_st_set *set, df_err *e);
/* The same for reading records (the store), with a --stream-verify override
 * (DF_SVERIFY_AUTO: as installed); prints the loud warning when the policy in
 * force is arrival. */
int df_src_remote_open_verify(df_src_remote **out, const df_st_set *set, df_stream_verify want,
                              df_err *e);
void df_src_remote_close(df_src_remote *r);

typedef struct df_src_need {
  int file, layer, expert;
  uint64_t off, len;
  uint64_t xxh; /* out: the xxh3-64 the record's bytes must have, 0 = nothing to check */
} df_src_need;

/* This record's bytes are not local: ask the fetcher. Makes every needed
 * record local, fetching the missing ones (blocking), and fills their xxh.
 * -1 with e naming the expert that could not be fetched. */
int df_src_remote_ensure(df_src_remote *r, df_src_need *need, int n, df_err *e);
/* Fetch-ahead (`--fetch-ahead on`; default off): records the predictors
 * expect may be fetched over the network in the background. */
void df_src_remote_set_ahead(df_src_remote *r, int on);
/* A prediction: fetch these records ahead if they are not local (never
 * blocks; a no-op while fetch-ahead is off). */
void df_src_remote_ahead(df_src_remote *r, const df_src_need *need, int n);
/* End-of-generation reports: see df_fetcher_settle. */
void df_src_remote_settle(df_src_remote *r);
/* 1 if the record is local (no fetch), *xxh as above. */
int df_src_remote_local(df_src_remote *r, int file, uint64_t off, uint64_t len, uint64_t *xxh);
/* Network statistics as a JSON object text (caller frees). */
char *df_src_remote_stats_json(df_src_remote *r);

#endif
