/* The GPU's share of the memory plan (plan.h, "GPU memory"): pure, like
 * df_plan_make. The sizes mirror two other places, which a change there
 * must follow: the matrix products of a K3 pass that go to the device
 * (model/k3_forward_t.h's MM calls) and how kernels/kgpu.c stores and
 * sizes what it holds (a matrix's scales 256-byte aligned after its
 * weights; per-use buffers grown a quarter past what was asked). */
#include "plan/plan.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "plan/plan_int.h"

#define GPU_ALIGN 256 /* kgpu.c's ALIGN */

static uint64_t up_align(uint64_t n) { return (n + GPU_ALIGN - 1) / GPU_ALIGN * GPU_ALIGN; }
/* kgpu.c's scratch(): a buffer grows to a quarter more than asked */
static uint64_t grown(uint64_t n) { return n + n / 4; }

typedef void (*mat_fn)(void *ud, int64_t rows, int64_t cols, int bf16_only);

/* Unit u's products on the device (u == n_layers: the head). The router is
 * never int8 (k3_load.c's df_k3_int8_eligible); MLA's kv_b is applied per
 * head on the CPU, so it is not here. */
static void each_product(const df_config *c, int u, mat_fn fn, void *ud) {
  int64_t H = c->hidden, P = (int64_t)c->kda_heads * c->kda_head_dim, D = c->kda_head_dim;
  int64_t Hm = c->mla_heads, S = (int64_t)c->n_shared * c->moe_inter;
  if (u == c->n_layers) {
    fn(ud, c->vocab, H, 0);
    return;
  }
  if (c->layer_kind[u] == DF_LAYER_KDA) {
    for (int i = 0; i < 4; i++) fn(ud, P, H, 0); /* q, k, v, g */
    fn(ud, D, H, 0), fn(ud, P, D, 0), fn(ud, c->kda_heads, H, 0), fn(ud, H, P, 0);
  } else {
    int64_t ow = Hm * c->v_head_dim;
    fn(ud, c->q_lora_rank, H, 0);
    fn(ud, Hm * (c->qk_nope_dim + c->qk_rope_dim), c->q_lora_rank, 0);
    fn(ud, c->kv_lora_rank + c->qk_rope_dim, H, 0);
    if (c->mla_output_gate) fn(ud, ow, H, 0);
    fn(ud, H, ow, 0);
  }
  if (u < c->first_k_dense) {
    fn(ud, c->dense_inter, H, 0), fn(ud, c->dense_inter, H, 0), fn(ud, H, c->dense_inter, 0);
  } else {
    fn(ud, c->n_experts, H, 1);
    fn(ud, c->latent, H, 0), fn(ud, H, c->latent, 0);
    if (S > 0) fn(ud, S, H, 0), fn(ud, S, H, 0), fn(ud, H, S, 0);
  }
}

typedef struct sizer {
  int int8;
  uint64_t bytes, largest;
  int64_t max_rows, max_cols;
} sizer;

static void size_one(void *ud, int64_t rows, int64_t cols, int bf16_only) {
  sizer *z = ud;
  uint64_t rc = (uint64_t)rows * (uint64_t)cols;
  uint64_t b = z->int8 && !bf16_only && rows > 1 ? up_align(rc) + 4 * (uint64_t)rows : up_align(2 * rc);
  z->bytes += b;
  if (b > z->largest) z->largest = b;
  if (rows > z->max_rows) z->max_rows = rows;
  if (cols > z->max_cols) z->max_cols = cols;
}

void df_plan_gpu_units(const df_config *c, int int8, uint64_t *bytes, uint64_t *largest) {
  for (int u = 0; u <= c->n_layers; u++) {
    sizer z = {.int8 = int8};
    each_product(c, u, size_one, &z);
    bytes[u] = z.bytes;
    largest[u] = z.largest;
  }
}

/* The activation buffers of the largest batch: every product's input and
 * output at `rows` vectors (the head's logits for every row: the logits
 * commands ask for all of them), and a MoE batch's rows (rows x top_k, one
 * per routed pick) through the same two buffers and its gate and up
 * outputs. */
