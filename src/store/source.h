/* Where each routed expert lives in the checkpoint shards, and the model
 * fingerprint a pack is tied to. Internal to the store, pack and doctor. */
#ifndef DF_STORE_SOURCE_H
#define DF_STORE_SOURCE_H

#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"
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

#endif
