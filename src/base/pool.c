#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"

/* A decode token dispatches hundreds of small row-split products, so a
 * dispatch must cost far less than a condition-variable round trip (tens of
 * microseconds on a VM). Workers therefore spin on the generation counter for
 * a short while before sleeping, tasks are claimed with an atomic counter, and
 * the caller spins for completion. Idle workers still end up asleep, so an
 * idle server burns no CPU. */

#define SPIN_BEFORE_SLEEP (1 << 15)
#define SPIN_BEFORE_YIELD (1 << 12)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct df_pool {
  int n; /* worker threads, not counting the caller */
  pthread_t *th;
  pthread_mutex_t mu; /* guards sleepers and the sleep/wake handshake */
  pthread_cond_t cv;
  int sleepers;
  /* the current job: written before gen is bumped (release), read after (acquire) */
  df_pool_fn fn;
  void *ctx;
  int ntasks;
  atomic_int next;    /* next task index to claim */
  atomic_int pending; /* workers that have not finished the current job */
  atomic_int gen;     /* job counter */
  atomic_int quit;
};

/* Each task writes only its own slot, so who ran it never changes a result. */
static void run_tasks(df_pool *p, int thread) {
  for (;;) {
    int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (t >= p->ntasks) return;
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
    int spins = 0;
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
           !atomic_load_explicit(&p->quit, memory_order_relaxed)) {
      if (++spins < SPIN_BEFORE_SLEEP) {
        cpu_relax();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      p->sleepers++;
      while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
             !atomic_load_explicit(&p->quit, memory_order_relaxed))
        pthread_cond_wait(&p->cv, &p->mu);
      p->sleepers--;
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load_explicit(&p->quit, memory_order_relaxed)) return NULL;
    seen = atomic_load_explicit(&p->gen, memory_order_acquire);
    run_tasks(p, id);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
  pthread_cond_init(&p->cv, NULL);
  atomic_init(&p->next, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->gen, 0);
  atomic_init(&p->quit, 0);
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
  atomic_store(&p->quit, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->th);
  free(p);
}

int df_pool_size(const df_pool *p) { return p ? p->n + 1 : 1; }

void df_pool_run(df_pool *p, int ntasks, df_pool_fn fn, void *ctx) {
  if (!p || p->n == 0 || ntasks <= 1) {
    for (int t = 0; t < ntasks; t++) fn(ctx, t, 0);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->ntasks = ntasks;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->pending, p->n, memory_order_relaxed);
  /* Bumping gen under the mutex closes the gap between a worker's last check
   * and its cond_wait, so no wake-up is lost. */
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  if (p->sleepers) pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  run_tasks(p, 0);
  for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;)
    if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
    else sched_yield();
}
