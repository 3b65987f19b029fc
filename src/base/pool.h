/* A fixed thread pool. Work is split into tasks by index; each task's
 * result goes to its own slot, so results never depend on which thread ran
 * what or in which order tasks finished (determinism across thread counts). */
#ifndef DF_BASE_POOL_H
#define DF_BASE_POOL_H

typedef struct df_pool df_pool;
typedef void (*df_pool_fn)(void *ctx, int task, int thread);

df_pool *df_pool_create(int nthreads); /* nthreads <= 0: number of online CPUs */
void df_pool_destroy(df_pool *p);
int df_pool_size(const df_pool *p);
/* Runs fn(ctx, t, thread) for t in [0, ntasks); returns when all are done.
 * The calling thread takes part. p may be NULL (runs serially). */
void df_pool_run(df_pool *p, int ntasks, df_pool_fn fn, void *ctx);

#endif
