/* The K3 forward pass over a batch of T positions (kimi-k3.md section 5),
 * written once for both activation types. Compiled twice, by
 * k3_forward_f32.c (R = float: every kernel table) and k3_forward_f64.c
 * (R = double: the scalar float64 table, --precision f64); k3_forward.c is
 * the public face that dispatches on the state's precision. Each includer
 * defines
 *   R, R_IS_F64  the activation type, and 1 when it is double
 *   N(name)      the instance's name of an entry point
 *   KT, KSEL(kc) the kernel table type, and the context's table of it
 *   MM, MMX, WMT, WMR  the matrix drivers of that type (kernels.h)
 *   ROUTE        the router's choice on R scores (router.h)
 *   EXP, SQRT    the math functions of R
 *
 * Batch layout: every activation is [T][width] row-major. Projections run as
 * one GEMM over the T rows; the KDA recurrence and MLA attention run per
 * head (heads are independent, so they are the parallel axis); the MoE
 * routes all T rows first, asks the store for the union of their experts
 * once, computes each expert on all its rows as it arrives and sums every
 * row's experts afterwards in ascending expert id. Each output value is
 * computed the same way whatever T, the thread count or the arrival order,
 * so decode, prefill and any chunking agree bit for bit.
 *
 * Weights (norms, conv, gates, biases) stay the fp32 the loader made of the
 * checkpoint's bf16/fp32; float64 widens them exactly. Hooks and logits are
 * fp32 in both instances (the public API).
 *
 * Scratch grows with the largest batch and context seen; nothing is
 * allocated per token. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "kernels/kgpu.h"
#include "model/k3_forward_int.h"
#include "model/k3_int.h"
#include "model/router.h"

typedef struct N(st) ST;

/* The sequence state: everything a continuation depends on, nothing else
 * (AttnRes keeps nothing across positions; the last logits are the
 * caller's). A clone, a copy and a mark move only this. */
typedef struct N(seq) {
  int pos;
  int cap;      /* positions allocated in each MLA cache */
  R **kda_S;    /* per layer: heads x D x D (NULL for MLA layers) */
  R **kda_conv; /* per layer: 3 x (K-1) x P, oldest input first */
  R **mla;      /* per layer: cap x (kv_lora_rank + rope) */
  /* --device cuda keeps copies of the state in GPU memory (kgpu.h's
   * df_kgpu_seq_*), keyed by id. The MLA copies are of rows the host has
   * too (gen changes when rows before pos change under them); a KDA
   * layer's copy may be the only current one (kda_at AT_DEV), and every
   * reader of kda_S / kda_conv brings it back first (seq_host_layer). */
  uint64_t id;
  uint32_t gen;
  df_kgpu *gpu;     /* the device holding copies, NULL: none */
  uint8_t *kda_at;  /* per layer: AT_HOST, AT_BOTH or AT_DEV */
  int lost;         /* the device failed holding the only current copy */
} SEQ;

enum { AT_HOST = 0, AT_BOTH = 1, AT_DEV = 2 }; /* where a KDA layer's current state is */

/* Scratch of the forward pass, sized for Tcap rows and nth threads; nothing
 * in it outlives a pass. About 50 fields, one buffer per intermediate of
 * kimi-k3.md section 5 (named after it), kept in one struct so that
 * reserve() sizes them together and free_scratch() lists them once. */
typedef struct N(ws) {
  int Tcap, nth;
  size_t thr_stride;
  R *thr;
  R *h, *p, *xin, *xn, *a, *ffo, *snaps;
  R *kq, *kk, *kv, *kg, *kf, *kfa, *kb, *ko;
  R *mqa, *mq, *mc, *mg, *mo;
  R *f1, *f2;       /* dense / shared FFN gate and up (act in place) */
  R *rl, *selw, *z, *ybuf, *rr, *routed;
  int *sel;
  R *eZ, *eH1, *eH3, *eY; /* one expert's rows */
  int *ecnt, *eoff, *eent, *uexp, *ecur;
  int *srow; /* T x K: the GPU batch's row of each (row, slot) (experts_gpu_tail) */
  int nuexp;              /* experts in uexp (this MoE layer batch's union) */
  uint8_t *eres;          /* per uexp index: 1 the GPU's tier holds it (not read), 2 read late */
  int *xlist, *xmap, nx;  /* the batch's reads: expert ids, their uexp indices */
  R *gx, *gw;             /* gate-ahead: router input rows, one row's weights */
  int *gsel, *glist;          /* gate-ahead: one row's top-k, the union over rows */
  uint8_t *gmark;
  float *nar; /* float64: fp32 copies for the hooks and the logits (nar_cap values) */
  size_t nar_cap;
  R *lg;      /* float64: the head's rows before they are narrowed (lg_cap values) */
  size_t lg_cap;
  double moe_excl; /* this MoE layer's expert compute + store wait (decode timing) */
  /* --device cuda: the layer's xn the host has not made (the device makes
   * it in front of the layer's first call, kgpu.h's df_kgpu_pre): what
   * xn_host() needs to make it after all; rows t0 .. t0 + nt */
  struct {
    int pending, T, nS, t0, nt;
    const R *x;
    const float *rn, *rp, *nw;
  } xq;
  uint64_t pass, xtok; /* this pass (df_kgpu_pre.pass); the device's xn of a MoE layer */
  int dsn;             /* snapshots the device keeps of this pass (-1: not all of them) */
  /* the layer's attention output left on the device (df_kgpu_kda_args.
   * defer) for the MoE router's call to add to p: a_want the layer may,
   * a_dev it did (p is then not current here), a_pempty p was empty */
  int a_want, a_dev, a_pempty;
} WS;

/* A state handle: the sequence state, its scratch (NULL until the first
 * pass, so a clone kept for later costs only its sequence state) and the
 * hooks of the passes run on it. */
struct N(st) {
  const df_k3 *m;
  SEQ q;
  WS *w;
  df_k3_layer_hook hook;
  void *hook_ud;
  df_k3_route_hook route_hook;
  void *route_ud;
  df_k3_cancel_fn cancel;
  void *cancel_ud;
  /* speculation's per-row boundary states: after row t < nrowmk of the
   * next pass, rowmk[t] holds the recurrent state as it is then */
  struct N(mark) **rowmk;
  int nrowmk;
  uint64_t *rkey; /* --device cuda: the marks' entry keys of one layer (kda_gpu) */
  int rkey_cap;
};

static int nblocks(const df_config *c) {
  return (c->n_layers + c->attn_res_block - 1) / c->attn_res_block;
}