static void peruse_fixed(const df_config *c, int rows, uint64_t *act, uint64_t *experts) {
  sizer z = {0};
  for (int u = 0; u <= c->n_layers; u++) each_product(c, u, size_one, &z);
  if (z.max_cols < c->hidden) z.max_cols = c->hidden;
  uint64_t T = (uint64_t)(rows > 0 ? rows : 1);
  uint64_t in = 4 * T * (uint64_t)z.max_cols, out = 4 * T * (uint64_t)z.max_rows, h = 0;
  if (c->first_k_dense < c->n_layers) {
    uint64_t R = T * (uint64_t)c->top_k, xr = 4 * R * (uint64_t)c->latent;
    if (xr > in) in = xr;
    if (xr > out) out = xr;
    h = 2 * grown(4 * R * (uint64_t)c->moe_inter);
  }
  *act = grown(in) + grown(out);
  *experts = h;
}

void df_plan_gpu_free(df_plan_gpu *g) {
  if (!g) return;
  free(g->on_gpu);
  g->on_gpu = NULL;
}

/* The units on the GPU within room bytes: all, or largest first (ties to
 * the lower index) while they fit. Returns their bytes. */
static uint64_t choose(const df_plan_gpu_in *in, uint64_t room, uint8_t *on, const int *ord) {
  uint64_t total = 0, got = 0;
  for (int u = 0; u < in->nunits; u++) total += in->unit_bytes[u];
  memset(on, 0, (size_t)(in->nunits > 0 ? in->nunits : 1));
  if (total <= room) {
    memset(on, 1, (size_t)in->nunits);
    return total;
  }
  for (int i = 0; i < in->nunits; i++) {
    int u = ord[i];
    if (in->unit_bytes[u] <= room - got) {
      on[u] = 1;
      got += in->unit_bytes[u];
    }
  }
  return got;
}

uint64_t df_plan_gpu_state_bytes(const df_config *c, int ctx, int marks, int self) {
  uint64_t one = df_plan_state_bytes(c, ctx);
  return one * (self ? 2 : 1) + (uint64_t)(marks > 0 ? marks : 0) * df_plan_state_bytes(c, 0);
}

void df_plan_gpu_make(df_plan_gpu *g, const df_plan_gpu_in *in) {
  const df_config *c = in->cfg;
  int nu = in->nunits > 0 ? in->nunits : 0;
  memset(g, 0, sizeof *g);
  g->budget = in->budget;
  g->outside = in->outside;
  g->state_bytes = in->state_bytes;
  g->nunits = nu;
  g->max_rows = in->max_rows > 0 ? in->max_rows : 1;
  g->on_gpu = df_xcalloc((size_t)(nu ? nu : 1), 1);
  int *ord = df_xmalloc(sizeof(int) * (size_t)(nu ? nu : 1));
  for (int u = 0; u < nu; u++) {
    ord[u] = u;
    g->spine_total += in->unit_bytes[u];
  }
  for (int i = 1; i < nu; i++) /* largest first, ties to the lower index: df_plan_make's order */
    for (int j = i; j > 0; j--) {
      int a = ord[j - 1], b = ord[j];
      if (in->unit_bytes[a] > in->unit_bytes[b] || (in->unit_bytes[a] == in->unit_bytes[b] && a < b))
        break;
      ord[j - 1] = b;
      ord[j] = a;
    }
  int moe = c->first_k_dense < c->n_layers;
  uint64_t rec = moe ? up_align(in->expert_record_bytes) : 0; /* one entry, aligned as kgpu's */
  uint64_t kmin = (uint64_t)(c->top_k < c->n_experts ? c->top_k : c->n_experts);
  g->expert_min_bytes = kmin * rec;
  peruse_fixed(c, g->max_rows, &g->peruse_act, &g->peruse_experts);
  /* The weight buffer depends on what is not kept, and where the device
   * beyond the tier is short, its size comes out of the tier, which may
   * keep less: reserve the largest buffer seen until the choice needs no
   * more (it only grows, over a finite set of sizes, so this ends). */
  uint64_t wres = 0;
  for (;;) {
    uint64_t need = g->peruse_act + g->peruse_experts + wres + g->state_bytes;
    g->given_back = in->outside != DF_PLAN_GPU_UNKNOWN && need > in->outside ? need - in->outside : 0;
    g->usable = in->budget > g->given_back ? in->budget - g->given_back : 0;
    uint64_t room = g->usable > g->expert_min_bytes ? g->usable - g->expert_min_bytes : 0;
    g->spine_bytes = choose(in, room, g->on_gpu, ord);
    uint64_t w = 0;
    for (int u = 0; u < nu; u++)
      if (!g->on_gpu[u] && in->unit_largest[u] > w) w = in->unit_largest[u];
    if (moe && g->usable - g->spine_bytes < rec && rec > w) w = rec; /* experts refused too */
    w = grown(w);
    if (w <= wres) break;
    wres = w;
  }
  g->peruse_weights = wres;
  g->peruse_bytes = g->peruse_act + g->peruse_experts + g->peruse_weights;
  g->n_gpu = 0;
  for (int u = 0; u < nu; u++) g->n_gpu += g->on_gpu[u];
  g->keep_cap = g->n_gpu == nu ? UINT64_MAX : g->spine_bytes;
  g->expert_bytes = g->usable - g->spine_bytes;
  if (g->expert_bytes > in->expert_total_bytes) g->expert_bytes = in->expert_total_bytes;
  g->expert_records = rec ? g->expert_bytes / rec : 0;
  g->expert_records_all = rec ? in->expert_total_bytes / rec : 0;
  free(ord);
}

