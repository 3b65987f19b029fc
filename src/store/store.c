/* First store: experts straight from the mmap'd shards (no pack, no cache).
 * It validates once that each expert's six tensors are contiguous in one
 * shard, in upstream order, so a record is one span of bytes. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/codec.h"

struct df_store {
  const df_config *cfg;
  df_expert_layout lay;
  const uint8_t **rec; /* [layer * n_experts + e] start of the record, NULL for dense layers */
  int layer, n, next;
  const int *experts;
  uint64_t bytes_read;
};

void df_expert_layout_of(const df_config *c, df_expert_layout *l) {
  uint64_t I = (uint64_t)c->moe_inter, L = (uint64_t)c->latent, g = (uint64_t)c->expert_group;
  l->w1p = 0;
  l->w1s = l->w1p + I * L / 2;
  l->w2p = l->w1s + I * L / g;
  l->w2s = l->w2p + L * I / 2;
  l->w3p = l->w2s + L * I / g;
  l->w3s = l->w3p + I * L / 2;
  l->total = l->w3s + I * L / g;
}

static const char *part_name[6] = {"w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                                   "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};

int df_store_open(df_store **out, const df_st_set *set, const df_config *c,
                  const df_store_opts *o, df_err *e) {
  (void)o;
  df_store *s = df_xcalloc(1, sizeof *s);
  s->cfg = c;
  df_expert_layout_of(c, &s->lay);
  const uint64_t off[6] = {s->lay.w1p, s->lay.w1s, s->lay.w2p, s->lay.w2s, s->lay.w3p, s->lay.w3s};
  s->rec = df_xcalloc((size_t)c->n_layers * (size_t)c->n_experts, sizeof *s->rec);
  char name[256];
  for (int l = c->first_k_dense; l < c->n_layers; l++) {
    for (int x = 0; x < c->n_experts; x++) {
      const df_tensor *first = NULL;
      for (int p = 0; p < 6; p++) {
        snprintf(name, sizeof name, "language_model.model.layers.%d.block_sparse_moe.experts.%d.%s",
                 l, x, part_name[p]);
        const df_tensor *t = df_st_set_find(set, name);
        if (!t) {
          df_store_close(s);
          return df_err_set(e, "missing tensor %s", name);
        }
        if (t->dtype != DF_DT_U8) {
          df_store_close(s);
          return df_err_set(e, "%s: dtype %s, expected U8", name, df_dtype_name(t->dtype));
        }
        uint64_t want = (p == 5 ? s->lay.total : off[p + 1]) - off[p];
        if (t->nbytes != want) {
          df_store_close(s);
          return df_err_set(e, "%s: %llu bytes, expected %llu for this config", name,
                            (unsigned long long)t->nbytes, (unsigned long long)want);
        }
        if (p == 0) first = t;
        else if (t->file != first->file || t->offset != first->offset + off[p]) {
          df_store_close(s);
          return df_err_set(e,
                            "%s: expert tensors are not contiguous in upstream order "
                            "(w1 packed, w1 scale, w2 packed, w2 scale, w3 packed, w3 scale)",
                            name);
        }
        if (p % 2 == 1 && df_mxfp4_check_scales(t->data, t->nbytes, name, e) != 0) {
          df_store_close(s);
          return -1;
        }
      }
      s->rec[(size_t)l * c->n_experts + x] = first->data;
    }
  }
  *out = s;
  return 0;
}

void df_store_close(df_store *s) {
  if (!s) return;
  free(s->rec);
  free(s);
}

int df_store_begin(df_store *s, int layer, const int *experts, int n, df_err *e) {
  if (layer < s->cfg->first_k_dense || layer >= s->cfg->n_layers)
    return df_err_set(e, "store: layer %d has no routed experts", layer);
  for (int i = 0; i < n; i++)
    if (experts[i] < 0 || experts[i] >= s->cfg->n_experts || (i && experts[i] <= experts[i - 1]))
      return df_err_set(e, "store: layer %d: expert list not sorted/unique/in range", layer);
  s->layer = layer;
  s->experts = experts;
  s->n = n;
  s->next = 0;
  return 0;
}

int df_store_next(df_store *s, int *idx, const uint8_t **bytes, df_err *e) {
  (void)e;
  if (s->next >= s->n) return 0;
  int i = s->next++;
  *idx = i;
  *bytes = s->rec[(size_t)s->layer * s->cfg->n_experts + s->experts[i]];
  s->bytes_read += s->lay.total;
  return 1;
}

void df_store_end(df_store *s) { s->n = s->next = 0; }

void df_store_hint(df_store *s, int layer, const int *experts, int n) {
  (void)s, (void)layer, (void)experts, (void)n;
}

uint64_t df_store_bytes_read(const df_store *s) { return s->bytes_read; }

char *df_store_stats_json(const df_store *s) {
  char *j = df_xmalloc(128);
  snprintf(j, 128, "{\"expert_bytes_read\":%llu}", (unsigned long long)s->bytes_read);
  return j;
}