static size_t kda_s_floats(const df_config *c) {
  return (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}
static size_t kda_conv_floats(const df_config *c) {
  return 3 * (size_t)(c->kda_conv - 1 > 0 ? c->kda_conv - 1 : 1) * c->kda_heads * c->kda_head_dim;
}
static size_t mla_row_floats(const df_config *c) {
  return (size_t)(c->kv_lora_rank + c->qk_rope_dim);
}

/* ---- the sequence state's own operations (SEQ) ---- */

/* A zero sequence: every KDA layer's matrices and conv windows, no MLA
 * cache yet (reserve_ctx grows it). */
static void seq_init(SEQ *q, const df_config *c) {
  memset(q, 0, sizeof *q);
  q->id = df_k3_seq_id();
  q->kda_at = df_xcalloc((size_t)c->n_layers, 1);
  q->kda_S = df_xcalloc((size_t)c->n_layers, sizeof *q->kda_S);
  q->kda_conv = df_xcalloc((size_t)c->n_layers, sizeof *q->kda_conv);
  q->mla = df_xcalloc((size_t)c->n_layers, sizeof *q->mla);
  for (int l = 0; l < c->n_layers; l++)
    if (c->layer_kind[l] == DF_LAYER_KDA) {
      q->kda_S[l] = df_xaligned(64, sizeof(R) * kda_s_floats(c));
      q->kda_conv[l] = df_xaligned(64, sizeof(R) * kda_conv_floats(c));
      memset(q->kda_S[l], 0, sizeof(R) * kda_s_floats(c));
      memset(q->kda_conv[l], 0, sizeof(R) * kda_conv_floats(c));
    }
}

static void seq_free(SEQ *q, const df_config *c) {
  df_kgpu_seq_drop(q->gpu, q->id);
  free(q->kda_at);
  for (int l = 0; l < c->n_layers; l++) {
    free(q->kda_S[l]);
    free(q->kda_conv[l]);
    free(q->mla[l]);
  }
  free(q->kda_S);
  free(q->kda_conv);
  free(q->mla);
}

/* Brings layer l's KDA state back from the device when only it has the
 * current one; -1 when that fails (the state is then lost: q->lost). */
static int seq_host_layer(SEQ *q, const df_config *c, int l) {
  if (q->kda_at[l] != AT_DEV) return 0;
  if (q->lost) return -1;
#if R_IS_F64
  (void)c;
  q->lost = 1; /* float64 states never go to the device */
  return -1;
#else
  if (df_kgpu_seq_pull(q->gpu, df_kgpu_seq_key(q->id, l), q->kda_S[l], kda_s_floats(c),
                       q->kda_conv[l], kda_conv_floats(c))) {
    q->lost = 1;
    return -1;
  }
  q->kda_at[l] = AT_BOTH;
  return 0;
#endif
}

/* Layer l's KDA state from s to d on the device, when only the device
 * has s's current one: 0 when done (d's is then there only too), -1 when
 * it is not (the host copies it). */
static int seq_copy_layer_dev(SEQ *d, const SEQ *s, int l) {
#if R_IS_F64
  (void)d, (void)s, (void)l;
  return -1;
#else
  if (s->kda_at[l] != AT_DEV || s->lost || (d->gpu && d->gpu != s->gpu)) return -1;
  if (df_kgpu_seq_copy(s->gpu, df_kgpu_seq_key(d->id, l), df_kgpu_seq_key(s->id, l))) return -1;
  d->gpu = s->gpu;
  d->kda_at[l] = AT_DEV;
  return 0;
#endif
}

/* The recurrent part and the position (what a mark saves and restores).
 * dev: a layer whose current state is on the device only is copied there
 * (speculation's marks, saved and restored every verify pass); without,
 * it comes to the host first (a clone or a copy kept for later should
 * not hold device memory). */
static void seq_copy_recurrent(SEQ *d, const SEQ *s, const df_config *c, int dev) {
  for (int l = 0; l < c->n_layers; l++)
    if (d->kda_S[l]) {
      if (dev && !seq_copy_layer_dev(d, s, l)) continue;
      /* only where s's values are changes, so a const s may be brought
       * back; a failure shows as s->lost */
      seq_host_layer((SEQ *)s, c, l);
      memcpy(d->kda_S[l], s->kda_S[l], sizeof(R) * kda_s_floats(c));
      memcpy(d->kda_conv[l], s->kda_conv[l], sizeof(R) * kda_conv_floats(c));
      d->kda_at[l] = AT_HOST; /* any device copy of d's is stale now */
    }
  d->pos = s->pos;
  d->lost = s->lost;
}

/* The MLA cache rows up to s's position; d's caches hold at least that. */
static void seq_copy_cache(SEQ *d, const SEQ *s, const df_config *c) {
  d->gen++; /* rows before pos change: a device's copies of d's are stale */
  for (int l = 0; l < c->n_layers; l++)
    if (c->layer_kind[l] == DF_LAYER_MLA && s->pos > 0)
      memcpy(d->mla[l], s->mla[l], sizeof(R) * (size_t)s->pos * mla_row_floats(c));
}

ST *N(state_new)(const df_k3 *m) {
  ST *s = df_xcalloc(1, sizeof *s);
  s->m = m;
  seq_init(&s->q, m->cfg);
  return s;
}

void N(state_reset)(ST *s) {
  const df_config *c = s->m->cfg;
  for (int l = 0; l < c->n_layers; l++)
    if (s->q.kda_S[l]) {
      memset(s->q.kda_S[l], 0, sizeof(R) * kda_s_floats(c));
      memset(s->q.kda_conv[l], 0, sizeof(R) * kda_conv_floats(c));
      s->q.kda_at[l] = AT_HOST;
    }
  s->q.pos = 0;
  s->q.gen++;
  s->q.lost = 0;
}

/* The row-sized buffers (reserve() makes them again for more rows). */
static void free_scratch(WS *w) {
  R **f[] = {&w->h,   &w->p,  &w->xin, &w->xn, &w->a,   &w->ffo,  &w->snaps,
                 &w->kq,  &w->kk,  &w->kv, &w->kg,  &w->kf, &w->kfa, &w->kb,   &w->ko,
                 &w->mqa, &w->mq,  &w->mc, &w->mg,  &w->mo, &w->f1,  &w->f2,   &w->rl,
                 &w->selw, &w->z,  &w->ybuf, &w->rr, &w->routed, &w->eZ, &w->eH1, &w->eH3,
                 &w->eY, &w->gx, &w->gw};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
    free(*f[i]);
    *f[i] = NULL;
  }
  int **g[] = {&w->sel,  &w->ecnt,  &w->eoff,  &w->eent,  &w->uexp,
               &w->ecur, &w->gsel, &w->glist, &w->xlist, &w->xmap, &w->srow};
  for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
    free(*g[i]);
    *g[i] = NULL;
  }
  free(w->gmark);
  w->gmark = NULL;
  free(w->eres);
  w->eres = NULL;
}

void N(state_free)(ST *s) {
  if (!s) return;
  seq_free(&s->q, s->m->cfg);
  free(s->rkey);
  if (s->w) {
    free_scratch(s->w);
    free(s->w->thr);
    free(s->w->nar);
    free(s->w->lg);
    free(s->w);
  }
  free(s);
}

int N(state_pos)(const ST *s) { return s->q.pos; }

static int reserve_ctx(ST *s, int npos, df_err *e);

size_t N(state_bytes)(const ST *s) {
  const df_config *c = s->m->cfg;
  size_t n = 0;
  for (int l = 0; l < c->n_layers; l++) {
    if (s->q.kda_S[l]) n += kda_s_floats(c) + kda_conv_floats(c);
    if (c->layer_kind[l] == DF_LAYER_MLA) n += (size_t)s->q.pos * mla_row_floats(c);
  }
  return n * sizeof(R);
}

/* Only the MLA rows up to the position are allocated: a clone is kept, not
 * run (a copy into a live state gives it room again). */
ST *N(state_clone)(const ST *s) {
  const df_config *c = s->m->cfg;
  ST *d = df_xcalloc(1, sizeof *d);
  d->m = s->m;
  seq_init(&d->q, c);
  for (int l = 0; l < c->n_layers; l++)
    if (c->layer_kind[l] == DF_LAYER_MLA && s->q.pos > 0)
      d->q.mla[l] = df_xaligned(64, sizeof(R) * (size_t)s->q.pos * mla_row_floats(c));
  seq_copy_recurrent(&d->q, &s->q, c, 0);
  seq_copy_cache(&d->q, &s->q, c);
  d->q.cap = c->n_mla ? s->q.pos : s->q.cap;
  return d;
}

void N(state_copy)(ST *dst, const ST *src) {
  const df_config *c = dst->m->cfg;
  df_err e;
  dst->q.pos = 0; /* nothing of dst's cache needs keeping */
  if (reserve_ctx(dst, src->q.pos, &e)) return; /* src->q.pos was valid for src */
  seq_copy_recurrent(&dst->q, &src->q, c, 0);
  seq_copy_cache(&dst->q, &src->q, c);
}

/* A mark: the recurrent part of a state (KDA matrices and conv windows)
 * and its position. Restoring it forgets every position after the mark;
 * the MLA cache needs no copy, since rows past the position are written
 * before they are read. Speculation rolls a rejected draft back this way:
 * a fixed cost (the KDA state), not one that grows with the context. */
struct N(mark) {
  const df_config *c;
  SEQ q; /* its MLA caches stay empty */
};

N(mark) *N(mark_new)(const ST *s) {
  N(mark) *k = df_xcalloc(1, sizeof *k);
  k->c = s->m->cfg;
  seq_init(&k->q, k->c);
  return k;
}

void N(mark_save)(N(mark) *k, const ST *s) { seq_copy_recurrent(&k->q, &s->q, k->c, 1); }

/* Keeps s's MLA cache and its capacity: the rows past the mark are
 * rewritten before they are read. */
void N(mark_restore)(ST *s, const N(mark) *k) { seq_copy_recurrent(&s->q, &k->q, k->c, 1); }

size_t N(mark_bytes)(const ST *s) {
  const df_config *c = s->m->cfg;
  return (size_t)c->n_kda * (kda_s_floats(c) + kda_conv_floats(c)) * sizeof(R);
}

void N(mark_free)(N(mark) *k) {
  if (!k) return;
  seq_free(&k->q, k->c);
  free(k);
}

void N(state_set_hook)(ST *s, df_k3_layer_hook fn, void *ud) {
  s->hook = fn;
  s->hook_ud = ud;
}

void N(state_set_route_hook)(ST *s, df_k3_route_hook fn, void *ud) {
  s->route_hook = fn;
  s->route_ud = ud;
}

void N(state_set_row_marks)(ST *s, N(mark) **mk, int n) {
  s->rowmk = n > 0 ? mk : NULL;
  s->nrowmk = n > 0 ? n : 0;
  if (n > s->rkey_cap) {
    free(s->rkey);
    s->rkey = df_xmalloc(sizeof *s->rkey * (size_t)n);
    s->rkey_cap = n;
  }
}

void N(state_set_cancel)(ST *s, df_k3_cancel_fn fn, void *ud) {
  s->cancel = fn;
  s->cancel_ud = ud;
}

static R *fbuf(size_t n) { return df_xaligned(64, sizeof(R) * (n ? n : 1)); }

/* What the public API sees is fp32: in float64 the hooks' rows and the
 * logits go through an fp32 copy; in fp32 the rows themselves. */
static const float *as_f32(ST *s, const R *x, size_t n) {
#if R_IS_F64
  if (n > s->w->nar_cap) {
    free(s->w->nar);
    s->w->nar = df_xmalloc(sizeof(float) * n);
    s->w->nar_cap = n;
  }
  for (size_t i = 0; i < n; i++) s->w->nar[i] = (float)x[i];
  return s->w->nar;
#else
  (void)s;
  (void)n;
  return x;
#endif
}

/* Per-thread scratch: KDA step (D), MLA (2 x kv_lora_rank + cap scores),
 * AttnRes (hidden + scores). */
static void reserve_thr(ST *s, int nth) {
  const df_config *c = s->m->cfg;
  size_t need = (size_t)c->kda_head_dim * 2 + 2 * (size_t)c->kv_lora_rank + (size_t)s->q.cap +
                (size_t)c->hidden + (size_t)nblocks(c) + 2 + 64;
  need = (need + 15) & ~(size_t)15;
  if (nth <= s->w->nth && need <= s->w->thr_stride) return;
  free(s->w->thr);
  if (nth < s->w->nth) nth = s->w->nth;
  s->w->nth = nth;
  s->w->thr_stride = need;
  s->w->thr = fbuf(need * (size_t)nth);
}

