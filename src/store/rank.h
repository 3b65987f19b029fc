/* The read scheduler's ranking of one drive's reads, alone so that tests can
 * see it. Three classes wait per drive: the experts' demand reads (a batch
 * waits on them now), spine reads (the model's streamed spine layers:
 * demand reads known in advance) and speculative expert reads (prefetch).
 * When the drive has a free slot it takes:
 *   1. a demand read, always first;
 *   2. else a spine read, if fewer than qd - 1 spine reads are in flight
 *      (one slot stays for a demand read that arrives while a layer's
 *      spine streams; qd 1: one spine read);
 *   3. else a prefetch, only while no demand or spine read waits, fewer
 *      than pf_max reads are in flight, and taking it leaves a slot free
 *      (a prefetch never takes the last free slot: with qd 1 no prefetch).
 * A demand read that arrives later thus waits behind at most pf_max
 * speculative reads, and a spine read never waits behind one it did not
 * find in flight. */
#ifndef DF_STORE_RANK_H
#define DF_STORE_RANK_H

typedef enum {
  DF_RANK_NONE = -1,
  DF_RANK_DEMAND = 0,
  DF_RANK_SPINE = 1,
  DF_RANK_PREFETCH = 2,
  DF_RANK_N = 3
} df_rank_class;

typedef struct df_rank_drive {
  int qd;              /* reads the drive may have in flight */
  int inflight;        /* reads in flight, every class */
  int spine_inflight;  /* of which spine reads */
  int waiting[DF_RANK_N]; /* reads queued, by class */
  int pf_max;          /* speculative reads in flight at most */
} df_rank_drive;

/* Spine reads a drive of queue depth qd keeps in flight at most (rule 2). */
int df_rank_spine_max(int qd);
/* The class the drive takes next, or DF_RANK_NONE. */
df_rank_class df_rank_next(const df_rank_drive *d);

#endif
