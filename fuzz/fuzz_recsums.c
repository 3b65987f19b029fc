/* libFuzzer target: the record-sums parser accepts or rejects any input
 * without crashing; whatever it accepts has safe shard names, records inside
 * their shards, sorted and disjoint, and lookups that find each record. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote/hub.h"
#include "remote/recsums.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  df_recsums *r;
  df_err e;
  if (df_recsums_parse((const char *)data, size, "fuzz", &r, &e) != 0) return 0;
  for (int i = 0; i < df_recsums_nshards(r); i++) {
    const df_recsum_shard *s = df_recsums_shard(r, i);
    if (!df_hub_name_valid(s->name) || strchr(s->name, '/') || strlen(s->sha256) != 64) abort();
    if (df_recsums_find_shard(r, s->name) != i) abort();
  }
  for (int i = 0; i < df_recsums_nrecords(r); i++) {
    const df_recsum *q = df_recsums_record(r, i);
    if (q->shard < 0 || q->shard >= df_recsums_nshards(r)) abort();
    const df_recsum_shard *s = df_recsums_shard(r, q->shard);
    if (!q->len || q->off > s->size || q->len > s->size - q->off) abort();
    if (df_recsums_lookup(r, q->shard, q->off) != q) abort();
    if (i) {
      const df_recsum *p = df_recsums_record(r, i - 1);
      if (p->shard > q->shard || (p->shard == q->shard && p->off + p->len > q->off)) abort();
    }
  }
  df_recsums_free(r);
  return 0;
}