static void reserve(ST *s, int T) {
  if (!s->w) s->w = df_xcalloc(1, sizeof *s->w); /* a clone's first pass */
  if (T <= s->w->Tcap) return;
  const df_config *c = s->m->cfg;
  free_scratch(s->w);
  size_t t = (size_t)T, H = (size_t)c->hidden, P = (size_t)c->kda_heads * c->kda_head_dim;
  size_t D = (size_t)c->kda_head_dim, Hk = (size_t)c->kda_heads, Hm = (size_t)c->mla_heads;
  size_t K = (size_t)c->top_k, E = (size_t)c->n_experts, Lt = (size_t)c->latent;
  size_t Mi = (size_t)c->moe_inter;
  size_t F = (size_t)c->dense_inter;
  if ((size_t)c->n_shared * Mi > F) F = (size_t)c->n_shared * Mi;
  s->w->h = fbuf(t * H), s->w->p = fbuf(t * H), s->w->xin = fbuf(t * H), s->w->xn = fbuf(t * H);
  s->w->a = fbuf(t * H), s->w->ffo = fbuf(t * H), s->w->snaps = fbuf((size_t)nblocks(c) * t * H);
  if (c->n_kda) {
    s->w->kq = fbuf(t * P), s->w->kk = fbuf(t * P), s->w->kv = fbuf(t * P), s->w->kg = fbuf(t * P);
    s->w->kf = fbuf(t * P), s->w->kfa = fbuf(t * D), s->w->kb = fbuf(t * Hk), s->w->ko = fbuf(t * P);
  }
  if (c->n_mla) {
    s->w->mqa = fbuf(t * (size_t)c->q_lora_rank);
    s->w->mq = fbuf(t * Hm * (size_t)(c->qk_nope_dim + c->qk_rope_dim));
    s->w->mc = fbuf(t * (size_t)(c->kv_lora_rank + c->qk_rope_dim));
    s->w->mg = fbuf(t * Hm * (size_t)c->v_head_dim);
    s->w->mo = fbuf(t * Hm * (size_t)c->v_head_dim);
  }
  s->w->f1 = fbuf(t * F), s->w->f2 = fbuf(t * F);
  if (c->first_k_dense < c->n_layers) {
    s->w->rl = fbuf(t * E), s->w->selw = fbuf(t * K), s->w->z = fbuf(t * Lt);
    s->w->ybuf = fbuf(t * K * Lt), s->w->rr = fbuf(t * Lt), s->w->routed = fbuf(t * H);
    s->w->eZ = fbuf(t * Lt), s->w->eH1 = fbuf(t * Mi), s->w->eH3 = fbuf(t * Mi), s->w->eY = fbuf(t * Lt);
    s->w->sel = df_xmalloc(sizeof(int) * t * K);
    s->w->ecnt = df_xmalloc(sizeof(int) * E), s->w->eoff = df_xmalloc(sizeof(int) * (E + 1));
    s->w->eent = df_xmalloc(sizeof(int) * t * K), s->w->uexp = df_xmalloc(sizeof(int) * E);
    s->w->srow = df_xmalloc(sizeof(int) * t * K);
    s->w->ecur = df_xmalloc(sizeof(int) * E);
    s->w->gx = fbuf(t * H), s->w->gw = fbuf(K);
    s->w->gsel = df_xmalloc(sizeof(int) * K), s->w->glist = df_xmalloc(sizeof(int) * E);
    s->w->gmark = df_xmalloc(E);
    s->w->eres = df_xmalloc(E);
    s->w->xlist = df_xmalloc(sizeof(int) * E), s->w->xmap = df_xmalloc(sizeof(int) * E);
  }
  s->w->Tcap = T;
}

static int reserve_ctx(ST *s, int npos, df_err *e) {
  const df_config *c = s->m->cfg;
  if (npos > c->max_pos)
    return df_err_set(e, "context of %d positions exceeds config max_position_embeddings %ld",
                      npos, c->max_pos);
  int lim = s->m->ctx_limit > 0 ? s->m->ctx_limit : (int)c->max_pos;
  if (npos > lim)
    return df_err_set(e, "context of %d positions exceeds the %d the memory plan admits "
                      "(raise --ctx or --mem-limit)", npos, lim);
  if (npos <= s->q.cap || !c->n_mla) {
    if (!c->n_mla) s->q.cap = npos > s->q.cap ? npos : s->q.cap;
    return 0;
  }
  int ncap = s->q.cap ? s->q.cap : 64;
  while (ncap < npos) ncap *= 2;
  if (ncap > lim) ncap = lim;
  size_t w = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
  for (int l = 0; l < c->n_layers; l++)
    if (c->layer_kind[l] == DF_LAYER_MLA) {
      R *n = fbuf((size_t)ncap * w);
      if (s->q.mla[l]) memcpy(n, s->q.mla[l], sizeof(R) * (size_t)s->q.pos * w);
      free(s->q.mla[l]);
      s->q.mla[l] = n;
    }
  s->q.cap = ncap;
  return 0;
}

/* The products of one input (a layer's projections of its normed rows):
 * on the GPU one copy in and out for all of them (kernels.h's df_mm_many);
 * the same floats as one MM each, which is what float64 runs. */
static void mm_many(const df_kctx *kc, int n, const df_wmat *const *W, const R *X, int T,
                    size_t ldx, R *const *Y, const size_t *ldy) {
#if R_IS_F64
  for (int i = 0; i < n; i++) MM(kc, W[i], X, T, ldx, Y[i], ldy[i]);
#else
  df_mm_many(kc, n, W, X, T, ldx, Y, ldy);
#endif
}

/* ------------------------------------------------------------ AttnRes */

typedef struct {
  const KT *k;
  const R *V[DF_MAX_LAYERS + 2]; /* each [T][H] */
  int nv, H;
  const float *nw, *rw;
  R eps;
  R *out;
  R *thr;
  size_t thr_stride;
  int t0; /* first row */
} ar_job;

#if R_IS_F64
/* The AttnRes projection row is an fp32 weight; in float64 it is widened
 * as it is read (the fp32 instance's dot takes it as it is). */
static R dot_w(const R *a, const float *w, int n) {
  R s = 0;
  for (int i = 0; i < n; i++) {
    R p = a[i] * (R)w[i];
    s += p;
  }
  return s;
}
#endif

static void ar_task(void *ctx, int task, int thread) {
  const ar_job *j = ctx;
  const KT *k = j->k;
  size_t t = (size_t)(j->t0 + task), H = (size_t)j->H;
  R *tmp = j->thr + (size_t)thread * j->thr_stride, *sc = tmp + H;
  for (int i = 0; i < j->nv; i++) {
    k->rmsnorm(tmp, j->V[i] + t * H, j->nw, j->H, j->eps);
#if R_IS_F64
    sc[i] = dot_w(tmp, j->rw, j->H);
#else
    sc[i] = k->dot(tmp, j->rw, j->H);
#endif
  }
  k->softmax(sc, j->nv);
  R *o = j->out + t * H;
  for (size_t d = 0; d < H; d++) o[d] = 0;
  for (int i = 0; i < j->nv; i++) {
    const R *v = j->V[i] + t * H;
    R w = sc[i];
    for (size_t d = 0; d < H; d++) {
      R q = w * v[d];
      o[d] += q;
    }
  }
}

/* out[t] = AR(snaps[0..nS) + [last], norm, proj) for rows [t0, t0 + n). */
static void attn_res(const df_k3_run *r, ST *s, int T, int nS, const R *last,
                     const float *nw, const float *rw, R *out, int t0, int n) {
  const df_config *c = r->m->cfg;
  ar_job j = {.k = KSEL(r->kc), .nv = nS + 1, .H = c->hidden, .nw = nw, .rw = rw, .eps = c->eps,
              .out = out, .thr = s->w->thr, .thr_stride = s->w->thr_stride, .t0 = t0};
  for (int i = 0; i < nS; i++) j.V[i] = s->w->snaps + (size_t)i * T * c->hidden;
  j.V[nS] = last;
  df_pool_run(r->kc->pool, n, ar_task, &j);
}

static void rms_rows(const KT *k, R *y, const R *x, const float *w, int T, int n, R eps) {
  for (int t = 0; t < T; t++) k->rmsnorm(y + (size_t)t * n, x + (size_t)t * n, w, n, eps);
}

/* A layer's input (5.1 steps 1 and 4, and the head's): xin = AR over the
 * first nS snapshots and x (x itself when nS is 0), xn = norm(xin), rows
 * t0 .. t0 + nt of T. With dev set and a device that keeps this pass's
 * snapshots it is left to the device: pre is filled for the layer's first
 * call, which makes xn there (kgpu.h's df_kgpu_pre; keep: x is the next
 * snapshot; id keys the norms there), and the host makes its own only
 * when something reads it (xn_host). Returns pre then, else NULL with xn
 * made here. */
static void xn_host(const df_k3_run *r, ST *s);
static const df_kgpu_pre *layer_input(const df_k3_run *r, ST *s, int T, int nS, const R *x,
                                      const float *rn, const float *rp, const float *nw,
                                      int t0, int nt, int keep, int dev, uint64_t id,
                                      df_kgpu_pre *pre) {
  WS *w = s->w;
  w->xq.pending = 1, w->xq.T = T, w->xq.nS = nS, w->xq.t0 = t0, w->xq.nt = nt;
  w->xq.x = x, w->xq.rn = rn, w->xq.rp = rp, w->xq.nw = nw;
#if !R_IS_F64
  const df_config *c = r->m->cfg;
  if (dev && r->kc->gpu && w->dsn == nS) {
    *pre = (df_kgpu_pre){.pass = w->pass, .nS = nS, .keep = keep,
                         .slots = (c->n_layers + c->attn_res_block - 1) / c->attn_res_block,
                         .rows = T, .t0 = t0, .res_norm = rn, .res_proj = rp, .norm = nw,
                         .eps = c->eps, .id = id};
    return pre;
  }
#else
  (void)keep, (void)dev, (void)id, (void)pre;
#endif
  xn_host(r, s);
  return NULL;
}

/* The host's p when the layer's attention output was left on the device
 * and the MoE router's call did not bring it back: taken from there and
 * added as the forward adds it. A device that cannot give it back loses
 * the pass (q.lost, which the forward reports after the layer). */
