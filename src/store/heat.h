/* Persistent expert heat: a decayed count of how often each (layer, expert)
 * was needed, merged across runs. Binary file: "DFHEAT01", u32 first_layer,
 * n_layers, n_experts, u32 0, f32 counts[(n_layers - first_layer) *
 * n_experts], u64 xxh3-64 of everything before it. Written atomically. */
#ifndef DF_STORE_HEAT_H
#define DF_STORE_HEAT_H

#include <stdint.h>

#include "base/err.h"

typedef struct df_heat {
  int first_layer, n_layers, n_experts;
  float *count; /* [(layer - first_layer) * n_experts + expert] */
} df_heat;

/* Loads path; a missing file is not an error (*found = 0, counts zero). */
int df_heat_load(df_heat *h, const char *path, int first_layer, int n_layers, int n_experts,
                 int *found, df_err *e);
/* Merges this run's counts into the file: new = old * 0.75 + run (re-read
 * at save time so concurrent runs do not lose each other's counts). */
int df_heat_merge_save(const df_heat *run, const char *path, df_err *e);
void df_heat_free(df_heat *h);
size_t df_heat_n(const df_heat *h);

#endif
