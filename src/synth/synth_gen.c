/* The generator's values and their parallel output.
 *
 * Every tensor draws from its own stream (seed, name), so tensors can be
 * generated in any order on any thread and the bytes stay those of one
 * sequential pass: a job is one tensor (or an MXFP4 matrix's codes and
 * scales, made together), jobs are taken largest first by a thread pool,
 * and each writes its bytes with positional writes of up to BUF_BYTES into
 * files that are all open at once. A file is finished (length, fsync,
 * rename) by whichever thread completes its last job.
 *
 * With a spine dir (make-model --spine int8) a hole tensor's bf16 values are
 * rounded exactly as the shard would store them and quantised row by row
 * with df_int8_quant_row, into files laid out by the int8 spine's own
 * functions (model/spine_int8.h): the same bytes convert-spine writes from
 * the shards. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/pool.h"
#include "base/rng.h"
#include "base/util.h"
#include "format/codec.h"
#include "model/k3.h"
#include "model/spine_int8.h"
#include "synth/synth_int.h"

/* Large enough that a drive sees long sequential writes, small enough that
 * 16 threads' buffers stay well under a GB. */
#define BUF_BYTES (8u << 20)

typedef struct out_file {
  df_st_writer *w; /* NULL: no such file (a shard without spine matrices) */
  atomic_int left; /* jobs still to write into it */
} out_file;

typedef struct job {
  int t;     /* plan index of its (first) tensor */
  int pair;  /* MXFP4: t is the codes, t + 1 the scales */
  uint64_t bytes;
} job;

typedef struct scratch {
  uint8_t *buf; /* BUF_BYTES of output */
  float *x;     /* one row of values */
} scratch;

typedef struct gen {
  const plan *p;
  uint64_t seed;
  out_file *bf, *i8; /* per shard */
  int *idx;          /* per tensor: its index in its shard's writer (int8: the I8 tensor's) */
  job *jobs;
  int njobs;
  scratch *sc; /* per pool thread */
  atomic_int failed;
  pthread_mutex_t mu; /* the first error, the progress bar */
  df_err err;
  df_progress *prog;
  uint64_t done;
} gen;

void synth_shard_name(char *buf, size_t cap, int i, int n) {
  snprintf(buf, cap, "model-%05d-of-%06d.safetensors", i + 1, n);
}

static void fail(gen *g, const df_err *e) {
  pthread_mutex_lock(&g->mu);
  if (!atomic_exchange(&g->failed, 1)) g->err = *e;
  pthread_mutex_unlock(&g->mu);
}

static int put(gen *g, df_st_writer *w, int tensor, uint64_t off, const void *b, size_t n) {
  df_err e = {{0}};
  if (df_st_writer_pwrite(w, tensor, off, b, n, &e)) {
    fail(g, &e);
    return -1;
  }
  pthread_mutex_lock(&g->mu);
  g->done += n;
  if (g->prog) df_progress_update(g->prog, g->done);
  pthread_mutex_unlock(&g->mu);
  return atomic_load(&g->failed) ? -1 : 0;
}

/* The last job of a file finishes it. */
static void file_done(gen *g, out_file *f) {
  if (atomic_fetch_sub(&f->left, 1) != 1 || atomic_load(&g->failed)) return;
  df_err e = {{0}};
  if (df_st_writer_finish(f->w, &e)) fail(g, &e);
}

/* Element i of a G_UNIFORM / G_ALOG tensor, the streams' next draw. */
static inline float uniform_value(df_rng *r, const tspec *t, uint64_t i) {
  double v = t->off + df_rng_uniform(r, t->a);
  if (t->kind == G_ALOG && i >= (uint64_t)t->used) v = 0.0;
  return (float)v;
}

static int gen_uniform(gen *g, const tspec *t, df_rng *r, scratch *s) {
  const size_t es = df_dtype_size(t->dt), per = BUF_BYTES / es;
  df_st_writer *w = g->bf[t->shard].w;
  for (uint64_t i = 0; i < t->nelem;) {
    size_t m = t->nelem - i < per ? (size_t)(t->nelem - i) : per;
    for (size_t k = 0; k < m; k++) {
      float f = uniform_value(r, t, i + k);
      if (t->dt == DF_DT_BF16) {
        uint16_t h = df_f32_to_bf16(f);
        memcpy(s->buf + 2 * k, &h, 2); /* little-endian hosts only (as the loader) */
      } else {
        memcpy(s->buf + 4 * k, &f, 4);
      }
    }
    if (put(g, w, g->idx[t - g->p->t], i * es, s->buf, m * es)) return -1;
    i += m;
  }
  return 0;
}