static void p_host(const df_k3_run *r, ST *s) {
  WS *w = s->w;
  if (!w->a_dev) return;
  w->a_dev = 0;
  size_t H = (size_t)r->m->cfg->hidden, n = (size_t)w->xq.T * H;
#if !R_IS_F64
  if (df_kgpu_take(r->kc->gpu, w->a, w->xq.T, H, H)) {
    s->q.lost = 1;
    memset(w->a, 0, sizeof(R) * n);
  }
#endif
  if (w->a_pempty) memcpy(w->p, w->a, sizeof(R) * n);
  else
    for (size_t i = 0; i < n; i++) w->p[i] = w->p[i] + w->a[i];
}

/* The host's xn of the layer's input, when the device was to make it and
 * something here reads it after all (a fallback, a CPU step). */
static void xn_host(const df_k3_run *r, ST *s) {
  WS *w = s->w;
  p_host(r, s);
  if (!w->xq.pending) return;
  const df_config *c = r->m->cfg;
  size_t H = (size_t)c->hidden, o = (size_t)w->xq.t0 * H;
  const R *xa = w->xq.x;
  if (w->xq.nS > 0) {
    attn_res(r, s, w->xq.T, w->xq.nS, w->xq.x, w->xq.rn, w->xq.rp, w->xin, w->xq.t0, w->xq.nt);
    xa = w->xin;
  }
  rms_rows(KSEL(r->kc), w->xn + o, xa + o, w->xq.nw, w->xq.nt, (int)H, c->eps);
  w->xq.pending = 0;
}

/* ------------------------------------------------------------------ KDA */

typedef struct {
  const KT *k;
  const df_k3_layer *y;
  R *X[3];
  R *st;
  int T, P, K, per;
  struct N(mark) **rowmk; /* per-row boundary states (NULL: none) */
  int nrow, l;
} conv_job;

/* Causal depthwise conv per channel; the window is the K-1 stored inputs
 * then the new one, summed in that order. SiLU comes later, per head. */
static void conv_task(void *ctx, int task, int thread) {
  (void)thread;
  const conv_job *j = ctx;
  int nb = (j->P + j->per - 1) / j->per;
  int a = task / nb, c0 = (task % nb) * j->per, c1 = c0 + j->per;
  if (c1 > j->P) c1 = j->P;
  size_t P = (size_t)j->P;
  int K = j->K;
  R *st = j->st + (size_t)a * (size_t)(K - 1) * P;
  const float *W = j->y->conv[a];
  R *X = j->X[a];
  for (int c = c0; c < c1; c++) {
    const float *w = W + (size_t)c * K;
    for (int t = 0; t < j->T; t++) {
      R x = X[(size_t)t * P + c], acc = 0;
      for (int i = 0; i < K - 1; i++) {
        R q = st[(size_t)i * P + c] * w[i];
        acc += q;
      }
      R q = x * w[K - 1];
      acc += q;
      for (int i = 0; i + 1 < K - 1; i++) st[(size_t)i * P + c] = st[(size_t)(i + 1) * P + c];
      if (K > 1) st[(size_t)(K - 2) * P + c] = x;
      X[(size_t)t * P + c] = acc;
      if (t < j->nrow) {
        R *b = j->rowmk[t]->q.kda_conv[j->l] + (size_t)a * (size_t)(K - 1) * P;
        for (int i = 0; i < K - 1; i++) b[(size_t)i * P + c] = st[(size_t)i * P + c];
      }
    }
  }
}

typedef struct {
  const KT *k;
  const df_k3_layer *y;
  const df_config *c;
  R *S, *q, *kk, *v, *g, *f, *b, *o;
  R *thr;
  size_t thr_stride;
  int T;
  struct N(mark) **rowmk;
  int nrow, l;
} kda_job;

static void l2norm(const KT *k, R *u, int n) {
  R ss = k->dot(u, u, n);
  R inv = (R)1 / SQRT(ss + (R)1e-6);
  for (int i = 0; i < n; i++) u[i] *= inv;
}

static void kda_head_task(void *ctx, int h, int thread) {
  const kda_job *j = ctx;
  const KT *k = j->k;
  const df_config *c = j->c;
  int D = c->kda_head_dim;
  size_t P = (size_t)c->kda_heads * D, off = (size_t)h * D;
  R *scr = j->thr + (size_t)thread * j->thr_stride, *tmp = scr + D;
  R *S = j->S + (size_t)h * D * D;
  R expA = EXP(j->y->A_log[h]), lb = c->kda_gate_lower_bound;
  R qscale = (R)1 / SQRT((R)D);
  const float *dtb = j->y->dt_bias + off;
  for (int t = 0; t < j->T; t++) {
    size_t r = (size_t)t * P + off;
    R *q = j->q + r, *kv = j->kk + r, *v = j->v + r, *f = j->f + r, *o = j->o + r;
    k->silu(q, D);
    k->silu(kv, D);
    k->silu(v, D);
    l2norm(k, q, D);
    l2norm(k, kv, D);
    for (int d = 0; d < D; d++) q[d] *= qscale;
    for (int d = 0; d < D; d++) {
      R x = f[d] + dtb[d];
      tmp[d] = expA * x;
    }
    k->sigmoid(tmp, D);
    for (int d = 0; d < D; d++) {
      R g = lb * tmp[d];
      f[d] = EXP(g); /* alpha */
    }
    R beta = j->b[(size_t)t * c->kda_heads + h];
    k->sigmoid(&beta, 1);
    k->kda_step(S, q, kv, v, f, beta, o, scr, D);
    if (t < j->nrow) memcpy(j->rowmk[t]->q.kda_S[j->l] + (size_t)h * D * D, S, sizeof(R) * D * D);
    k->rmsnorm(o, o, j->y->o_norm, D, c->eps);
    R *g = j->g + r;
    k->sigmoid(g, D);
    for (int d = 0; d < D; d++) o[d] *= g[d];
  }
}

#if !R_IS_F64
/* --device cuda: the conv and the per-head recurrence on the GPU
 * (kgpu.h's df_kgpu_kda), which computes these loops' floats, the state
 * kept there between passes; 0 when it did, -1 when not (the loops run),
 * -2 when the device failed holding the only current state (lost).
 * Speculation's per-row boundary states stay there too, in the marks'
 * own entries, so a verify pass moves no state across the bus. */
static int kda_gpu(const df_k3_run *r, ST *s, const df_k3_layer *y, int l, int T, int fused,
                   const df_kgpu_pre *pre) {
  df_kgpu *g = r->kc->gpu;
  SEQ *q = &s->q;
  if (!g || (q->gpu && q->gpu != g)) return -1;
  int nrow = s->nrowmk < T ? s->nrowmk : T;
  for (int t = 0; t < nrow; t++) {
    SEQ *mq = &s->rowmk[t]->q;
    if (mq->gpu && mq->gpu != g) return -1;
    s->rkey[t] = df_kgpu_seq_key(mq->id, l);
  }
  const df_config *c = r->m->cfg;
  df_kgpu_kda_args a = {.T = T, .heads = c->kda_heads, .D = c->kda_head_dim, .K = c->kda_conv,
                        .lb = c->kda_gate_lower_bound, .eps = (R)c->eps, .q = s->w->kq,
                        .k = s->w->kk, .v = s->w->kv, .g = s->w->kg, .f = s->w->kf, .b = s->w->kb,
                        .o = s->w->ko, .S = q->kda_S[l], .conv_st = q->kda_conv[l],
                        .conv_w = {y->conv[0], y->conv[1], y->conv[2]}, .A_log = y->A_log,
                        .dt_bias = y->dt_bias, .o_norm = y->o_norm, .id = y->q.id,
                        .skey = df_kgpu_seq_key(q->id, l), .s_host = q->kda_at[l] == AT_HOST,
                        .nrow = nrow, .rkey = s->rkey};
  if (fused) {
    /* the projections and o_proj there too: xn in, the layer's output out */
    const df_wmat *W[8] = {&y->q, &y->k, &y->v, &y->g, &y->fa, &y->b, &y->fb, &y->o};
    memcpy(a.W, W, sizeof W);
    a.x = pre ? s->w->xq.x : s->w->xn, a.pre = pre, a.defer = pre && s->w->a_want;
    a.ldx = (size_t)c->hidden, a.out = s->w->a, a.ldo = (size_t)c->hidden;
  }
  q->gpu = g;
  int rc = df_kgpu_kda(g, &a);
  if (!rc) s->w->a_dev = a.deferred;
  if (rc == -2) q->lost = 1;
  if (!rc) q->kda_at[l] = a.kept ? AT_DEV : AT_HOST;
  for (int t = 0; !rc && t < nrow; t++) {
    s->rowmk[t]->q.gpu = g;
    s->rowmk[t]->q.kda_at[l] = AT_DEV;
  }
  return rc;
}
#endif

static int lost_state(const df_k3_run *r, df_err *e) {
  return df_err_set(e, "the GPU failed while it held this sequence's recurrent state (%s); the "
                       "sequence cannot go on: start it again",
                    r->kc->gpu ? df_kgpu_error(r->kc->gpu) : "no device");
}

