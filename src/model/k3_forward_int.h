/* The two instances of the forward pass (k3_forward_t.h): fp32 and
 * float64 sequence states and their entry points, behind the public
 * df_k3_state of k3.h (k3_forward.c). */
#ifndef DF_MODEL_K3_FORWARD_INT_H
#define DF_MODEL_K3_FORWARD_INT_H

#include <stdint.h>

#include "model/k3.h"

/* A new sequence state's id, unique in the process (both instances draw
 * from it): what a device's copies of the state are keyed by. */
uint64_t df_k3_seq_id(void);

#define DF_K3_FWD_DECLARE(P)                                                                   \
  typedef struct P##st P##st;                                                                  \
  P##st *P##state_new(const df_k3 *m);                                                         \
  void P##state_free(P##st *s);                                                                \
  void P##state_reset(P##st *s);                                                               \
  int P##state_pos(const P##st *s);                                                            \
  P##st *P##state_clone(const P##st *s);                                                       \
  void P##state_copy(P##st *dst, const P##st *src);                                            \
  size_t P##state_bytes(const P##st *s);                                                       \
  void P##state_set_hook(P##st *s, df_k3_layer_hook fn, void *ud);                             \
  void P##state_set_route_hook(P##st *s, df_k3_route_hook fn, void *ud);                       \
  void P##state_set_cancel(P##st *s, df_k3_cancel_fn fn, void *ud);                            \
  int P##forward(const df_k3_run *r, P##st *s, const int *ids, int T, float *logits_last,      \
                 float *logits_all, df_err *e);                                                \
  typedef struct P##mark P##mark;                                                              \
  P##mark *P##mark_new(const P##st *s);                                                        \
  void P##mark_save(P##mark *k, const P##st *s);                                               \
  void P##mark_restore(P##st *s, const P##mark *k);                                            \
  size_t P##mark_bytes(const P##st *s);                                                        \
  void P##mark_free(P##mark *k);                                                               \
  void P##state_set_row_marks(P##st *s, P##mark **mk, int n);

DF_K3_FWD_DECLARE(df_k3f32_)
DF_K3_FWD_DECLARE(df_k3f64_)

#endif
