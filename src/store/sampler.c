/* The trace's sampler: every 10 ms, per drive, the cumulative bytes and
 * reads and the reads in flight and queued (the trace report's time line). */
#include <pthread.h>
#include <time.h>

#include "store/store_int.h"

#define SAMPLE_PERIOD 0.010

static void *sampler_main(void *arg) {
  df_store *s = arg;
  pthread_mutex_lock(&s->mu);
  double next = df_now();
  while (!s->stop) {
    if (df_now() >= next) {
      double t = df_store_now_rel(s);
      for (int i = 0; i < s->sch.ndrives; i++)
        df_trace_sample(s->trace, t, i, s->sch.drive[i].bytes, s->sch.drive[i].reads, s->sch.drive[i].inflight,
                        s->sch.drive[i].q[0].n + s->sch.drive[i].q[1].n);
      next += SAMPLE_PERIOD;
      if (next < df_now()) next = df_now() + SAMPLE_PERIOD;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double dt = next - df_now();
    if (dt < 0) dt = 0;
    ts.tv_nsec += (long)(dt * 1e9);
    while (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}


void df_sampler_start(df_store *s) {
  if (pthread_create(&s->sampler, NULL, sampler_main, s) == 0) s->sampler_on = 1;
}

/* Called without the lock. */
void df_sampler_stop(df_store *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (s->sampler_on) pthread_join(s->sampler, NULL);
  s->sampler_on = 0;
}