static int kda_layer(const df_k3_run *r, ST *s, const df_k3_layer *y, int l, int T,
                     const df_kgpu_pre *pre, df_err *e) {
  const df_config *c = r->m->cfg;
  const df_kctx *kc = r->kc;
  size_t H = (size_t)c->hidden, P = (size_t)c->kda_heads * c->kda_head_dim;
#if !R_IS_F64
  /* on a device the whole layer in one call (its input made there too
   * with pre; without, when that cannot be); when it cannot, the steps */
  int fr = pre ? kda_gpu(r, s, y, l, T, 1, pre) : -1;
  if (fr == -1) {
    xn_host(r, s);
    fr = kda_gpu(r, s, y, l, T, 1, NULL);
  }
  if (!fr) return 0;
  if (fr == -2 || s->q.lost) return lost_state(r, e);
#else
  (void)pre;
#endif
  xn_host(r, s);
  mm_many(kc, 6, (const df_wmat *[]){&y->q, &y->k, &y->v, &y->g, &y->fa, &y->b}, s->w->xn, T, H,
          (R *[]){s->w->kq, s->w->kk, s->w->kv, s->w->kg, s->w->kfa, s->w->kb},
          (size_t[]){P, P, P, P, (size_t)c->kda_head_dim, (size_t)c->kda_heads});
  MM(kc, &y->fb, s->w->kfa, T, (size_t)c->kda_head_dim, s->w->kf, P);
#if !R_IS_F64
  if (!kda_gpu(r, s, y, l, T, 0, NULL)) {
    MM(kc, &y->o, s->w->ko, T, P, s->w->a, H);
    return 0;
  }
#endif
  /* the loops read and write the host's copy */
  if (seq_host_layer(&s->q, c, l) || s->q.lost) return lost_state(r, e);
  s->q.kda_at[l] = AT_HOST;
  for (int t = 0; t < s->nrowmk && t < T; t++) s->rowmk[t]->q.kda_at[l] = AT_HOST; /* written below */
  conv_job cj = {.k = KSEL(kc), .y = y, .X = {s->w->kq, s->w->kk, s->w->kv}, .st = s->q.kda_conv[l], .T = T,
                 .P = (int)P, .K = c->kda_conv, .per = 512, .rowmk = s->rowmk,
                 .nrow = s->nrowmk < T ? s->nrowmk : T, .l = l};
  df_pool_run(kc->pool, 3 * (int)((P + 511) / 512), conv_task, &cj);
  kda_job kj = {.k = KSEL(kc), .y = y, .c = c, .S = s->q.kda_S[l], .q = s->w->kq, .kk = s->w->kk,
                .v = s->w->kv, .g = s->w->kg, .f = s->w->kf, .b = s->w->kb, .o = s->w->ko, .thr = s->w->thr,
                .thr_stride = s->w->thr_stride, .T = T, .rowmk = s->rowmk,
                .nrow = s->nrowmk < T ? s->nrowmk : T, .l = l};
  df_pool_run(kc->pool, c->kda_heads, kda_head_task, &kj);
  MM(kc, &y->o, s->w->ko, T, P, s->w->a, H);
  return 0;
}

/* ------------------------------------------------------------------ MLA */

typedef struct {
  const KT *k;
  const df_k3_layer *y;
  const df_config *c;
  const R *cache, *q;
  R *g, *o;
  R *thr;
  size_t thr_stride;
  int pos0;
} mla_job;

/* One (row, head): scores against the latent cache with kv_b's key part
 * absorbed into the query, values read back through kv_b's value part. */
static void mla_task(void *ctx, int task, int thread) {
  const mla_job *j = ctx;
  const KT *k = j->k;
  const df_config *c = j->c;
  int Hm = c->mla_heads, t = task / Hm, h = task % Hm;
  int dn = c->qk_nope_dim, dr = c->qk_rope_dim, dv = c->v_head_dim, kr = c->kv_lora_rank;
  int n = j->pos0 + t + 1;
  size_t w = (size_t)(kr + dr);
  R *qlat = j->thr + (size_t)thread * j->thr_stride, *olat = qlat + kr, *sc = olat + kr;
  const R *q = j->q + (size_t)t * Hm * (dn + dr) + (size_t)h * (dn + dr);
  int r0 = h * (dn + dv);
  WMT(k, &j->y->kvb, r0, r0 + dn, q, qlat);
  R scale = (R)1 / SQRT((R)(dn + dr));
  for (int s = 0; s < n; s++) {
    const R *cs = j->cache + (size_t)s * w;
    R a = k->dot(qlat, cs, kr), b = k->dot(q + dn, cs + kr, dr);
    R sum = a + b;
    sc[s] = sum * scale;
  }
  k->softmax(sc, n);
  for (int i = 0; i < kr; i++) olat[i] = 0;
  for (int s = 0; s < n; s++) {
    const R *cs = j->cache + (size_t)s * w;
    R p = sc[s];
    for (int i = 0; i < kr; i++) {
      R x = p * cs[i];
      olat[i] += x;
    }
  }
  R *o = j->o + (size_t)t * Hm * dv + (size_t)h * dv;
  WMR(k, &j->y->kvb, r0 + dn, r0 + dn + dv, olat, 1, (size_t)kr, o, 1);
  if (c->mla_output_gate) {
    R *g = j->g + (size_t)t * Hm * dv + (size_t)h * dv; /* this task's slice */
    k->sigmoid(g, dv);
    for (int d = 0; d < dv; d++) o[d] *= g[d];
  }
}

#if !R_IS_F64
/* --device cuda: mla_task's work for every (row, head) on the GPU
 * (kgpu.h's df_kgpu_mla, the same floats), the cache's rows kept there
 * (only the new ones copied in); 0 when it did. */
static int mla_gpu(const df_k3_run *r, ST *s, const df_k3_layer *y, int l, int T, int fused,
                   const df_kgpu_pre *pre) {
  df_kgpu *g = r->kc->gpu;
  if (!g) return -1;
  const df_config *c = r->m->cfg;
  SEQ *q = &s->q;
  if (!q->gpu) q->gpu = g;
  df_kgpu_mla_args a = {.T = T, .heads = c->mla_heads, .n0 = q->pos, .dn = c->qk_nope_dim,
                        .dr = c->qk_rope_dim, .dv = c->v_head_dim, .kr = c->kv_lora_rank,
                        .kvb = &y->kvb, .q = s->w->mq, .cache = q->mla[l],
                        .g = c->mla_output_gate ? s->w->mg : NULL, .o = s->w->mo,
                        .skey = q->gpu == g ? df_kgpu_seq_key(q->id, l) : 0, .gen = q->gen};
  if (fused) {
    /* the projections, norms and o_proj there too: xn in; the layer's
     * output and the cache's new rows out */
    const df_wmat *W[5] = {&y->qa, &y->kva, &y->qb, c->mla_output_gate ? &y->mg : NULL, &y->mo};
    memcpy(a.W, W, sizeof W);
    a.x = pre ? s->w->xq.x : s->w->xn, a.pre = pre;
    a.ldx = (size_t)c->hidden, a.out = s->w->a, a.ldo = (size_t)c->hidden;
    a.qa_norm = y->qa_norm, a.kva_norm = y->kva_norm, a.eps = (R)c->eps;
    a.new_rows = q->mla[l] + (size_t)q->pos * mla_row_floats(c);
    a.q = a.g = NULL, a.o = NULL;
  }
  return df_kgpu_mla(g, &a);
}
#endif

static void mla_layer(const df_k3_run *r, ST *s, const df_k3_layer *y, int l, int T,
                      const df_kgpu_pre *pre) {
  const df_config *c = r->m->cfg;
  const df_kctx *kc = r->kc;
  size_t H = (size_t)c->hidden, Hm = (size_t)c->mla_heads, qr = (size_t)c->q_lora_rank;
  size_t kr = (size_t)c->kv_lora_rank, w = kr + (size_t)c->qk_rope_dim;
  size_t qw = Hm * (size_t)(c->qk_nope_dim + c->qk_rope_dim), ow = Hm * (size_t)c->v_head_dim;
#if !R_IS_F64
  /* on a device the whole layer in one call (with pre its input too);
   * when it cannot, the steps */
  if (pre && !mla_gpu(r, s, y, l, T, 1, pre)) return;
  xn_host(r, s);
  if (!mla_gpu(r, s, y, l, T, 1, NULL)) return;
#else
  (void)pre;
#endif
  xn_host(r, s);
  mm_many(kc, 2, (const df_wmat *[]){&y->qa, &y->kva}, s->w->xn, T, H, (R *[]){s->w->mqa, s->w->mc},
          (size_t[]){qr, w});
  rms_rows(KSEL(kc), s->w->mqa, s->w->mqa, y->qa_norm, T, (int)qr, c->eps);
  MM(kc, &y->qb, s->w->mqa, T, qr, s->w->mq, qw);
  R *cache = s->q.mla[l];
  for (int t = 0; t < T; t++) {
    R *dst = cache + (size_t)(s->q.pos + t) * w, *src = s->w->mc + (size_t)t * w;
    KSEL(kc)->rmsnorm(dst, src, y->kva_norm, (int)kr, c->eps);
    memcpy(dst + kr, src + kr, sizeof(R) * (w - kr));
  }
  if (c->mla_output_gate) MM(kc, &y->mg, s->w->xn, T, H, s->w->mg, ow);
#if !R_IS_F64
  if (!mla_gpu(r, s, y, l, T, 0, NULL)) {
    MM(kc, &y->mo, s->w->mo, T, ow, s->w->a, H);
    return;
  }
#endif
  mla_job j = {.k = KSEL(kc), .y = y, .c = c, .cache = cache, .q = s->w->mq, .g = s->w->mg, .o = s->w->mo,
               .thr = s->w->thr, .thr_stride = s->w->thr_stride, .pos0 = s->q.pos};
  df_pool_run(kc->pool, T * c->mla_heads, mla_task, &j);
  MM(kc, &y->mo, s->w->mo, T, ow, s->w->a, H);
}

/* ------------------------------------------------------------------ FFN */

/* fp32: kernels.h's df_ffn (on a device the whole FFN there, else SiTU
 * over the pool); float64 the same steps on its own drivers. */
