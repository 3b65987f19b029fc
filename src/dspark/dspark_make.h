/* `deltafin make-model --preset dspark`: a random DSpark checkpoint
 * (config.json + model.safetensors, bf16, the published names) for the
 * dimensions of the target model in target_dir, from a seed. */
#ifndef DF_DSPARK_DSPARK_MAKE_H
#define DF_DSPARK_DSPARK_MAKE_H

#include <stdint.h>

#include "base/err.h"

typedef struct df_dspark_make_opts {
  const char *target_dir, *out_dir;
  uint64_t seed;
  int layers;     /* draft layers (the nano layout: 2) */
  int ntaps;      /* 0: the default taps (nano's for an 8-layer target, else spread) */
  const int *taps;
} df_dspark_make_opts;

/* Same options, same bytes. Every file is written under a temporary name and
 * renamed; config.json last. */
int df_dspark_make(const df_dspark_make_opts *o, df_err *e);

#endif
