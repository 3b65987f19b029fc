/* Qwen3 behind the model seam (model.h): each operation is the df_qwen3_*
 * call of qwen3.h. The seam's forward reads only the kernel context of the
 * bound run (a draft has no store, no spine stream, no gate-ahead). */
#include "model/model.h"
#include "qwen3/qwen3.h"

static void q_free(void *self) { df_qwen3_free(self); }

static void q_shape(const void *self, df_model_shape *out) {
  const df_qwen3 *m = self;
  *out = (df_model_shape){.vocab = df_qwen3_vocab(m), .hidden = df_qwen3_hidden(m),
                          .layers = df_qwen3_layers(m), .eos = df_qwen3_eos(m)};
}

static int q_ctx_limit(const void *self) { return df_qwen3_max_pos(self); }
static void *q_state_new(const void *self) { return df_qwen3_state_new(self); }
static void q_state_free(void *st) { df_qwen3_state_free(st); }
static void q_state_reset(void *st) { df_qwen3_state_reset(st); }
static int q_state_pos(const void *st) { return df_qwen3_state_pos(st); }
static void q_state_truncate(void *st, int pos) { df_qwen3_state_truncate(st, pos); }
static void *q_state_clone(const void *st) { return df_qwen3_state_clone(st); }
static void q_state_copy(void *d, const void *s) { df_qwen3_state_copy(d, s); }
static size_t q_state_bytes(const void *st) { return df_qwen3_state_bytes(st); }

static int q_forward(const void *self, const df_model_run *run, void *st, const int *ids, int T,
                     float *logits_last, float *logits_all, df_err *e) {
  if (!run->kc) return df_err_set(e, "qwen3: forward before df_model_bind");
  return df_qwen3_forward(self, run->kc, st, ids, T, logits_last, logits_all, e);
}

static void q_mem(const void *self, uint64_t *weights, uint64_t *per_pos) {
  df_qwen3_mem(self, weights, per_pos);
}

static const df_model_ops qwen3_ops = {
    .family = "qwen3",
    .free = q_free,
    .shape = q_shape,
    .mem = q_mem,
    .ctx_limit = q_ctx_limit,
    .state_new = q_state_new,
    .state_free = q_state_free,
    .state_reset = q_state_reset,
    .state_pos = q_state_pos,
    .state_truncate = q_state_truncate,
    .state_clone = q_state_clone,
    .state_copy = q_state_copy,
    .state_bytes = q_state_bytes,
    .forward = q_forward,
};

int df_model_open_qwen3(df_model **out, const char *dir, int int8, df_err *e) {
  df_qwen3 *q;
  if (df_qwen3_load(&q, dir, e)) return -1;
  if (int8) df_qwen3_quantize_int8(q);
  *out = df_model_wrap(&qwen3_ops, q);
  return 0;
}
