/* Conversation reuse: which prompt positions a new job can skip, from the
 * live session or a kept prompt snapshot. */

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "serve/server_int.h"

static int prefix_of(const int *a, int na, const int *b, int nb) {
  return na <= nb && !memcmp(a, b, sizeof(int) * (size_t)na);
}

/* At the end of the prompt: its state is kept (a later prompt extending it
 * skips this prefill, and so do the job's further choices), unless it would
 * take more than --reuse-mb. */
void df_srv_drop_kept(srv *S, int i) {
  df_session_snap_free(S->snaps[i].snap);
  free(S->snaps[i].ids);
  S->snaps[i] = S->snaps[--S->nsnaps];
}

size_t df_srv_kept_bytes(const srv *S) {
  size_t b = 0;
  for (int i = 0; i < S->nsnaps; i++) b += df_session_snap_bytes(S->snaps[i].snap);
  return b;
}

void df_srv_keep_prompt_state(srv *S, job *j) {
  size_t need = df_session_state_bytes(S->sess);
  if (need > S->reuse_max_bytes) return;
  for (int i = 0; i < S->nsnaps; i++)
    if (S->snaps[i].n == (int)j->nprompt && prefix_of(S->snaps[i].ids, S->snaps[i].n, j->prompt,
                                                      (int)j->nprompt)) {
      S->snaps[i].used = ++S->use_clock;
      return;
    }
  while (S->nsnaps && (S->nsnaps == MAX_KEPT || df_srv_kept_bytes(S) + need > S->reuse_max_bytes)) {
    int lru = 0;
    for (int i = 1; i < S->nsnaps; i++)
      if (S->snaps[i].used < S->snaps[lru].used) lru = i;
    df_srv_drop_kept(S, lru);
  }
  kept *k = &S->snaps[S->nsnaps++];
  k->snap = df_session_snapshot(S->sess);
  k->ids = df_xmalloc(sizeof(int) * (j->nprompt ? j->nprompt : 1));
  memcpy(k->ids, j->prompt, sizeof(int) * j->nprompt);
  k->n = (int)j->nprompt;
  k->used = ++S->use_clock;
}

/* Where a prompt can start: the live session if the prompt extends the ids
 * it covers, else the kept prompt snapshot if it extends that, else 0 (a
 * reset). Either way the results are those of a full prefill (the forward
 * pass is the same for any batch split). Returns the positions skipped. */
int df_srv_reuse_start(srv *S, job *j) {
  int np = (int)j->nprompt;
  if (!S->reuse_max_bytes) {
    df_session_reset(S->sess);
    return 0;
  }
  /* at least one position to run, or logits already there for the last */
  int live = S->live_ok && S->nlive > 0 && prefix_of(S->live_ids, S->nlive, j->prompt, np) &&
                     (S->nlive < np || df_session_has_logits(S->sess))
                 ? S->nlive
                 : 0;
  int best = -1;
  for (int i = 0; i < S->nsnaps; i++) {
    kept *k = &S->snaps[i];
    if (k->n > live && (best < 0 || k->n > S->snaps[best].n) && (k->n < np || k->n == np) &&
        prefix_of(k->ids, k->n, j->prompt, np))
      best = i;
  }
  if (best >= 0) {
    df_session_restore(S->sess, S->snaps[best].snap);
    S->snaps[best].used = ++S->use_clock;
    if (S->snaps[best].n < np || df_session_has_logits(S->sess)) return S->snaps[best].n;
  } else if (live) {
    return live;
  }
  df_session_reset(S->sess);
  return 0;
}
