/* The trace report's binned series (trace/series.c) on traces written here
 * by hand: an emulated drive's transfer intervals binned exactly; a serial
 * drive known only by starts and completions (the emulation's timeline with
 * the transfer times left out, and a qd-8 queue in front of it) never drawn
 * above its rate, where spreading each read over its own start..completion
 * would be; a burst of completions after a shared wait spread over the
 * wait; wasted prefetch matched to its read; the tokens' waits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace/report.h"

static void parse_str(df_trace_data *d, const char *text) {
  FILE *f = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(f);
  df_err e;
  int rc = df_trace_parse(d, f, "test", &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  assert_int_equal(rc, 0);
  fclose(f);
}

/* buffer helpers */
typedef struct sb {
  char *p;
  size_t n;
  FILE *f;
} sb;
static void sb_open(sb *b) { b->f = open_memstream(&b->p, &b->n); }
static char *sb_done(sb *b) {
  fclose(b->f);
  return b->p;
}

static double total_bin(const df_trace_series *s, int dr, int k) {
  double v = 0;
  for (int c = 0; c < DF_TR_NCAT; c++) v += s->mbps[((size_t)dr * DF_TR_NCAT + (size_t)c) * (size_t)s->nbins + (size_t)k];
  return v;
}

/* A serial drive of bw bytes/s with qd reads in flight: reads of len bytes
 * queued in batches of nb at times batch_t[i]; with_xfer writes the
 * emulation's transfer intervals. */
static char *serial_trace(double bw, int qd, uint64_t len, int nbatch, int nb, int with_xfer, double lat) {
  sb b;
  sb_open(&b);
  fprintf(b.f, "{\"k\":\"head\",\"version\":1,\"drives\":[\"/d\"],\"emulated\":%s,\"io\":\"uring\"}\n",
          with_xfer ? "\"1MB/s\"" : "null");
  double busy = 0;
  int id = 0;
  for (int i = 0; i < nbatch; i++) {
    double t = 0.05 * i; /* a batch every 50 ms */
    /* qd in flight: read j of the batch is taken when read j - qd completed */
    double done[4096];
    for (int j = 0; j < nb; j++) {
      double take = j < qd ? t : done[j - qd];
      double s0 = busy > take ? busy : take, s1 = s0 + (double)len / bw;
      busy = s1;
      done[j] = s1 + lat;
      fprintf(b.f,
              "{\"k\":\"read\",\"t\":%.9f,\"layer\":1,\"expert\":%d,\"drive\":0,\"bytes\":%llu,\"demand\":1,"
              "\"wait\":0,\"service\":%.9f,\"start\":%.9f,\"ok\":1",
              done[j], id++ % 64, (unsigned long long)len, done[j] - take, take);
      if (with_xfer) fprintf(b.f, ",\"xfer\":[%.9f,%.9f]", s0, s1);
      fputs("}\n", b.f);
    }
  }
  return sb_done(&b);
}

static void test_emulated_exact(void **st) {
  (void)st;
  char *t = serial_trace(1e6, 8, 4000, 4, 20, 1, 0.0001);
  df_trace_data d;
  parse_str(&d, t);
  df_trace_series s;
  df_trace_series_build(&s, &d, NULL, 0.010);
  assert_true(s.exact);
  assert_true(s.ceiling_emulated);
  assert_true(fabs(s.ceiling[0] - 1.0) < 1e-12);
  double sum = 0, peak = 0;
  for (int k = 0; k < s.nbins; k++) {
    double v = total_bin(&s, 0, k);
    assert_true(v <= 1.0 * (1 + 1e-6));
    sum += v * s.bin * 1e6;
    if (v > peak) peak = v;
  }
  assert_true(fabs(sum - 4 * 20 * 4000.0) < 1);
  /* each batch keeps the drive busy 80 ms of every 50: it runs flat out */
  assert_true(peak > 0.999);
  df_trace_series_free(&s);
  df_trace_data_free(&d);
  free(t);
}

static void test_serial_without_xfer(void **st) {
  (void)st;
  /* the same drive, the transfer times left out: the taut string stays at
   * the drive's rate (within the lag a 1 ms latency adds to one bin) */
  char *t = serial_trace(1e6, 8, 4000, 4, 20, 0, 0.001);
  df_trace_data d;
  parse_str(&d, t);
  df_trace_series s;
  df_trace_series_build(&s, &d, NULL, 0.010);
  assert_false(s.exact);
  assert_true(s.ceiling[0] == 0);
  double sum = 0, peak = 0;
  for (int k = 0; k < s.nbins; k++) {
    double v = total_bin(&s, 0, k);
    sum += v * s.bin * 1e6;
    if (v > peak) peak = v;
  }
  assert_true(fabs(sum - 4 * 20 * 4000.0) < 1);
  assert_true(peak <= 1.0 * 1.001);
  assert_true(peak > 0.95);
  /* what each read spread over its own start..completion would claim: the
   * qd reads taken together overlap, so it draws well above the drive */
  double *naive = calloc((size_t)s.nbins, sizeof *naive);
  for (size_t i = 0; i < d.nreads; i++) {
    const df_trace_rd *r = &d.reads[i];
    double a = (r->start - s.t0) / s.bin, b = (r->start + r->service - s.t0) / s.bin;
    for (int k = (int)a; k < s.nbins && k < b; k++) {
      double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
      naive[k] += (double)r->dev * (hi - lo) / (b - a) / s.bin / 1e6;
    }
  }
  double npeak = 0;
  for (int k = 0; k < s.nbins; k++)
    if (naive[k] > npeak) npeak = naive[k];
  assert_true(npeak > 1.2);
  free(naive);
  df_trace_series_free(&s);
  df_trace_data_free(&d);
  free(t);
}

