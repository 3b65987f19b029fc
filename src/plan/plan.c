/* The planner proper (pure: no I/O). See plan.h for the policy. */
#include "plan/plan.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "plan/plan_int.h"

#define CTX_DEFAULT 32768
#define CTX_MIN 1024        /* an automatic context is never shrunk below this */
#define THREADS_BOUND 64    /* per-thread scratch is budgeted for this many threads */

/* A float64 state (--precision f64) is twice an fp32 one. */
static uint64_t state_of(const df_plan_in *in, int ctx) {
  return df_plan_state_bytes(in->cfg, ctx) * (in->f64 ? 2 : 1);
}

/* What the kept conversation states can take for a context of ctx. */
static uint64_t reuse_of(const df_plan_in *in, int ctx) {
  if (!in->reuse_bytes) return 0;
  if (in->reuse_states <= 0) return in->reuse_bytes;
  uint64_t one = state_of(in, ctx) + 4 * (uint64_t)in->cfg->vocab;
  uint64_t all = (uint64_t)in->reuse_states * one;
  return all < in->reuse_bytes ? all : in->reuse_bytes;
}

/* Speculation: the rollback marks, the block's logits and a draft model's
 * weights (spec_bytes), a draft model's cache over the context, and for a
 * self draft its own state. */
static uint64_t spec_of(const df_plan_in *in, int ctx) {
  return in->spec_bytes + in->spec_per_pos * (uint64_t)ctx + (in->spec_self ? state_of(in, ctx) : 0);
}

/* Per-sequence memory: the live state, the kept ones, speculation's. */
static uint64_t seq_bytes(const df_plan_in *in, int ctx) {
  return state_of(in, ctx) + reuse_of(in, ctx) + spec_of(in, ctx);
}

void df_plan_state_parts(const df_config *c, uint64_t *fixed, uint64_t *per_pos) {
  uint64_t P = (uint64_t)c->kda_heads * c->kda_head_dim, D = (uint64_t)c->kda_head_dim;
  uint64_t K1 = c->kda_conv - 1 > 0 ? (uint64_t)(c->kda_conv - 1) : 1;
  *fixed = (uint64_t)c->n_kda * 4 * (P * D + 3 * K1 * P);
  *per_pos = (uint64_t)c->n_mla * 4 * (uint64_t)(c->kv_lora_rank + c->qk_rope_dim);
}

uint64_t df_plan_state_bytes(const df_config *c, int ctx) {
  uint64_t fixed, per_pos;
  df_plan_state_parts(c, &fixed, &per_pos);
  return fixed + per_pos * (uint64_t)(ctx > 0 ? ctx : 0);
}

char *df_plan_state_text(const df_config *c, int f64) {
  uint64_t fixed, per_pos, x = f64 ? 2 : 1;
  df_plan_state_parts(c, &fixed, &per_pos);
  double mib = 1024.0 * 1024.0;
  char *t = df_xmalloc(512);
  snprintf(t, 512,
           "state    sequence state %.1f MiB at %d positions, %.1f MiB at %d (%s; KDA matrices and "
           "conv windows %.1f MiB fixed, MLA latent cache %.1f KiB per position; the last logits "
           "add %.2f MiB)\n",
           x * (fixed + per_pos * DF_PLAN_STATE_SHOWN_A) / mib, DF_PLAN_STATE_SHOWN_A,
           x * (fixed + per_pos * DF_PLAN_STATE_SHOWN_B) / mib, DF_PLAN_STATE_SHOWN_B,
           f64 ? "float64" : "fp32", x * fixed / mib, x * per_pos / 1024.0,
           4.0 * c->vocab / mib);
  return t;
}

/* Mirrors the forward pass's scratch (k3_forward.c reserve/reserve_thr) and
 * the session's logits. */
uint64_t df_plan_scratch_bytes(const df_config *c, int rows) {
  uint64_t T = rows > 0 ? (uint64_t)rows : 1, H = (uint64_t)c->hidden;
  uint64_t P = (uint64_t)c->kda_heads * c->kda_head_dim, D = (uint64_t)c->kda_head_dim;
  uint64_t nb = (uint64_t)((c->n_layers + c->attn_res_block - 1) / c->attn_res_block);
  uint64_t F = (uint64_t)c->dense_inter, S = (uint64_t)c->n_shared * c->moe_inter;
  if (S > F) F = S;
  uint64_t Lt = (uint64_t)c->latent, K = (uint64_t)c->top_k, E = (uint64_t)c->n_experts;
  uint64_t Mi = (uint64_t)c->moe_inter, Hm = (uint64_t)c->mla_heads;
  uint64_t per_row = 7 * H + nb * H + 2 * F;
  if (c->n_kda) per_row += 6 * P + D + (uint64_t)c->kda_heads;
  if (c->n_mla)
    per_row += (uint64_t)c->q_lora_rank + Hm * (uint64_t)(c->qk_nope_dim + c->qk_rope_dim) +
               (uint64_t)(c->kv_lora_rank + c->qk_rope_dim) + 2 * Hm * (uint64_t)c->v_head_dim;
  if (c->first_k_dense < c->n_layers) per_row += E + 2 * K + (4 + K) * Lt + H + 2 * Mi + 2 * K;
  uint64_t thr = 2 * D + 2 * (uint64_t)c->kv_lora_rank + H + nb + 66;
  return 4 * (T * per_row + THREADS_BOUND * thr) + 4 * (uint64_t)c->vocab * 2;
}