/* A hole tensor's row-int8 copy: each row as the shard would hold it (bf16),
 * widened back and quantised as convert-spine does. */
static int gen_int8(gen *g, const tspec *t, df_rng *r, scratch *s) {
  const int64_t rows = t->shape[0], cols = t->shape[1];
  const int64_t per = (int64_t)BUF_BYTES / cols > 0 ? (int64_t)BUF_BYTES / cols : 1;
  df_st_writer *w = g->i8[t->shard].w;
  const int q = g->idx[t - g->p->t];
  float *scale = df_xmalloc(sizeof(float) * (size_t)rows);
  int rc = 0;
  for (int64_t r0 = 0; r0 < rows && !rc; r0 += per) {
    int64_t n = rows - r0 < per ? rows - r0 : per;
    for (int64_t i = 0; i < n; i++) {
      for (int64_t c = 0; c < cols; c++)
        s->x[c] = df_bf16_to_f32(df_f32_to_bf16(uniform_value(r, t, (uint64_t)((r0 + i) * cols + c))));
      df_int8_quant_row(s->x, (int)cols, (int8_t *)s->buf + i * cols, &scale[r0 + i]);
    }
    rc = put(g, w, q, (uint64_t)(r0 * cols), s->buf, (size_t)(n * cols));
  }
  if (!rc) rc = put(g, w, q + 1, 0, scale, sizeof(float) * (size_t)rows);
  free(scale);
  return rc;
}

/* An MXFP4 matrix: codes row by row, then the scales quantisation chose. */
static int gen_mx(gen *g, const tspec *pt, const tspec *st, df_rng *r, scratch *s) {
  const int rows = (int)pt->shape[0], cols = (int)pt->shape[1] * 2, half = cols / 2;
  const uint64_t nsc = (uint64_t)rows * (uint64_t)(cols / DF_MXFP4_GROUP);
  if (st->kind != G_MX_SCALE || st->nbytes != nsc) {
    df_err e;
    df_err_set(&e, "%s: internal error: scales do not follow their codes", pt->name);
    fail(g, &e);
    return -1;
  }
  df_st_writer *w = g->bf[pt->shard].w;
  uint8_t *sc = df_xmalloc(nsc);
  const int per = (int)(BUF_BYTES / (unsigned)half);
  int rc = 0;
  for (int r0 = 0; r0 < rows && !rc; r0 += per) {
    int n = rows - r0 < per ? rows - r0 : per;
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < cols; k++) s->x[k] = (float)df_rng_uniform(r, pt->a);
      df_mxfp4_quant_row(s->x, cols, s->buf + (size_t)i * half,
                         sc + (size_t)(r0 + i) * (size_t)(cols / DF_MXFP4_GROUP));
    }
    rc = put(g, w, g->idx[pt - g->p->t], (uint64_t)r0 * half, s->buf, (size_t)n * half);
  }
  df_err e = {{0}};
  if (!rc && df_mxfp4_check_scales(sc, nsc, st->name, &e)) {
    fail(g, &e);
    rc = -1;
  }
  if (!rc) rc = put(g, w, g->idx[st - g->p->t], 0, sc, nsc);
  free(sc);
  return rc;
}

/* Random E2M1 codes or E8M0 scales: one draw gives 8 bytes. */
static int gen_bytes(gen *g, const tspec *t, df_rng *r, scratch *s) {
  df_st_writer *w = g->bf[t->shard].w;
  for (uint64_t i = 0; i < t->nbytes;) {
    size_t m = t->nbytes - i < BUF_BYTES ? (size_t)(t->nbytes - i) : BUF_BYTES;
    for (size_t k = 0; k < m; k += 8) {
      uint64_t v = df_rng_next(r);
      for (size_t b = 0; b < 8 && k + b < m; b++) {
        uint8_t byte = (uint8_t)(v >> (8 * b));
        /* scales 2^-9 .. 2^-6: with K3's fan-ins (3072, 3584) the rows of
         * w x have O(1) spread, as a trained expert's would */
        s->buf[k + b] = t->kind == G_CODES ? byte : (uint8_t)(118 + (byte & 3));
      }
    }
    if (put(g, w, g->idx[t - g->p->t], i, s->buf, m)) return -1;
    i += m;
  }
  return 0;
}

