#include "base/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"

struct df_pool {
  int n; /* worker threads, not counting the caller */
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  df_pool_fn fn;
  void *ctx;
  int ntasks, next, running, gen, quit;
};

/* Tasks are claimed by a shared counter; each writes only its own slot. */
static void run_tasks(df_pool *p, int thread) {
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int t = p->next < p->ntasks ? p->next++ : -1;
    pthread_mutex_unlock(&p->mu);
    if (t < 0) return;
    p->fn(p->ctx, t, thread);
  }
}

typedef struct {
  df_pool *p;
  int id;
} worker_arg;

static void *worker(void *arg) {
  worker_arg *wa = arg;
  df_pool *p = wa->p;
  int id = wa->id, seen = 0;
  free(wa);
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->quit && p->gen == seen) pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->quit) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, id);
    pthread_mutex_lock(&p->mu);
    if (--p->running == 0) pthread_cond_signal(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
  }
}

df_pool *df_pool_create(int nthreads) {
  if (nthreads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = c > 0 ? (int)c : 1;
  }
  df_pool *p = df_xcalloc(1, sizeof *p);
  p->n = nthreads - 1;
  p->th = df_xcalloc((size_t)(p->n > 0 ? p->n : 1), sizeof(pthread_t));
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  for (int i = 0; i < p->n; i++) {
    worker_arg *wa = df_xmalloc(sizeof *wa);
    wa->p = p;
    wa->id = i + 1;
    pthread_create(&p->th[i], NULL, worker, wa);
  }
  return p;
}

void df_pool_destroy(df_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  free(p->th);
  free(p);
}

int df_pool_size(const df_pool *p) { return p ? p->n + 1 : 1; }

void df_pool_run(df_pool *p, int ntasks, df_pool_fn fn, void *ctx) {
  if (!p || p->n == 0 || ntasks <= 1) {
    for (int t = 0; t < ntasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->ntasks = ntasks;
  p->next = 0;
  p->running = p->n;
  p->gen++;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  run_tasks(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->running > 0) pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