char *df_plan_state_json(const df_config *c, int f64) {
  uint64_t fixed, per_pos, x = f64 ? 2 : 1;
  df_plan_state_parts(c, &fixed, &per_pos);
  json_t *o = json_object();
#define I(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
  I("fixed_bytes", x * fixed);
  I("per_position_bytes", x * per_pos);
  I("bytes_at_4096", x * (fixed + per_pos * DF_PLAN_STATE_SHOWN_A));
  I("bytes_at_32768", x * (fixed + per_pos * DF_PLAN_STATE_SHOWN_B));
  I("logits_bytes", 4 * (uint64_t)c->vocab);
#undef I
  json_object_set_new(o, "precision", json_string(f64 ? "float64" : "fp32"));
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return t;
}

void df_plan_free(df_plan *p) {
  if (!p) return;
  free(p->resident);
  p->resident = NULL;
}

static uint64_t max_read(const df_plan_in *in, const uint8_t *resident) {
  uint64_t m = 0;
  for (int u = 0; u < in->nunits; u++)
    if (!resident[u] && in->unit_read[u] > m) m = in->unit_read[u];
  return m;
}

static double mb(uint64_t b) { return (double)b / 1e6; }

int df_plan_make(df_plan *p, const df_plan_in *in, df_err *e) {
  const df_config *c = in->cfg;
  memset(p, 0, sizeof *p);
  p->mem_limit = in->mem_limit;
  p->nunits = in->nunits;
  p->resident = df_xcalloc((size_t)(in->nunits > 0 ? in->nunits : 1), 1);
  p->embed_row_bytes = in->embed_row_bytes;
  p->fixed_bytes = in->fixed_bytes;
  int rows = in->max_rows > 0 ? in->max_rows : 1;
  p->scratch_bytes = df_plan_scratch_bytes(c, rows) * (in->f64 ? 2 : 1);
  uint64_t inflight = (uint64_t)rows * (uint64_t)c->top_k;
  if (inflight > (uint64_t)c->n_experts) inflight = (uint64_t)c->n_experts;
  p->expert_min_bytes = c->first_k_dense < c->n_layers ? inflight * in->expert_record_bytes : 0;
  p->cache_given = in->cache_req >= 0;
  uint64_t cache_given = p->cache_given ? (uint64_t)in->cache_req : 0;
  if (in->expert_total_bytes && cache_given > in->expert_total_bytes)
    cache_given = in->expert_total_bytes;

  int ctx_auto = in->ctx_req <= 0;
  int ctx = ctx_auto ? (c->max_pos < CTX_DEFAULT ? (int)c->max_pos : CTX_DEFAULT) : in->ctx_req;
  if (ctx < 1) ctx = 1;
  uint64_t spine = 0, forced = 0;
  for (int u = 0; u < in->nunits; u++) {
    spine += in->unit_bytes[u];
    if (in->must_resident && in->must_resident[u]) {
      p->resident[u] = 1;
      forced += in->unit_bytes[u];
    }
  }
  uint64_t base = p->scratch_bytes + p->fixed_bytes + p->expert_min_bytes + cache_given;
  uint64_t M = in->mem_limit;

  /* everything resident? */
  if (base + seq_bytes(in, ctx) + spine <= M) {
    for (int u = 0; u < in->nunits; u++) p->resident[u] = 1;
  } else {
    /* Streaming. The ring holds the largest streamed unit twice, so which
     * units stream decides the ring: for every candidate ring size R (a
     * streamable unit's read size), units that read more than R must be
     * resident, the rest are filled in largest first (equal value per byte,
     * so this keeps the most bytes), and the candidate keeping the most
     * spine resident wins (ties: the smaller ring). The smallest R is the
     * least memory streaming can work with. */
    int nu = in->nunits;
    uint8_t *cand = df_xmalloc((size_t)(nu > 0 ? nu : 1)), *best = df_xmalloc((size_t)(nu > 0 ? nu : 1));
    int *ord = df_xmalloc(sizeof(int) * (size_t)(nu > 0 ? nu : 1));
    int n = 0;
    for (int u = 0; u < nu; u++)
      if (!p->resident[u]) ord[n++] = u;
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0; j--) {
        int a = ord[j - 1], b = ord[j];
        if (in->unit_bytes[a] > in->unit_bytes[b] ||
            (in->unit_bytes[a] == in->unit_bytes[b] && a < b))
          break;
        ord[j - 1] = b;
        ord[j] = a;
      }
    for (;;) {
      int found = 0;
      uint64_t best_res = 0, best_ring = 0;
      uint64_t st = seq_bytes(in, ctx);
      for (int ci = 0; ci < n; ci++) {
        uint64_t R = in->unit_read[ord[ci]];
        memcpy(cand, p->resident, (size_t)nu);
        uint64_t res = forced;
        for (int i = 0; i < n; i++)
          if (in->unit_read[ord[i]] > R) cand[ord[i]] = 1, res += in->unit_bytes[ord[i]];
        uint64_t need = base + st + res + DF_PLAN_RING_SLOTS * R;
        if (need > M) continue;
        uint64_t budget = M - need;
        for (int i = 0; i < n; i++) {
          int u = ord[i];
          if (!cand[u] && in->unit_bytes[u] <= budget) {
            cand[u] = 1;
            budget -= in->unit_bytes[u];
            res += in->unit_bytes[u];
          }
        }
        uint64_t ring = DF_PLAN_RING_SLOTS * max_read(in, cand);
        if (!found || res > best_res || (res == best_res && ring < best_ring)) {
          found = 1;
          best_res = res;
          best_ring = ring;
          memcpy(best, cand, (size_t)nu);
        }
      }
      if (found) break;
      if (ctx_auto && ctx > CTX_MIN) {
        ctx /= 2;
        continue;
      }
      /* the least memory: the candidate ring needing the least in all */
      uint64_t least = UINT64_MAX, lring = 0;
      for (int ci = 0; ci < n; ci++) {
        uint64_t R = in->unit_read[ord[ci]], need = base + forced + st + DF_PLAN_RING_SLOTS * R;
        for (int i = 0; i < n; i++)
          if (in->unit_read[ord[i]] > R) need += in->unit_bytes[ord[i]];
        if (need < least) least = need, lring = DF_PLAN_RING_SLOTS * R;
      }
      if (least == UINT64_MAX) least = base + forced + st, lring = 0; /* nothing can stream */
      free(cand), free(best), free(ord);
      char kept[192] = "";
      if (in->reuse_bytes)
        snprintf(kept, sizeof kept, " + kept conversation states %.2f MB", mb(reuse_of(in, ctx)));
      if (in->spec_bytes)
        snprintf(kept + strlen(kept), sizeof kept - strlen(kept), " + speculation (--draft) %.2f MB",
                 mb(spec_of(in, ctx)));
      return df_err_set(e,
                        "memory plan: %.2f MB do not fit even with spine layers streamed and "
                        "no expert cache; at least %.2f MB (%" PRIu64 " bytes) are needed (state "
                        "for %d positions %.2f MB%s, stream ring %.2f MB, experts in flight %.2f MB, "
                        "scratch %.2f MB, small tensors %.2f MB%s%s); raise --mem-limit, lower "
                        "--ctx or --prefill-chunk%s%s",
                        mb(M), mb(least), least, ctx, mb(state_of(in, ctx)),
                        kept,
                        mb(lring), mb(p->expert_min_bytes),
                        mb(p->scratch_bytes), mb(p->fixed_bytes),
                        least > base + forced + st + lring ? ", spine units larger than the ring" : "",
                        least > base + forced + st + lring ? " that stay resident" : "",
                        p->cache_given ? ", or --cache-mb" : "", in->reuse_bytes ? ", or --reuse-mb" : "");
    }
    memcpy(p->resident, best, (size_t)nu);
    /* the winner's ring may be smaller than its candidate size: fill what
     * that frees (which can only shrink the ring further) until nothing fits */
    for (int changed = 1; changed;) {
      changed = 0;
      uint64_t used = base + seq_bytes(in, ctx) + DF_PLAN_RING_SLOTS * max_read(in, p->resident);
      for (int u = 0; u < nu; u++) used += p->resident[u] ? in->unit_bytes[u] : 0;
      for (int i = 0; i < n && used <= M; i++) {
        int u = ord[i];
        if (!p->resident[u] && in->unit_bytes[u] <= M - used) {
          p->resident[u] = 1;
          used += in->unit_bytes[u];
          changed = 1;
        }
      }
    }
    free(cand), free(best), free(ord);
    uint64_t nslot = max_read(in, p->resident);
    p->ring_slot_bytes = nslot;
    p->ring_slots = nslot ? DF_PLAN_RING_SLOTS : 0;
    p->ring_bytes = (uint64_t)p->ring_slots * nslot;
  }
  p->ctx = ctx;
  p->state_bytes = state_of(in, ctx);
  p->reuse_bytes = reuse_of(in, ctx);
  for (int u = 0; u < in->nunits; u++) {
    if (p->resident[u]) {
      p->resident_bytes += in->unit_bytes[u];
      p->n_resident++;
    } else {
      p->streamed_per_token += in->unit_bytes[u];
      p->n_streamed++;
    }
  }
  uint64_t used = p->scratch_bytes + p->fixed_bytes + p->expert_min_bytes + p->state_bytes +
                  p->reuse_bytes + p->ring_bytes + p->resident_bytes;
  if (p->cache_given) {
    p->cache_bytes = cache_given;
  } else {
    uint64_t rest = M > used ? M - used : 0;
    uint64_t def = in->cache_default > 0 ? (uint64_t)in->cache_default : 0;
    if (in->expert_total_bytes && def > in->expert_total_bytes) def = in->expert_total_bytes;
    p->cache_bytes = rest < def ? rest : def;
  }
  return 0;
}