static void job_task(void *ctx, int task, int thread) {
  gen *g = ctx;
  const job *j = &g->jobs[task];
  const tspec *t = &g->p->t[j->t];
  if (atomic_load(&g->failed)) return;
  df_rng r;
  df_rng_seed_named(&r, g->seed, t->name);
  scratch *s = &g->sc[thread];
  int rc;
  if (t->hole) rc = gen_int8(g, t, &r, s);
  else if (j->pair) rc = gen_mx(g, t, t + 1, &r, s);
  else if (t->kind == G_CODES || t->kind == G_SCALES) rc = gen_bytes(g, t, &r, s);
  else rc = gen_uniform(g, t, &r, s);
  if (!rc) file_done(g, t->hole ? &g->i8[t->shard] : &g->bf[t->shard]);
}

static int cmp_job(const void *a, const void *b) {
  const job *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->t - y->t;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp((*(const df_tensor *const *)a)->name, (*(const df_tensor *const *)b)->name);
}

/* Shard s's writer: every tensor declared (holes left as such), header written. */
static int open_shard(gen *g, const synth_out *o, int s, json_t *wmap, df_err *e) {
  const plan *p = g->p;
  char fname[64];
  synth_shard_name(fname, sizeof fname, s, p->nshards);
  char *path = df_path_join(o->out_dir, fname);
  df_st_writer *w = g->bf[s].w = df_st_writer_new(path);
  free(path);
  df_st_writer_set_metadata(w, "format", "pt");
  int n = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->t[i].shard != s) continue;
    if (df_st_writer_declare(w, p->t[i].name, p->t[i].dt, p->t[i].ndim, p->t[i].shape, e))
      return -1;
    json_object_set_new(wmap, p->t[i].name, json_string(fname));
    g->idx[i] = n++;
  }
  if (df_st_writer_begin(w, e)) return -1;
  for (int i = 0; i < p->n; i++)
    if (p->t[i].shard == s && p->t[i].hole && df_st_writer_hole(w, g->idx[i], e)) return -1;
  return 0;
}

/* Shard s's int8 file: its hole tensors in name order, as the shard lists them. */
static int open_int8(gen *g, const synth_out *o, int s, json_t *i8map, df_err *e) {
  const plan *p = g->p;
  int n = 0;
  for (int i = 0; i < p->n; i++) n += p->t[i].shard == s && p->t[i].hole;
  if (!n) return 0;
  df_tensor *ts = df_xcalloc((size_t)n, sizeof *ts);
  const df_tensor **order = df_xcalloc((size_t)n, sizeof *order);
  n = 0;
  for (int i = 0; i < p->n; i++) {
    const tspec *t = &p->t[i];
    if (t->shard != s || !t->hole) continue;
    df_tensor *d = &ts[n];
    d->name = (char *)t->name;
    d->dtype = t->dt;
    d->ndim = t->ndim;
    d->shape[0] = t->shape[0];
    d->shape[1] = t->shape[1];
    d->nelem = t->nelem;
    d->nbytes = t->nbytes;
    d->file = i; /* the plan index, to find each one's place below */
    order[n++] = d;
  }
  qsort(order, (size_t)n, sizeof *order, cmp_tensor_name);
  for (int k = 0; k < n; k++) g->idx[order[k]->file] = 2 * k; /* I8, then its scale */
  char fname[64];
  synth_shard_name(fname, sizeof fname, s, p->nshards);
  char *path = df_path_join(o->spine_dir, fname);
  g->i8[s].w = df_k3_int8_file_new(path, fname, df_st_writer_file_size(g->bf[s].w), order, n, e);
  free(path);
  int rc = g->i8[s].w ? df_st_writer_begin(g->i8[s].w, e) : -1;
  if (!rc) df_k3_int8_index_add(i8map, fname, order, n);
  free(order);
  free(ts);
  return rc;
}

