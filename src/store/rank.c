/* The ranking of a drive's reads (rank.h). */
#include "store/rank.h"

int df_rank_spine_max(int qd) { return qd > 1 ? qd - 1 : 1; }

df_rank_class df_rank_next(const df_rank_drive *d) {
  int free_slots = d->qd - d->inflight;
  if (free_slots <= 0) return DF_RANK_NONE;
  if (d->waiting[DF_RANK_DEMAND] > 0) return DF_RANK_DEMAND;
  int spine_max = df_rank_spine_max(d->qd);
  if (d->waiting[DF_RANK_SPINE] > 0) {
    if (d->spine_inflight < spine_max) return DF_RANK_SPINE;
    return DF_RANK_NONE; /* the spare slot is kept for a demand read */
  }
  if (d->waiting[DF_RANK_PREFETCH] > 0 && d->inflight < d->pf_max && free_slots > 1)
    return DF_RANK_PREFETCH;
  return DF_RANK_NONE;
}