static void test_burst(void **st) {
  (void)st;
  /* ten 1 MB reads started together at 0, completed between 0.100 and
   * 0.109: 10 MB in 0.109 s at least, never 1 MB per ms */
  sb b;
  sb_open(&b);
  fprintf(b.f, "{\"k\":\"head\",\"version\":1,\"drives\":[\"/d\"],\"emulated\":null,\"io\":\"uring\"}\n");
  for (int i = 0; i < 10; i++)
    fprintf(b.f,
            "{\"k\":\"read\",\"t\":%.3f,\"layer\":1,\"expert\":%d,\"drive\":0,\"bytes\":1000000,\"demand\":1,"
            "\"service\":%.3f,\"start\":0,\"ok\":1}\n",
            0.1 + 0.001 * i, i, 0.1 + 0.001 * i);
  char *t = sb_done(&b);
  df_trace_data d;
  parse_str(&d, t);
  df_trace_series s;
  df_trace_series_build(&s, &d, NULL, 0.010);
  for (int k = 0; k < s.nbins; k++) {
    double v = total_bin(&s, 0, k);
    assert_true(v <= 10.0 / 0.109 + 1e-6);
    assert_true(v >= 10.0 / 0.109 - 1e-6 || k == s.nbins - 1);
  }
  df_trace_series_free(&s);
  df_trace_data_free(&d);
  free(t);
}

static void test_wasted_and_tokens(void **st) {
  (void)st;
  const char *t =
      "{\"k\":\"head\",\"version\":1,\"drives\":[\"/d\"],\"emulated\":null,\"io\":\"pread\"}\n"
      "{\"k\":\"gen\",\"t\":0.000,\"prompt\":3}\n"
      /* two speculative reads of (2,5): the later one is the wasted one */
      "{\"k\":\"read\",\"t\":0.010,\"layer\":2,\"expert\":5,\"drive\":0,\"bytes\":100,\"demand\":0,\"service\":0.001,\"ok\":1}\n"
      "{\"k\":\"read\",\"t\":0.020,\"layer\":2,\"expert\":5,\"drive\":0,\"bytes\":100,\"demand\":0,\"service\":0.001,\"ok\":1}\n"
      "{\"k\":\"read\",\"t\":0.030,\"layer\":2,\"expert\":6,\"drive\":0,\"bytes\":100,\"demand\":1,\"service\":0.001,\"ok\":1}\n"
      "{\"k\":\"wasted\",\"t\":0.025,\"layer\":2,\"expert\":5,\"bytes\":100}\n"
      "{\"k\":\"batch\",\"t\":0.031,\"layer\":2,\"n\":1,\"wait\":0.004,\"pass\":1,\"rows\":3,\"hits\":0,\"requests\":4,\"resident\":300}\n"
      "{\"k\":\"token\",\"t\":0.040,\"i\":1,\"phase\":\"prefill\"}\n"
      "{\"k\":\"batch\",\"t\":0.050,\"layer\":2,\"n\":1,\"wait\":0.002,\"pass\":2,\"rows\":1,\"hits\":1,\"requests\":6,\"resident\":200}\n"
      "{\"k\":\"batch\",\"t\":0.055,\"layer\":3,\"n\":1,\"wait\":0.001,\"pass\":2,\"rows\":1,\"hits\":2,\"requests\":8,\"resident\":200}\n"
      "{\"k\":\"token\",\"t\":0.060,\"i\":2,\"phase\":\"decode\"}\n"
      "{\"k\":\"recall\",\"pred\":\"gate\",\"per_layer\":[null,0.5]}\n"
      "{\"k\":\"end\",\"t\":0.07,\"rate\":[2000000]}\n";
  df_trace_data d;
  parse_str(&d, t);
  assert_int_equal(d.nreads, 3);
  assert_int_equal(d.reads[0].wasted, 0);
  assert_int_equal(d.reads[1].wasted, 1);
  assert_int_equal(d.reads[2].wasted, 0);
  df_trace_series s;
  df_trace_series_build(&s, &d, NULL, 0.010);
  assert_int_equal(s.cat_bytes[DF_TR_WASTED], 100);
  assert_int_equal(s.cat_bytes[DF_TR_PREFETCH], 100);
  assert_int_equal(s.cat_bytes[DF_TR_DEMAND], 100);
  assert_false(s.ceiling_emulated);
  assert_true(fabs(s.ceiling[0] - 2.0) < 1e-12); /* the store's estimate, MB/s */
  assert_int_equal(s.ntok, 2);
  assert_int_equal(s.ngen, 1);
  assert_true(s.tok[0].prefill && !s.tok[1].prefill);
  assert_true(fabs(s.tok[0].dur - 0.040) < 1e-9 && fabs(s.tok[0].expert_wait - 0.004) < 1e-9);
  assert_true(fabs(s.tok[1].dur - 0.020) < 1e-9 && fabs(s.tok[1].expert_wait - 0.003) < 1e-9);
  assert_true(fabs(s.tok[1].compute - 0.017) < 1e-9);
  assert_int_equal(s.ncache, 2);
  assert_true(fabs(s.cache[0].hit_rate - 0.0) < 1e-12 && s.cache[0].prefill);
  assert_true(fabs(s.cache[1].hit_rate - 0.5) < 1e-12 && s.cache[1].resident == 200);
  assert_int_equal(d.nrecall, 1);
  assert_true(d.recall[0].r[0] < 0 && fabs(d.recall[0].r[1] - 0.5) < 1e-12);
  df_trace_series_free(&s);
  df_trace_data_free(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_emulated_exact),
      cmocka_unit_test(test_serial_without_xfer),
      cmocka_unit_test(test_burst),
      cmocka_unit_test(test_wasted_and_tokens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
