/* A bounded FIFO of pointers (the server's queue of waiting jobs). */
#ifndef DF_BASE_FIFO_H
#define DF_BASE_FIFO_H

/* FIFO of waiting jobs (bounded ring; removal from the middle keeps order). */
typedef struct df_fifo {
  void **slot;
  int cap, head, n;
} df_fifo;

void df_fifo_init(df_fifo *f, int cap);
void df_fifo_free(df_fifo *f);
int df_fifo_push(df_fifo *f, void *p); /* -1 when full */
void *df_fifo_pop(df_fifo *f);         /* NULL when empty */
int df_fifo_remove(df_fifo *f, void *p); /* 1 if it was there */

#endif