static void gated_ffn(const df_kctx *kc, const df_config *c, const df_wmat *gate,
                      const df_wmat *up, const df_wmat *down, const R *x, int T, R *g,
                      R *u, R *out) {
  size_t H = (size_t)c->hidden;
#if R_IS_F64
  size_t I = (size_t)gate->rows;
  mm_many(kc, 2, (const df_wmat *[]){gate, up}, x, T, H, (R *[]){g, u}, (size_t[]){I, I});
  KSEL(kc)->situ(g, g, u, (int)(I * (size_t)T), c->situ_beta, c->situ_linear_beta);
  MM(kc, down, g, T, I, out, H);
#else
  df_ffn(kc, gate, up, down, x, T, H, c->situ_beta, c->situ_linear_beta, g, u, out, H);
#endif
}

/* 1 when the GPU's weight tier holds expert x of layer l now: it is not
 * read from the store (nor hinted to it); the tier above the RAM cache. */
static int gpu_holds(const df_k3_run *r, int l, int x) {
#if R_IS_F64
  (void)r, (void)l, (void)x;
  return 0;
#else
  return r->kc->gpu && df_kgpu_has_expert(r->kc->gpu, expert_key(l, x));
#endif
}

/* Gate-ahead prediction: layer l+1's router (sigmoid scores + correction
 * bias, top-k) applied to x, the union over the T rows handed to the store
 * as a hint for l+1. It only moves bytes: l+1 routes on its own input.
 * scores: the router's product of x already made (T x E, overwritten), or
 * NULL to make it here. */
static void gate_ahead(const df_k3_run *r, ST *s, int l, int T, const R *x, R *scores) {
  const df_config *c = r->m->cfg;
  const df_k3_layer *ny = &r->m->layers[l + 1];
  size_t H = (size_t)c->hidden, E = (size_t)c->n_experts, K = (size_t)c->top_k;
  if (!scores) {
    MM(r->kc, &ny->router, x, T, H, s->w->rl, E); /* rl is free once l is routed */
    scores = s->w->rl;
  }
  memset(s->w->gmark, 0, E);
  for (int t = 0; t < T; t++) {
    R *sc = scores + (size_t)t * E;
    KSEL(r->kc)->sigmoid(sc, (int)E);
    ROUTE(c, sc, ny->router_bias, s->w->gsel, s->w->gw);
    for (size_t i = 0; i < K; i++) s->w->gmark[s->w->gsel[i]] = 1;
  }
  int n = 0;
  for (size_t i = 0; i < E; i++)
    if (s->w->gmark[i] && !gpu_holds(r, l + 1, (int)i)) s->w->glist[n++] = (int)i;
  df_store_hint(r->store, l + 1, s->w->glist, n);
}

/* One routed expert on its rows, on the CPU: the rows gathered, gate and up,
 * SiTU, down, each row's output put in its (row, slot) place. */
static void expert_cpu(const df_k3_run *r, ST *s, const df_expert_layout *lay, int l, int idx,
                       const uint8_t *b) {
  const df_config *c = r->m->cfg;
  const df_kctx *kc = r->kc;
  size_t Lt = (size_t)c->latent, Mi = (size_t)c->moe_inter, K = (size_t)c->top_k;
  int n = s->w->eoff[idx + 1] - s->w->eoff[idx];
  const int *ent = s->w->eent + s->w->eoff[idx];
  for (int i = 0; i < n; i++)
    memcpy(s->w->eZ + (size_t)i * Lt, s->w->z + (size_t)(ent[i] / (int)K) * Lt, sizeof(R) * Lt);
  uint64_t key = expert_key(l, s->w->uexp[idx]);
  MMX(kc, key | 0, b + lay->w1p, b + lay->w1s, (int)Mi, (int)Lt, s->w->eZ, n, Lt, s->w->eH1, Mi);
  MMX(kc, key | 1, b + lay->w3p, b + lay->w3s, (int)Mi, (int)Lt, s->w->eZ, n, Lt, s->w->eH3, Mi);
  KSEL(kc)->situ(s->w->eH1, s->w->eH1, s->w->eH3, (int)(Mi * (size_t)n), c->situ_beta,
                 c->situ_linear_beta);
  MMX(kc, key | 2, b + lay->w2p, b + lay->w2s, (int)Lt, (int)Mi, s->w->eH1, n, Mi, s->w->eY, Lt);
  for (int i = 0; i < n; i++)
    memcpy(s->w->ybuf + (size_t)ent[i] * Lt, s->w->eY + (size_t)i * Lt, sizeof(R) * Lt);
}

#if !R_IS_F64
/* --device cuda: the batch's experts queued on the GPU as they arrive
 * (kgpu.h's df_kgpu_experts_*), the whole expert there (the record as one
 * entry of the weight tier, SiTU included), so the CPU only gathers rows
 * and, after the one wait, puts each output row in its place; the sum over
 * a row's experts stays step 6's, in ascending id. ecur[idx] keeps the
 * expert's first row in the GPU's batch (-1: computed on the CPU). Returns
 * 1 when the batch is on the GPU. */
static int experts_gpu_begin(const df_k3_run *r, const df_expert_layout *lay, int rows) {
  df_kgpu *g = r->kc->gpu;
  if (!g) return 0;
  const df_config *c = r->m->cfg;
  df_kgpu_xshape sh = {.inter = c->moe_inter, .latent = c->latent, .w1p = lay->w1p,
                       .w1s = lay->w1s, .w3p = lay->w3p, .w3s = lay->w3s, .w2p = lay->w2p,
                       .w2s = lay->w2s, .bytes = lay->total, .beta = c->situ_beta,
                       .linear_beta = c->situ_linear_beta};
  return !df_kgpu_experts_begin(g, &sh, rows);
}

static int expert_gpu(const df_k3_run *r, ST *s, int l, int idx, const uint8_t *b) {
  df_kgpu *g = r->kc->gpu;
  size_t Lt = (size_t)r->m->cfg->latent, K = (size_t)r->m->cfg->top_k;
  int n = s->w->eoff[idx + 1] - s->w->eoff[idx];
  const int *ent = s->w->eent + s->w->eoff[idx];
  float *in = df_kgpu_expert_in(g, n);
  if (!in) return -1;
  for (int i = 0; i < n; i++)
    memcpy(in + (size_t)i * Lt, s->w->z + (size_t)(ent[i] / (int)K) * Lt, sizeof(R) * Lt);
  return df_kgpu_expert(g, expert_key(l, s->w->uexp[idx]), b, n, &s->w->ecur[idx]);
}

static int experts_gpu_end(const df_k3_run *r, ST *s, df_err *e) {
  const float *out = df_kgpu_experts_end(r->kc->gpu);
  if (!out) return df_err_set(e, "%s", df_kgpu_error(r->kc->gpu));
  size_t Lt = (size_t)r->m->cfg->latent;
  for (int idx = 0; idx < s->w->nuexp; idx++) {
    if (s->w->ecur[idx] < 0) continue;
    const int *ent = s->w->eent + s->w->eoff[idx];
    for (int i = 0, n = s->w->eoff[idx + 1] - s->w->eoff[idx]; i < n; i++)
      memcpy(s->w->ybuf + (size_t)ent[i] * Lt, out + (size_t)(s->w->ecur[idx] + i) * Lt,
             sizeof(R) * Lt);
  }
  return 0;
}

/* The layer's end on the GPU (kgpu.h's df_kgpu_experts_end_tail: steps 6-9
 * and the shared expert there, ffo written) when every expert of the batch
 * is in the GPU's batch. 0 done; 1 not tried (an expert was computed here:
 * the caller ends the batch as usual); -1 the batch failed (e says why). */
static int experts_gpu_tail(const df_k3_run *r, ST *s, const df_k3_layer *y, int T, df_err *e) {
  const df_config *c = r->m->cfg;
  WS *w = s->w;
  for (int idx = 0; idx < w->nuexp; idx++) {
    if (w->ecur[idx] < 0) return 1;
    const int *ent = w->eent + w->eoff[idx];
    for (int i = 0, n = w->eoff[idx + 1] - w->eoff[idx]; i < n; i++) w->srow[ent[i]] = w->ecur[idx] + i;
  }
  int sh = c->n_shared > 0;
  df_kgpu_moe_tail a = {.T = T, .K = c->top_k, .slot_row = w->srow, .slot_w = w->selw,
                        .norm = c->latent_norm ? y->lat_norm : NULL, .norm_id = y->lat_up.id,
                        .eps = c->eps, .up = &y->lat_up, .sh_gate = sh ? &y->sh_gate : NULL,
                        .sh_up = &y->sh_up, .sh_down = &y->sh_down, .bg = c->situ_beta,
                        .bu = c->situ_linear_beta, .x = w->xn, .ldx = (size_t)c->hidden,
                        .xtok = w->xq.pending ? w->xtok : 0,
                        .out = w->ffo, .ldo = (size_t)c->hidden};
  if (df_kgpu_experts_end_tail(r->kc->gpu, &a))
    return df_err_set(e, "%s", df_kgpu_error(r->kc->gpu));
  return 0;
}
#endif

/* Starts the store's batch of the experts of uexp marked mark in eres (0:
 * those to read now, 2: those read late), ascending; xmap keeps their uexp
 * indices. Nothing to read starts nothing. */
static int reads_of(const df_k3_run *r, ST *s, int l, int T, uint8_t mark, df_err *e) {
  WS *w = s->w;
  w->nx = 0;
  for (int i = 0; i < w->nuexp; i++)
    if (w->eres[i] == mark) {
      w->xlist[w->nx] = w->uexp[i];
      w->xmap[w->nx++] = i;
    }
  return w->nx && df_store_begin(r->store, l, w->xlist, w->nx, T, e) ? -1 : 0;
}

/* Starts the batch's reads: the experts of uexp the GPU's tier does not
 * hold (with gpu 0, all of them), ascending as the store wants them. */
