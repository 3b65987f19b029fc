/* The public sequence state and forward pass (k3.h): one state type whose
 * precision is the model's (df_k3_set_precision), dispatching to the fp32 or
 * the float64 instance of k3_forward_t.h. */
#include <stdlib.h>

#include "base/util.h"
#include "model/k3_forward_int.h"
#include "model/k3_int.h"

struct df_k3_state {
  df_k3f32_st *s32; /* exactly one of the two is set */
  df_k3f64_st *s64;
  void **rowmk; /* the row marks' inner marks (df_k3_state_set_row_marks) */
};

uint64_t df_k3_seq_id(void) {
  static _Atomic uint64_t next = 1;
  return next++;
}

#define DISPATCH(s, call32, call64) ((s)->s64 ? (call64) : (call32))

static df_k3_state *wrap(df_k3f32_st *a, df_k3f64_st *b) {
  df_k3_state *s = df_xcalloc(1, sizeof *s);
  s->s32 = a;
  s->s64 = b;
  return s;
}

df_k3_state *df_k3_state_new(const df_k3 *m) {
  return df_k3_precision(m) == 64 ? wrap(NULL, df_k3f64_state_new(m))
                                  : wrap(df_k3f32_state_new(m), NULL);
}

void df_k3_state_free(df_k3_state *s) {
  if (!s) return;
  if (s->s64) df_k3f64_state_free(s->s64);
  else df_k3f32_state_free(s->s32);
  free(s->rowmk);
  free(s);
}

void df_k3_state_reset(df_k3_state *s) {
  if (s->s64) df_k3f64_state_reset(s->s64);
  else df_k3f32_state_reset(s->s32);
}

int df_k3_state_pos(const df_k3_state *s) {
  return DISPATCH(s, df_k3f32_state_pos(s->s32), df_k3f64_state_pos(s->s64));
}

df_k3_state *df_k3_state_clone(const df_k3_state *s) {
  return s->s64 ? wrap(NULL, df_k3f64_state_clone(s->s64))
                : wrap(df_k3f32_state_clone(s->s32), NULL);
}

/* States of one model share its precision, so the two sides always match. */
void df_k3_state_copy(df_k3_state *dst, const df_k3_state *src) {
  if (dst->s64 && src->s64) df_k3f64_state_copy(dst->s64, src->s64);
  else if (dst->s32 && src->s32) df_k3f32_state_copy(dst->s32, src->s32);
}

size_t df_k3_state_bytes(const df_k3_state *s) {
  return DISPATCH(s, df_k3f32_state_bytes(s->s32), df_k3f64_state_bytes(s->s64));
}

void df_k3_state_set_hook(df_k3_state *s, df_k3_layer_hook fn, void *ud) {
  if (s->s64) df_k3f64_state_set_hook(s->s64, fn, ud);
  else df_k3f32_state_set_hook(s->s32, fn, ud);
}

void df_k3_state_set_route_hook(df_k3_state *s, df_k3_route_hook fn, void *ud) {
  if (s->s64) df_k3f64_state_set_route_hook(s->s64, fn, ud);
  else df_k3f32_state_set_route_hook(s->s32, fn, ud);
}

void df_k3_state_set_cancel(df_k3_state *s, df_k3_cancel_fn fn, void *ud) {
  if (s->s64) df_k3f64_state_set_cancel(s->s64, fn, ud);
  else df_k3f32_state_set_cancel(s->s32, fn, ud);
}

int df_k3_forward(const df_k3_run *r, df_k3_state *s, const int *ids, int T, float *logits_last,
                  float *logits_all, df_err *e) {
  return DISPATCH(s, df_k3f32_forward(r, s->s32, ids, T, logits_last, logits_all, e),
                  df_k3f64_forward(r, s->s64, ids, T, logits_last, logits_all, e));
}

struct df_k3_mark {
  df_k3f32_mark *m32; /* the precision of the state it was made for */
  df_k3f64_mark *m64;
};

df_k3_mark *df_k3_mark_new(const df_k3_state *s) {
  df_k3_mark *k = df_xcalloc(1, sizeof *k);
  if (s->s64) k->m64 = df_k3f64_mark_new(s->s64);
  else k->m32 = df_k3f32_mark_new(s->s32);
  return k;
}

void df_k3_mark_save(df_k3_mark *k, const df_k3_state *s) {
  if (s->s64) df_k3f64_mark_save(k->m64, s->s64);
  else df_k3f32_mark_save(k->m32, s->s32);
}

void df_k3_mark_restore(df_k3_state *s, const df_k3_mark *k) {
  if (s->s64) df_k3f64_mark_restore(s->s64, k->m64);
  else df_k3f32_mark_restore(s->s32, k->m32);
}

size_t df_k3_mark_bytes(const df_k3_state *s) {
  return DISPATCH(s, df_k3f32_mark_bytes(s->s32), df_k3f64_mark_bytes(s->s64));
}

void df_k3_mark_free(df_k3_mark *k) {
  if (!k) return;
  df_k3f32_mark_free(k->m32);
  df_k3f64_mark_free(k->m64);
  free(k);
}

void df_k3_state_set_row_marks(df_k3_state *s, df_k3_mark *const *marks, int n) {
  free(s->rowmk);
  s->rowmk = NULL;
  if (n > 0) {
    s->rowmk = df_xcalloc((size_t)n, sizeof *s->rowmk);
    for (int i = 0; i < n; i++)
      s->rowmk[i] = s->s64 ? (void *)marks[i]->m64 : (void *)marks[i]->m32;
  }
  if (s->s64) df_k3f64_state_set_row_marks(s->s64, (df_k3f64_mark **)s->rowmk, n);
  else df_k3f32_state_set_row_marks(s->s32, (df_k3f32_mark **)s->rowmk, n);
}
