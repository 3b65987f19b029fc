/* DSpark behind the model seam (model.h): the state's life cycle is the
 * df_dspark_state_* calls of dspark.h; the draft's two passes stay the
 * family's own (dspark.h says why), reached through df_dspark_of. */
#include <string.h>

#include "dspark/dspark.h"
#include "model/model.h"

static void d_free(void *self) { df_dspark_free(self); }
static void d_shape(const void *self, df_model_shape *out) { df_dspark_shape(self, out); }
static int d_ctx_limit(const void *self) { return df_dspark_ctx_limit(self); }
static void *d_state_new(const void *self) { return df_dspark_state_new(self); }
static void d_state_free(void *st) { df_dspark_state_free(st); }
static void d_state_reset(void *st) { df_dspark_state_truncate(st, 0); }
static int d_state_pos(const void *st) { return df_dspark_state_pos(st); }
static void d_state_truncate(void *st, int pos) { df_dspark_state_truncate(st, pos); }
static void *d_state_clone(const void *st) { return df_dspark_state_clone(st); }
static void d_state_copy(void *d, const void *s) { df_dspark_state_copy(d, s); }
static size_t d_state_bytes(const void *st) { return df_dspark_state_bytes(st); }

static void d_mem(const void *self, uint64_t *weights, uint64_t *per_pos) {
  df_dspark_mem(self, weights, per_pos);
}

static const df_model_ops dspark_ops = {
    .family = "dspark",
    .free = d_free,
    .shape = d_shape,
    .mem = d_mem,
    .ctx_limit = d_ctx_limit,
    .state_new = d_state_new,
    .state_free = d_state_free,
    .state_reset = d_state_reset,
    .state_pos = d_state_pos,
    .state_truncate = d_state_truncate,
    .state_clone = d_state_clone,
    .state_copy = d_state_copy,
    .state_bytes = d_state_bytes,
};

int df_model_open_dspark(df_model **out, const char *dir, const df_model *target, df_err *e) {
  df_dspark *d;
  if (df_dspark_load(&d, dir, target, e)) return -1;
  *out = df_model_wrap(&dspark_ops, d);
  return 0;
}

df_dspark *df_dspark_of(const df_model *m) {
  return m && !strcmp(df_model_family(m), dspark_ops.family) ? df_model_self(m) : NULL;
}

df_dspark_state *df_dspark_state_of(const df_mstate *s) {
  return s && df_dspark_of(df_mstate_model(s)) ? df_mstate_self(s) : NULL;
}