static const char *unit_name(int nunits, int u, char *buf, size_t n) {
  if (u == nunits - 1) snprintf(buf, n, "head");
  else snprintf(buf, n, "%d", u);
  return buf;
}

void df_plan_unit_list(const uint8_t *flags, int nunits, int want, char *out, size_t n) {
  size_t o = 0;
  out[0] = 0;
  for (int u = 0; u < nunits && o + 32 < n;) {
    if (flags[u] != want) {
      u++;
      continue;
    }
    int v = u;
    while (v + 1 < nunits - 1 && flags[v + 1] == want) v++;
    char a[16], b[16];
    if (v > u)
      o += (size_t)snprintf(out + o, n - o, "%s%s-%s", o ? "," : "", unit_name(nunits, u, a, sizeof a),
                            unit_name(nunits, v, b, sizeof b));
    else
      o += (size_t)snprintf(out + o, n - o, "%s%s", o ? "," : "", unit_name(nunits, u, a, sizeof a));
    u = v + 1;
  }
  if (!o) snprintf(out, n, "none");
}

static void unit_list(const df_plan *p, int want, char *out, size_t n) {
  df_plan_unit_list(p->resident, p->nunits, want, out, n);
}

char *df_plan_text(const df_plan *p) {
  char res[1024], str[1024];
  unit_list(p, 1, res, sizeof res);
  unit_list(p, 0, str, sizeof str);
  size_t cap = sizeof res + sizeof str + 1024;
  char *buf = df_xmalloc(cap);
  snprintf(buf, cap,
           "plan     memory %.1f MB: resident spine %.1f MB (%d units: layers %s), streamed %d "
           "units (layers %s) %.1f MB per token, embedding one %" PRIu64 "-byte row per position\n"
           "plan     stream ring %d x %.1f MB, expert cache %.1f MB + %.1f MB in flight, state "
           "%.1f MB for %d positions, kept conversation states %.1f MB, scratch %.1f MB, small "
           "tensors %.1f MB\n",
           p->mem_limit / 1e6, p->resident_bytes / 1e6, p->n_resident, res, p->n_streamed, str,
           p->streamed_per_token / 1e6, p->embed_row_bytes, p->ring_slots, p->ring_slot_bytes / 1e6,
           p->cache_bytes / 1e6, p->expert_min_bytes / 1e6, p->state_bytes / 1e6, p->ctx,
           p->reuse_bytes / 1e6, p->scratch_bytes / 1e6, p->fixed_bytes / 1e6);
  return buf;
}