char *df_plan_gpu_text(const df_plan_gpu *g) {
  char on[1024], off[1024], beyond[160], given[64] = "";
  df_plan_unit_list(g->on_gpu, g->nunits, 1, on, sizeof on);
  df_plan_unit_list(g->on_gpu, g->nunits, 0, off, sizeof off);
  if (g->outside == DF_PLAN_GPU_UNKNOWN)
    snprintf(beyond, sizeof beyond, "the device needs them free beyond the tier");
  else if (g->given_back)
    snprintf(beyond, sizeof beyond, "%.1f MB free beyond the tier: the tier gives %.1f MB back",
             g->outside / 1e6, g->given_back / 1e6);
  else
    snprintf(beyond, sizeof beyond, "%.1f MB free beyond the tier", g->outside / 1e6);
  if (g->usable != g->budget) snprintf(given, sizeof given, " of %.1f MB", g->budget / 1e6);
  size_t cap = sizeof on + sizeof off + 1024;
  char *t = df_xmalloc(cap);
  snprintf(t, cap,
           "gpu      tier %.1f MB%s: spine %.1f of %.1f MB kept (%d of %d units: layers %s; per use: "
           "%s), routed experts %.1f MB (%" PRIu64 " of %" PRIu64 " records, at least %.1f MB)\n"
           "gpu      per-use buffers %.1f MB at %d rows (activations %.1f, expert rows %.1f, "
           "weights not kept %.1f); sequence state %.1f MB; %s\n",
           g->usable / 1e6, given, g->spine_bytes / 1e6, g->spine_total / 1e6, g->n_gpu, g->nunits, on,
           off, g->expert_bytes / 1e6, g->expert_records, g->expert_records_all,
           g->expert_min_bytes / 1e6, g->peruse_bytes / 1e6, g->max_rows, g->peruse_act / 1e6,
           g->peruse_experts / 1e6, g->peruse_weights / 1e6, g->state_bytes / 1e6, beyond);
  return t;
}

char *df_plan_gpu_json(const df_plan_gpu *g) {
  json_t *o = json_object();
#define I(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
  I("budget_bytes", g->budget);
  json_object_set_new(o, "outside_bytes", g->outside == DF_PLAN_GPU_UNKNOWN
                                              ? json_null()
                                              : json_integer((json_int_t)g->outside));
  I("given_back_bytes", g->given_back);
  I("tier_bytes", g->usable);
  I("spine_total_bytes", g->spine_total);
  I("spine_gpu_bytes", g->spine_bytes);
  json_object_set_new(o, "keep_cap_bytes",
                      g->keep_cap == UINT64_MAX ? json_null() : json_integer((json_int_t)g->keep_cap));
  I("gpu_units_count", g->n_gpu);
  I("expert_tier_bytes", g->expert_bytes);
  I("expert_min_bytes", g->expert_min_bytes);
  I("expert_records", g->expert_records);
  I("expert_records_total", g->expert_records_all);
  I("max_rows", g->max_rows);
  I("peruse_bytes", g->peruse_bytes);
  I("peruse_activation_bytes", g->peruse_act);
  I("peruse_expert_bytes", g->peruse_experts);
  I("peruse_weight_bytes", g->peruse_weights);
  I("state_bytes", g->state_bytes);
#undef I
  json_t *a = json_array(), *b = json_array();
  for (int u = 0; u < g->nunits; u++) {
    json_t *v = u == g->nunits - 1 ? json_string("head") : json_integer(u);
    json_array_append_new(g->on_gpu[u] ? a : b, v);
  }
  json_object_set_new(o, "gpu_units", a);
  json_object_set_new(o, "per_use_units", b);
  char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return t;
}