/* One job per tensor (an MXFP4 pair as one), each counted on the file it fills. */
static void make_jobs(gen *g, uint64_t *total, int *maxcols) {
  const plan *p = g->p;
  g->jobs = df_xcalloc((size_t)p->n, sizeof *g->jobs);
  *total = 0;
  *maxcols = 1;
  for (int i = 0; i < p->n; i++) {
    const tspec *t = &p->t[i];
    if (t->kind == G_MX_SCALE) continue; /* made with its codes */
    job *j = &g->jobs[g->njobs++];
    j->t = i;
    j->pair = t->kind == G_MX_PACKED;
    int cols = t->ndim == 2 ? (int)t->shape[1] * (j->pair ? 2 : 1) : 1;
    if (cols > *maxcols) *maxcols = cols;
    j->bytes = t->hole ? t->nelem + 4 * (uint64_t)t->shape[0]
                       : t->nbytes + (j->pair ? p->t[i + 1].nbytes : 0);
    *total += j->bytes;
    atomic_fetch_add(t->hole ? &g->i8[t->shard].left : &g->bf[t->shard].left, 1);
  }
  qsort(g->jobs, (size_t)g->njobs, sizeof *g->jobs, cmp_job);
}

static int run_jobs(gen *g, const synth_out *o, uint64_t total, int maxcols, df_err *e) {
  df_pool *pool = df_pool_create(o->threads);
  int nth = df_pool_size(pool);
  g->sc = df_xcalloc((size_t)nth, sizeof *g->sc);
  for (int i = 0; i < nth; i++) {
    g->sc[i].buf = df_xmalloc(BUF_BYTES);
    g->sc[i].x = df_xmalloc(sizeof(float) * (size_t)maxcols);
  }
  df_progress prog;
  if (o->progress) {
    g->prog = &prog;
    df_progress_begin(&prog, "make-model", total);
  }
  df_pool_run(pool, g->njobs, job_task, g);
  df_pool_destroy(pool);
  if (g->prog) {
    if (atomic_load(&g->failed)) df_progress_stop(&prog, g->done);
    else df_progress_end(&prog);
    g->prog = NULL; /* the bar lives in this frame: nothing may reach it after the return */
  }
  for (int i = 0; i < nth; i++) free(g->sc[i].buf), free(g->sc[i].x);
  free(g->sc);
  if (atomic_load(&g->failed)) {
    *e = g->err;
    return -1;
  }
  return 0;
}

int synth_write_weights(const synth_out *o, const plan *p, json_t *wmap, df_err *e) {
  gen g = {.p = p, .seed = o->seed};
  pthread_mutex_init(&g.mu, NULL);
  g.bf = df_xcalloc((size_t)p->nshards, sizeof *g.bf);
  g.i8 = df_xcalloc((size_t)p->nshards, sizeof *g.i8);
  g.idx = df_xcalloc((size_t)(p->n ? p->n : 1), sizeof *g.idx);
  json_t *i8map = json_object();
  int rc = 0;
  for (int s = 0; s < p->nshards && !rc; s++) {
    rc = open_shard(&g, o, s, wmap, e);
    if (!rc && o->spine_dir) rc = open_int8(&g, o, s, i8map, e);
  }
  uint64_t total = 0;
  int maxcols = 1;
  if (!rc) {
    make_jobs(&g, &total, &maxcols);
    /* a shard of holes only has no job to finish it */
    for (int s = 0; s < p->nshards && !rc; s++)
      if (!atomic_load(&g.bf[s].left)) rc = df_st_writer_finish(g.bf[s].w, e);
  }
  if (!rc) rc = run_jobs(&g, o, total, maxcols, e);
  if (!rc && o->spine_dir) rc = df_k3_int8_index_write(o->spine_dir, i8map, e);
  json_decref(i8map);
  for (int s = 0; s < p->nshards; s++) {
    df_st_writer_free(g.bf[s].w); /* removes the temporary file of an unfinished one */
    df_st_writer_free(g.i8[s].w);
  }
  free(g.bf), free(g.i8), free(g.idx), free(g.jobs);
  pthread_mutex_destroy(&g.mu);
  return rc;
}