char *df_plan_json(const df_plan *p) {
  json_t *o = json_object();
#define I(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
  I("mem_limit", p->mem_limit);
  I("ctx", p->ctx);
  I("state_bytes", p->state_bytes);
  I("reuse_bytes", p->reuse_bytes);
  I("scratch_bytes", p->scratch_bytes);
  I("small_tensor_bytes", p->fixed_bytes);
  I("expert_inflight_bytes", p->expert_min_bytes);
  I("expert_cache_bytes", p->cache_bytes);
  I("ring_slots", p->ring_slots);
  I("ring_slot_bytes", p->ring_slot_bytes);
  I("resident_spine_bytes", p->resident_bytes);
  I("streamed_spine_bytes_per_token", p->streamed_per_token);
  I("embed_row_bytes", p->embed_row_bytes);
  I("resident_units", p->n_resident);
  I("streamed_units", p->n_streamed);
#undef I
  json_t *r = json_array(), *s = json_array();
  for (int u = 0; u < p->nunits; u++) {
    json_t *v = u == p->nunits - 1 ? json_string("head") : json_integer(u);
    json_array_append_new(p->resident[u] ? r : s, v);
  }
  json_object_set_new(o, "resident", r);
  json_object_set_new(o, "streamed", s);
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return t;
}
