/* Internal to the store: the prefetch predictors' part of df_store
 * (predict.c): gate-ahead and previous-token predictions per layer, their
 * measured recall, and which may issue reads. Guarded by the store's mutex. */
#ifndef DF_STORE_PREDICT_H
#define DF_STORE_PREDICT_H

#include <stdint.h>

#include "store/opts.h"

typedef struct df_store df_store;

enum { P_GATE = 0, P_PREV = 1, NPRED = 2 }; /* the predictors */

/* One predictor's last prediction for one layer. */
typedef struct pred {
  long pass;    /* the forward pass it is for; -1 = none pending */
  int n;
  int prefill;  /* made from a prefill chunk: a union over rows, not a per-token guess */
  int *ex;      /* the predicted experts (n_experts capacity) */
} pred;

typedef struct df_store_pred {
  unsigned mask;        /* bit per predictor that may issue reads */
  int is_auto;          /* `auto`: switch a predictor off per layer when its recall is low */
  char *name;           /* the mode's name, for messages */
  pred *p[NPRED];       /* [predictor][layer] */
  double *recall_ewma[NPRED];  /* per layer: smoothed recall of decode predictions (auto) */
  double *recall_hits[NPRED], *recall_total[NPRED]; /* per layer: predicted and needed, summed */
  long *recall_samples[NPRED]; /* per layer: decode predictions measured */
  uint64_t issued[NPRED];      /* speculative reads each predictor issued */
  int **prev_set, *prev_n;     /* per layer: the experts its last batch needed */
} df_store_pred;

void df_pred_init(df_store *s, df_store_prefetch mode);
void df_pred_free(df_store *s);
int df_pred_on(const df_store *s, int p, int li);
void df_pred_measure(df_store *s, int li, const int *experts, int n); /* at begin */
void df_pred_after_begin(df_store *s, int li, const int *experts, int n);

#endif