static int reads_begin(const df_k3_run *r, ST *s, int l, int T, int gpu, df_err *e) {
  WS *w = s->w;
  for (int i = 0; i < w->nuexp; i++) w->eres[i] = (uint8_t)(gpu && gpu_holds(r, l, w->uexp[i]));
  return reads_of(r, s, l, T, 0, e);
}

/* The reads begun (reads_begin), each expert computed as the store hands
 * it out: on the GPU's batch when on_gpu, else here. */
static int reads_run(const df_k3_run *r, ST *s, int l, int on_gpu, const df_expert_layout *lay,
                     double *t_exp, double *t_wait, int *n_exp, df_err *e) {
  (void)on_gpu;
  for (;;) {
    int j;
    const uint8_t *b;
    double tw = df_now();
    int got = df_store_next(r->store, &j, &b, e);
    double tc = df_now();
    *t_wait += tc - tw;
    if (got < 0) {
      df_store_end(r->store);
      return df_err_prefix(e, "layer %d: ", l);
    }
    if (got == 0) break;
    int idx = s->w->xmap[j];
#if !R_IS_F64
    if (on_gpu && !expert_gpu(r, s, l, idx, b)) {
      *t_exp += df_now() - tc;
      (*n_exp)++;
      continue;
    }
    s->w->ecur[idx] = -1; /* computed here, not in the GPU's batch */
#endif
    expert_cpu(r, s, lay, l, idx, b);
    *t_exp += df_now() - tc;
    (*n_exp)++;
  }
  df_store_end(r->store);
  return 0;
}

/* Step 5 of a MoE layer: the batch's experts (reads_begin done): those
 * the GPU's tier holds queued first (nothing to wait for), then the rest
 * as the store hands them out, each on its rows, on the GPU's batch when
 * gpu and a device are there, else here; an expert the tier has evicted
 * since reads_begin (the layer's own matrices can push it out) is read
 * after the others. 0; -1 on an error; 1 when the GPU's batch failed at
 * its end (e says why): its records are released, the caller reads them
 * again. */
static int experts_run(const df_k3_run *r, ST *s, int l, int gpu, const df_k3_layer *tail,
                       int *tailed, double *t_exp, double *t_wait, int *n_exp, df_err *e) {
  WS *w = s->w;
  df_expert_layout lay;
  df_expert_layout_of(r->m->cfg, &lay);
  int on_gpu = 0, nlate = 0;
#if !R_IS_F64
  on_gpu = gpu && experts_gpu_begin(r, &lay, w->eoff[w->nuexp]);
  for (int idx = 0; idx < w->nuexp; idx++) {
    if (!w->eres[idx]) continue;
    double tc = df_now();
    if (on_gpu && !expert_gpu(r, s, l, idx, NULL)) {
      *t_exp += df_now() - tc;
      (*n_exp)++;
      continue;
    }
    w->eres[idx] = 2;
    nlate++;
  }
#else
  (void)gpu;
#endif
  if (w->nx && reads_run(r, s, l, on_gpu, &lay, t_exp, t_wait, n_exp, e)) return -1;
  if (nlate) {
    int rows = w->eoff[w->nuexp] / r->m->cfg->top_k; /* each row picks top_k */
    if (reads_of(r, s, l, rows, 2, e) ||
        reads_run(r, s, l, on_gpu, &lay, t_exp, t_wait, n_exp, e))
      return -1;
  }
#if !R_IS_F64
  if (on_gpu) {
    double tg = df_now();
    int tr = tail ? experts_gpu_tail(r, s, tail, w->eoff[w->nuexp] / r->m->cfg->top_k, e) : 1;
    if (tr < 0 || (tr > 0 && experts_gpu_end(r, s, e))) return 1;
    *tailed = tr == 0;
    *t_exp += df_now() - tg;
  }
#else
  (void)tail, (void)tailed;
#endif
  return 0;
}

static int moe_layer(const df_k3_run *r, ST *s, const df_k3_layer *y, int l, int T,
                     const df_kgpu_pre *pre, df_err *e) {
  const df_config *c = r->m->cfg;
  const df_kctx *kc = r->kc;
  const KT *k = KSEL(kc);
  size_t H = (size_t)c->hidden, E = (size_t)c->n_experts, K = (size_t)c->top_k;
  size_t Lt = (size_t)c->latent;

  int ahead = l + 1 < c->n_layers && r->m->layers[l + 1].moe && df_store_wants_hint(r->store);
  int gin = r->gate_input;
  /* 1-3: route every row first. On a device the latent input (4) and the
   * next layer's gate-ahead scores are products of the same rows: they come
   * back in the router's round trip, the scores in gx (free with gate input
   * x). On the CPU they wait, so the expert reads overlap them. */
  int lat_done = 0;
  R *ahead_sc = NULL;
#if !R_IS_F64
  if (kc->gpu) {
    int nx = 2;
    const df_wmat *Wx[3] = {&y->router, &y->lat_down, NULL};
    R *Yx[3] = {s->w->rl, s->w->z, NULL};
    size_t ldy[3] = {E, Lt, E};
    if (ahead && gin == DF_GATE_FROM_X && E <= H) {
      Wx[nx] = &r->m->layers[l + 1].router, Yx[nx++] = s->w->gx;
      ahead_sc = s->w->gx;
    }
    /* with pre the device makes xn too and keeps it for the shared
     * experts (and adds the attention's output to p, p coming back with
     * the results); the gate-ahead of x + shared(x) wants the host's xin */
    df_kgpu_pre pa;
    if (pre) {
      pa = *pre;
      pa.add = s->w->a_dev, pa.sum = s->w->p;
    }
    const R *px = s->w->a_dev && s->w->a_pempty ? NULL : s->w->xq.x;
    if (!pre || (ahead && gin == DF_GATE_FROM_X_SHARED) ||
        df_kgpu_mm_pre(kc->gpu, &pa, nx, Wx, px, T, H, Yx, ldy, &s->w->xtok)) {
      xn_host(r, s);
      mm_many(kc, nx, Wx, s->w->xn, T, H, Yx, ldy);
    } else {
      s->w->a_dev = 0; /* p came back with the results */
    }
    lat_done = 1;
  }
#else
  (void)pre;
#endif
  if (!lat_done) MM(kc, &y->router, s->w->xn, T, H, s->w->rl, E);
  for (int t = 0; t < T; t++) {
    R *sc = s->w->rl + (size_t)t * E;
    k->sigmoid(sc, (int)E);
    ROUTE(c, sc, y->router_bias, s->w->sel + (size_t)t * K, s->w->selw + (size_t)t * K);
  }
  if (s->route_hook)
    s->route_hook(s->route_ud, l, as_f32(s, s->w->rl, (size_t)T * E), s->w->sel, T, (int)E, (int)K);
  /* group (row, slot) pairs by expert, experts ascending, rows ascending */
  memset(s->w->ecnt, 0, sizeof(int) * E);
  for (size_t i = 0; i < (size_t)T * K; i++) s->w->ecnt[s->w->sel[i]]++;
  int nu = 0;
  s->w->eoff[0] = 0;
  for (size_t x = 0; x < E; x++)
    if (s->w->ecnt[x]) {
      s->w->uexp[nu] = (int)x;
      s->w->eoff[nu + 1] = s->w->eoff[nu] + s->w->ecnt[x];
      s->w->ecnt[x] = nu++; /* now: index in uexp */
    }
  s->w->nuexp = nu;
  /* place entries with running cursors; rows come in ascending order */
  for (int i = 0; i < nu; i++) s->w->ecur[i] = s->w->eoff[i];
  for (size_t i = 0; i < (size_t)T * K; i++) s->w->eent[s->w->ecur[s->w->ecnt[s->w->sel[i]]]++] = (int)i;

  /* the reads start now; everything up to the expert loop overlaps them */
  if (reads_begin(r, s, l, T, 1, e)) return -1;
  if (ahead && gin == DF_GATE_FROM_X) {
    if (!ahead_sc) xn_host(r, s);
    gate_ahead(r, s, l, T, s->w->xn, ahead_sc);
  }
  /* 8: the shared experts (only needs x). On a device they wait for the
   * batch's end, which runs them there with steps 6-9 (one round trip for
   * the three), unless the gate-ahead wants their output first. */
  int tail = 0, tailed = 0;
#if !R_IS_F64
  tail = kc->gpu && !(ahead && gin == DF_GATE_FROM_X_SHARED);
#endif
  if (c->n_shared > 0 && !tail) {
    xn_host(r, s);
    gated_ffn(kc, c, &y->sh_gate, &y->sh_up, &y->sh_down, s->w->xn, T, s->w->f1, s->w->f2, s->w->ffo);
  }
  if (ahead && gin == DF_GATE_FROM_X_SHARED) {
    for (size_t i = 0; i < (size_t)T * H; i++)
      s->w->gx[i] = s->w->xin[i] + (c->n_shared > 0 ? s->w->ffo[i] : 0);
    rms_rows(k, s->w->gx, s->w->gx, r->m->layers[l + 1].post_norm, T, (int)H, c->eps);
    gate_ahead(r, s, l, T, s->w->gx, NULL);
  }

  /* 4: latent input */
  if (!lat_done) MM(kc, &y->lat_down, s->w->xn, T, H, s->w->z, Lt);

  /* 5: experts as the store hands them out */
  double t_exp = 0, t_wait = 0;
  int n_exp = 0;
  int rc = experts_run(r, s, l, 1, tail ? y : NULL, &tailed, &t_exp, &t_wait, &n_exp, e);
  if (rc == 1) {
    /* the GPU's batch failed after the store released its records: read
     * them again and compute the batch here (the same values) */
    df_log_warn("layer %d: the GPU's expert batch failed (%s); its experts are read again and "
                "computed on the CPU", l, e->msg);
    rc = reads_begin(r, s, l, T, 0, e)
             ? -1
             : experts_run(r, s, l, 0, NULL, &tailed, &t_exp, &t_wait, &n_exp, e);
  }
  if (rc) return -1;
  {
    df_k3_compute *cp = r->m->comp;
    int dec = T == 1;
    (dec ? cp->s : cp->pre_s)[DF_K3_T_EXPERTS] += t_exp;
    (dec ? cp->n : cp->pre_n)[DF_K3_T_EXPERTS] += (uint64_t)n_exp;
    *(dec ? &cp->store_wait_s : &cp->pre_store_wait_s) += t_wait;
    s->w->moe_excl = t_exp + t_wait;
  }
  if (tailed) return 0; /* steps 6-9 and the shared experts done on the device: ffo */
  xn_host(r, s);
  if (c->n_shared > 0 && tail)
    gated_ffn(kc, c, &y->sh_gate, &y->sh_up, &y->sh_down, s->w->xn, T, s->w->f1, s->w->f2, s->w->ffo);

  /* 6: fixed order: slots are in ascending expert id */
  for (int t = 0; t < T; t++) {
    R *rr = s->w->rr + (size_t)t * Lt;
    for (size_t d = 0; d < Lt; d++) rr[d] = 0;
    for (size_t i = 0; i < K; i++) {
      R wgt = s->w->selw[(size_t)t * K + i];
      const R *yv = s->w->ybuf + ((size_t)t * K + i) * Lt;
      for (size_t d = 0; d < Lt; d++) {
        R q = wgt * yv[d];
        rr[d] += q;
      }
    }
    if (c->latent_norm) k->rmsnorm(rr, rr, y->lat_norm, (int)Lt, c->eps);
  }
  /* 7-9 */
  MM(kc, &y->lat_up, s->w->rr, T, Lt, s->w->routed, H);
  if (c->n_shared > 0) {
    for (size_t i = 0; i < (size_t)T * H; i++) s->w->ffo[i] = s->w->routed[i] + s->w->ffo[i];
  } else {
    memcpy(s->w->ffo, s->w->routed, sizeof(R) * (size_t)T * H);
  }
  return 0;
}

