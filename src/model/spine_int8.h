/* The row-int8 spine's file format, shared by its two writers, and the
 * guard for models written without a bf16 spine.
 *
 * Writers: `convert-spine` (from the bf16 shards, spine_int8.c) and
 * `make-model --spine int8` (straight from the generator, src/synth/), which
 * must produce the same bytes: both lay files out and write the index
 * through the functions below, so a layout change reaches both.
 *
 * A model written by `make-model --spine int8` keeps every bf16 shard with
 * its full header and every tensor the int8 copy does not replace (routed
 * experts, routers, norms, vectors), but leaves the spine matrices
 * (df_k3_int8_eligible) as holes: sparse ranges that read as zeros. Its
 * index's metadata says so (DF_K3_HOLES_KEY = DF_K3_HOLES_VALUE). Zeros read
 * from a hole must never be taken for weights: df_k3_spine_holes_check
 * refuses such a model to every reader of its bf16 spine (a run without
 * --spine int8, convert-spine, pack --spine bf16). */
#ifndef DF_MODEL_SPINE_INT8_H
#define DF_MODEL_SPINE_INT8_H

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"

#define DF_K3_HOLES_KEY "deltafin_bf16_spine"
#define DF_K3_HOLES_VALUE "holes"
/* Where make-model wrote the int8 copy (for messages; absolute path). */
#define DF_K3_HOLES_DIR_KEY "deltafin_int8_spine_dir"

/* The int8 file made from one source shard: its eligible tensors ts[0..n),
 * in the order the shard's header lists them by name (df_st_file's order),
 * declared as `<name>` I8 [rows, cols] and `<name>.scale` F32 [rows], data
 * 64-byte aligned, metadata naming the source shard's base name and size. */
df_st_writer *df_k3_int8_file_new(const char *out, const char *src_name, uint64_t src_size,
                                  const df_tensor *const *ts, int n, df_err *e);
/* Adds ts's names and their scales to an index weight_map, in file bn. */
void df_k3_int8_index_add(json_t *wm, const char *bn, const df_tensor *const *ts, int n);
/* Writes dir's index (atomically): from here on the copy is complete. */
int df_k3_int8_index_write(const char *dir, json_t *wm, df_err *e);

/* 1 when set's index marks its bf16 spine matrices as holes. */
int df_k3_spine_is_holes(const df_st_set *set);
/* 0 when a reader may go on: the model has its bf16 spine, or it has holes
 * and int8 says the reader takes the spine from the int8 copy (the loader
 * with int8 reads only the int8 copy for every eligible tensor). Otherwise -1
 * with a message naming `what` (the command) and how to run the model. */
int df_k3_spine_holes_check(const df_st_set *set, int int8, const char *what, df_err *e);

#endif