/* --------------------------------------------------------------- driver */

/* df_kgpu_pre.pass: unique in the process, as the device's snapshots are
 * shared by every state that runs on it */
static uint64_t N(next_pass)(void) {
  static atomic_uint_fast64_t n;
  return (uint64_t)atomic_fetch_add(&n, 1) + 1;
}

int N(forward)(const df_k3_run *r, ST *s, const int *ids, int T, float *logits_last,
                 float *logits_all, df_err *e) {
  const df_k3 *m = r->m;
  const df_config *c = m->cfg;
  const df_kctx *kc = r->kc;
  if (T <= 0) return df_err_set(e, "forward: empty batch");
  for (int t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= c->vocab)
      return df_err_set(e, "token id %d at batch row %d is outside the vocabulary (vocab_size %d)",
                        ids[t], t, c->vocab);
  if (s->q.lost) return lost_state(r, e);
  if (reserve_ctx(s, s->q.pos + T, e)) return -1;
  reserve(s, T);
  reserve_thr(s, df_pool_size(kc->pool));

  size_t H = (size_t)c->hidden;
#if R_IS_F64
  if (s->w->nar_cap < (size_t)T * H) as_f32(s, s->w->h, (size_t)T * H); /* grows nar */
  if (df_k3_embed_rows(m, ids, T, s->w->nar, e)) return -1;
  for (size_t i = 0; i < (size_t)T * H; i++) s->w->h[i] = s->w->nar[i];
#else
  if (df_k3_embed_rows(m, ids, T, s->w->h, e)) return -1;
#endif
  int with_head = logits_all || logits_last;
  int nS = 0, pempty = 1;
  s->w->pass = N(next_pass)(), s->w->dsn = 0, s->w->xq.pending = 0, s->w->a_dev = 0;
  for (int l = 0; l < c->n_layers; l++) {
    const df_k3_layer *y = df_k3_acquire_layer(m, l, df_k3_next_streamed(m, l, with_head), e);
    if (!y) return -1;
    double tl0 = df_now();
    /* 5.1 step 1 */
    int keep = l % c->attn_res_block == 0;
    df_kgpu_pre pre;
    const df_kgpu_pre *ap =
        layer_input(r, s, T, nS, s->w->h, y->attn_res_norm, y->attn_res_proj, y->in_norm, 0, T,
                    keep, s->nrowmk == 0, y->kind == DF_LAYER_KDA ? y->q.id : y->qa.id, &pre);
    s->w->a_want = y->moe; /* its router's call can take the output */
    /* step 2 (after x_attn is taken: the snapshot holds this h) */
    if (keep) {
      memcpy(s->w->snaps + (size_t)nS * T * H, s->w->h, sizeof(R) * T * H);
      nS++;
      pempty = 1;
    } else {
      R *tmp = s->w->p;
      s->w->p = s->w->h;
      s->w->h = tmp;
      pempty = 0;
    }
    /* step 3 */
    if (y->kind == DF_LAYER_KDA) {
      if (kda_layer(r, s, y, l, T, ap, e)) {
        df_k3_release(m, l);
        return -1;
      }
    } else {
      mla_layer(r, s, y, l, T, ap);
    }
    /* the device kept h as snapshot nS - 1 only when it made xn from it */
    if (keep) s->w->dsn = ap && s->w->xq.pending ? nS : -1;
    if (s->w->a_dev) {
      s->w->a_pempty = pempty; /* p + a made by the router's call, or p_host */
    } else if (pempty) {
      R *tmp = s->w->p;
      s->w->p = s->w->a;
      s->w->a = tmp;
    } else {
      for (size_t i = 0; i < (size_t)T * H; i++) s->w->p[i] = s->w->p[i] + s->w->a[i];
    }
    double tl1 = df_now();
    /* step 4-5 */
    const df_kgpu_pre *mp = layer_input(r, s, T, nS, s->w->p, y->mlp_res_norm, y->mlp_res_proj,
                                        y->post_norm, 0, T, 0, y->moe, y->router.id, &pre);
    if (y->moe) {
      if (moe_layer(r, s, y, l, T, mp, e)) {
        df_k3_release(m, l);
        return -1;
      }
    } else {
      gated_ffn(kc, c, &y->gate, &y->up, &y->down, s->w->xn, T, s->w->f1, s->w->f2, s->w->ffo);
    }
    p_host(r, s); /* (the router's call has brought p back already) */
    if (s->q.lost) {
      df_k3_release(m, l);
      return lost_state(r, e);
    }
    for (size_t i = 0; i < (size_t)T * H; i++) s->w->h[i] = s->w->p[i] + s->w->ffo[i];
    {
      /* decode's parts per layer-pass; a prefill's per layer-row */
      double tl2 = df_now();
      df_k3_compute *cp = m->comp;
      double *cs = T == 1 ? cp->s : cp->pre_s;
      uint64_t *cn = T == 1 ? cp->n : cp->pre_n;
      int ka = y->kind == DF_LAYER_KDA ? DF_K3_T_KDA : DF_K3_T_MLA;
      int kf = y->moe ? DF_K3_T_MOE_TRUNK : DF_K3_T_DENSE;
      cs[ka] += tl1 - tl0;
      cn[ka] += (uint64_t)T;
      cs[kf] += tl2 - tl1 - (y->moe ? s->w->moe_excl : 0);
      cn[kf] += (uint64_t)T;
      s->w->moe_excl = 0;
    }
    df_k3_release(m, l);
    if (s->hook) s->hook(s->hook_ud, l, as_f32(s, s->w->h, (size_t)T * H), T, (int)H);
    if (s->cancel && s->cancel(s->cancel_ud)) return DF_K3_CANCELLED;
  }
  /* output: AR over the snapshots + h, final norm, lm_head */
  int t0 = logits_all ? 0 : T - 1, nt = logits_all ? T : 1;
  if (with_head) {
    const df_wmat *head = df_k3_acquire_head(m, df_k3_next_streamed(m, c->n_layers, 1), e);
    if (!head) return -1;
    double th = df_now();
    df_kgpu_pre pre;
    const df_kgpu_pre *hp = layer_input(r, s, T, nS, s->w->h, m->out_res_norm, m->out_res_proj,
                                        m->final_norm, t0, nt, 0, 1, head->id, &pre);
    size_t V = (size_t)c->vocab;
    float *dst = logits_all ? logits_all : logits_last;
#if R_IS_F64
    if ((size_t)nt * V > s->w->lg_cap) {
      free(s->w->lg);
      s->w->lg = fbuf((size_t)nt * V);
      s->w->lg_cap = (size_t)nt * V;
    }
    (void)hp; /* no device in float64: xn made */
    MM(kc, head, s->w->xn + (size_t)t0 * H, nt, H, s->w->lg, V);
    for (size_t i = 0; i < (size_t)nt * V; i++) dst[i] = (float)s->w->lg[i];
#else
    if (!hp || df_kgpu_mm_pre(kc->gpu, hp, 1, &head, s->w->h + (size_t)t0 * H, nt, H, &dst, &V,
                              NULL)) {
      xn_host(r, s);
      MM(kc, head, s->w->xn + (size_t)t0 * H, nt, H, dst, V);
    }
#endif
    if (logits_all && logits_last)
      memcpy(logits_last, logits_all + (size_t)(T - 1) * V, sizeof(float) * V);
    (T == 1 ? m->comp->s : m->comp->pre_s)[DF_K3_T_HEAD] += df_now() - th;
    (T == 1 ? m->comp->n : m->comp->pre_n)[DF_K3_T_HEAD] += (uint64_t)nt;
    df_k3_release(m, c->n_layers);
  }
  for (int t = 0; t < s->nrowmk && t < T; t++) s->rowmk[t]->q.pos = s->q.pos + t + 1;
  s->q.pos += T;
  return 0;
}
