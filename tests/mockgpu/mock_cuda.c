/* A stand-in for the CUDA kernels (kcuda.h, kcuda_host.h) in host memory,
 * for testing what drives them (kgpu.c: the weight tier, the staging, the
 * expert batch and its row bookkeeping, the fallbacks) on machines without
 * a GPU. A -DDF_MOCKGPU=ON build links it in place of the CUDA library;
 * it is never part of a real build.
 *
 * "Device" memory is host memory, copies are memcpy, every call completes
 * before it returns (so nothing is ever out of order), and the products are
 * the scalar reference table's, which the real kernels equal bit for bit:
 * so a mock run must give the CPU's results exactly, and any difference is
 * the driving code's.
 *
 * DF_MOCK_CUDA_FAIL=KIND:N makes the N-th call (1-based) of KIND fail as a
 * CUDA error would (KIND:N+ the N-th and every later one, as a device that
 * died does; KIND:N-M the N-th to the M-th, as a device full for a while): alloc (device allocations), put (copies to the device),
 * gemm (products), sync (waits, which report errors of queued work), kda
 * (a KDA layer's sequence part, kcuda_seq.h), mla (MLA attention's kernels,
 * kcuda_seq.h: the attention and the gate), copy (device-to-device copies:
 * the sequence state kept on the device going in, coming back, growing;
 * the failed copy writes half of its bytes, as an interrupted one may),
 * get (copies to the host, which a dead device fails: nothing written),
 * ar (AttnRes and its norm, df_cuda_attn_res).
 * DF_MOCK_CUDA_MEM=BYTES is the device's memory (8 GiB without it): an
 * allocation that would take the live total past it fails, as cudaMalloc
 * does when full, and df_cuda_mem_info reports it less the live total.
 * DF_MOCK_CUDA_GRAN=BYTES is the device's granule, as a real device's 2 MiB:
 * each allocation takes whole granules of the live total, and the
 * virtual memory functions (df_cuda_vm_*) map in granules of that size
 * (4 KiB without it, and allocations then take what they ask). The
 * mappings are host pages reserved without access and opened and closed
 * (mprotect), so a read or write of a granule not mapped faults. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_host.h"
#include "kernels/cuda/kcuda_seq.h"
#include "kernels/cuda/kcuda_seq_ref.h"
#include "kernels/kernels.h"

struct df_cuda {
  int dev;
  char err[256];
};

enum { F_ALLOC, F_PUT, F_GEMM, F_SYNC, F_KDA, F_MLA, F_COPY, F_GET, F_AR, F_N };
static const char *const fail_kind[F_N] = {"alloc", "put", "gemm", "sync", "kda",
                                           "mla",   "copy", "get", "ar"};
static long calls[F_N];

/* 1 when this call of kind k is the one DF_MOCK_CUDA_FAIL names */
static int inject(df_cuda *c, int k) {
  calls[k]++;
  const char *f = getenv("DF_MOCK_CUDA_FAIL");
  size_t n = strlen(fail_kind[k]);
  if (!f || strncmp(f, fail_kind[k], n) || f[n] != ':') return 0;
  char *end;
  long at = strtol(f + n + 1, &end, 10), to = at;
  if (*end == '+') to = -1;
  else if (*end == '-') to = strtol(end + 1, NULL, 10);
  if (calls[k] < at || (to >= 0 && calls[k] > to)) return 0;
  if (c) snprintf(c->err, sizeof c->err, "mock %s #%ld: injected failure", fail_kind[k], calls[k]);
  return 1;
}

int df_cuda_device_count(void) { return 1; }

df_cuda *df_cuda_open(int dev, char *err, size_t errlen) {
  if (dev != 0) {
    snprintf(err, errlen, "no CUDA device %d (1 found)", dev);
    return NULL;
  }
  df_cuda *c = calloc(1, sizeof *c);
  if (!c) snprintf(err, errlen, "out of memory");
  return c;
}
void df_cuda_close(df_cuda *c) { free(c); }
const char *df_cuda_describe(const df_cuda *c) {
  (void)c;
  return "mock device (host memory, the scalar kernels)";
}
const char *df_cuda_error(const df_cuda *c) { return c->err; }

/* DF_MOCK_CUDA_MEM into *bytes; 0 where it is not set */
static int mock_mem(size_t *bytes) {
  const char *m = getenv("DF_MOCK_CUDA_MEM");
  if (!m) return 0;
  *bytes = (size_t)atoll(m);
  return 1;
}

/* DF_MOCK_CUDA_GRAN, 0 where it is not set */
static size_t mock_gran(void) {
  const char *m = getenv("DF_MOCK_CUDA_GRAN");
  return m ? (size_t)atoll(m) : 0;
}

/* each allocation carries its size in front, for the live total */
#define HDR 64
static size_t live_bytes;
/* 1 when bytes more would take the live total past DF_MOCK_CUDA_MEM */
static int over_mem(size_t bytes) {
  size_t mem;
  return mock_mem(&mem) && live_bytes + bytes > mem;
}
void *df_cuda_alloc(df_cuda *c, size_t bytes) {
  if (inject(c, F_ALLOC)) return NULL;
  size_t gr = mock_gran();
  if (gr) bytes = (bytes + gr - 1) / gr * gr;
  if (over_mem(bytes)) {
    snprintf(c->err, sizeof c->err, "mock alloc: out of memory");
    return NULL;
  }
  uint8_t *p = malloc(HDR + bytes);
  if (!p) return NULL;
  memcpy(p, &bytes, sizeof bytes);
  live_bytes += bytes;
  return p + HDR;
}
void df_cuda_free(df_cuda *c, void *p) {
  (void)c;
  if (!p) return;
  size_t bytes;
  memcpy(&bytes, (uint8_t *)p - HDR, sizeof bytes);
  live_bytes -= bytes;
  free((uint8_t *)p - HDR);
}
int df_cuda_put(df_cuda *c, void *dst, const void *src, size_t bytes) {
  if (inject(c, F_PUT)) return -1;
  memcpy(dst, src, bytes);
  return 0;
}
int df_cuda_get(df_cuda *c, void *dst, const void *src, size_t bytes) {
  if (inject(c, F_GET)) return -1;
  memcpy(dst, src, bytes);
  return 0;
}
int df_cuda_get_async(df_cuda *c, void *dst, const void *src, size_t bytes) {
  return df_cuda_get(c, dst, src, bytes);
}
int df_cuda_copy(df_cuda *c, void *dst, const void *src, size_t bytes) {
  if (inject(c, F_COPY)) {
    memmove(dst, src, bytes / 2);
    return -1;
  }
  memmove(dst, src, bytes);
  return 0;
}
int df_cuda_sync(df_cuda *c) { return inject(c, F_SYNC) ? -1 : 0; }

int df_cuda_gemm_bf16(df_cuda *c, const uint16_t *W, int rows, int cols, const float *X, int T,
                      size_t ldx, float *Y, size_t ldy) {
  if (inject(c, F_GEMM)) return -1;
  df_kern_scalar()->gemm_bf16(W, cols, 0, rows, X, T, ldx, Y, ldy);
  return 0;
}
int df_cuda_gemm_i8(df_cuda *c, const int8_t *W, const float *scale, int rows, int cols,
                    const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  if (inject(c, F_GEMM)) return -1;
  df_kern_scalar()->gemm_i8(W, scale, cols, 0, rows, X, T, ldx, Y, ldy);
  return 0;
}
int df_cuda_gemm_f32(df_cuda *c, const float *W, int rows, int cols, const float *X, int T,
                     size_t ldx, float *Y, size_t ldy) {
  if (inject(c, F_GEMM)) return -1;
  df_kern_scalar()->gemm_f32(W, cols, 0, rows, X, T, ldx, Y, ldy);
  return 0;
}
int df_cuda_gemm_mxfp4(df_cuda *c, const uint8_t *packed, const uint8_t *scales, int rows,
                       int cols, const float *X, int T, size_t ldx, float *Y, size_t ldy) {
  if (inject(c, F_GEMM)) return -1;
  df_kern_scalar()->gemm_mxfp4(packed, scales, cols, 0, rows, X, T, ldx, Y, ldy);
  return 0;
}
/* one injected failure for the launch, as the real one fails whole */
int df_cuda_gemv_group(df_cuda *c, int fmt, int n, const df_cuda_gemv_one *m) {
  if (n < 0 || n > DF_CUDA_GROUP_MAX || (fmt != 0 && fmt != 1 && fmt != 3)) {
    snprintf(c->err, sizeof c->err, "gemv group: %d matrices of format %d", n, fmt);
    return -1;
  }
  if (inject(c, F_GEMM)) return -1;
  const df_kern *k = df_kern_scalar();
  for (int i = 0; i < n; i++) {
    const df_cuda_gemv_one *o = &m[i];
    if (fmt == 0) k->gemm_bf16(o->W, o->cols, 0, o->rows, o->x, 1, (size_t)o->cols, o->y, (size_t)o->rows);
    else if (fmt == 1)
      k->gemm_i8(o->W, o->S, o->cols, 0, o->rows, o->x, 1, (size_t)o->cols, o->y, (size_t)o->rows);
    else
      k->gemm_mxfp4(o->W, o->S, o->cols, 0, o->rows, o->x, 1, (size_t)o->cols, o->y,
                    (size_t)o->rows);
  }
  return 0;
}
int df_cuda_situ(df_cuda *c, float *out, const float *g, const float *u, int n, float bg,
                 float bu) {
  (void)c;
  df_kern_scalar()->situ(out, g, u, n, bg, bu);
  return 0;
}

int df_cuda_rmsnorm_rows(df_cuda *c, float *y, const float *x, const float *w, int n, int rows,
                         size_t ld, float eps) {
  (void)c;
  if (ld < (size_t)n) return -1;
  for (int r = 0; r < rows; r++)
    df_kern_scalar()->rmsnorm(y + (size_t)r * ld, x + (size_t)r * ld, w, n, eps);
  return 0;
}
int df_cuda_moe_combine(df_cuda *c, float *out, const float *Y, const int *rows, const float *w,
                        int T, int K, int n) {
  (void)c;
  df_moe_combine_ref(out, Y, rows, w, T, K, n);
  return 0;
}
int df_cuda_attn_res(df_cuda *c, float *xn, float *work, const float *snaps, size_t ss, int nS,
                     const float *last, int T, int H, const float *res_norm,
                     const float *res_proj, const float *norm, float eps) {
  if (T <= 0) return 0;
  if (nS < 0 || H <= 0 || (nS > 0 && (!res_norm || !res_proj || !work || nS + 1 > H)) || !norm ||
      T > 65535) {
    snprintf(c->err, sizeof c->err, "attn res: %d snapshots, %d rows of %d", nS, T, H);
    return -1;
  }
  if (inject(c, F_AR)) return -1;
  float *tmp = malloc(sizeof(float) * (size_t)(H + nS + 1));
  df_attn_res_ref(xn, snaps, ss, nS, last, T, H, res_norm, res_proj, norm, eps, tmp);
  free(tmp);
  return 0;
}
int df_cuda_add(df_cuda *c, float *y, const float *a, const float *b, size_t n) {
  (void)c;
  for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
  return 0;
}

/* The real call waits for the queued work first: a wait's failure can
 * show there too. */
static char kda_err[sizeof "kda: " + 256];
int df_cuda_kda(df_cuda *c, const df_cuda_kda_args *a) {
  kda_err[0] = 0;
  if (df_cuda_sync(c) || inject(c, F_KDA)) {
    snprintf(kda_err, sizeof kda_err, "kda: %s", c->err);
    return -1;
  }
  df_kda_ref(a);
  return 0;
}
const char *df_cuda_kda_error(void) { return kda_err; }
int df_cuda_mla_attn(df_cuda *c, const df_cuda_mla_args *a) {
  kda_err[0] = 0;
  if (df_cuda_sync(c) || inject(c, F_MLA)) {
    snprintf(kda_err, sizeof kda_err, "mla: %s", c->err);
    return -1;
  }
  df_mla_ref_attn(a);
  return 0;
}
int df_cuda_mla_gate(df_cuda *c, float *o, float *g, size_t n) {
  kda_err[0] = 0;
  if (df_cuda_sync(c) || inject(c, F_MLA)) {
    snprintf(kda_err, sizeof kda_err, "mla: %s", c->err);
    return -1;
  }
  df_mla_ref_gate(o, g, n);
  return 0;
}

/* 8 GiB, or DF_MOCK_CUDA_MEM, less what is allocated */
int df_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  (void)dev;
  *total_b = (size_t)8 << 30;
  mock_mem(total_b);
  *free_b = *total_b > live_bytes ? *total_b - live_bytes : 0;
  return 0;
}
int df_cuda_use(int dev) { return dev == 0 ? 0 : -1; }

size_t df_cuda_vm_granule(int dev) {
  (void)dev;
  size_t gr = mock_gran();
  return gr ? gr : 4096;
}
void *df_cuda_vm_reserve(size_t bytes, size_t align) {
  /* align more than a page: reserve that much over and give back the ends */
  size_t a = align > 4096 ? align : 4096;
  uint8_t *p = mmap(NULL, bytes + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uint8_t *q = p + (a - (uintptr_t)p % a) % a;
  if (q > p) munmap(p, (size_t)(q - p));
  if (p + bytes + a > q + bytes) munmap(q + bytes, (size_t)(p + bytes + a - (q + bytes)));
  return q;
}
void df_cuda_vm_unreserve(void *va, size_t bytes) {
  if (va) munmap(va, bytes);
}
/* a mapping is a device allocation: it counts, fails and is injected as one */
int df_cuda_vm_map(int dev, void *va, size_t gran, int n, uint64_t *h) {
  (void)dev;
  size_t bytes = gran * (size_t)n;
  if (inject(NULL, F_ALLOC) || over_mem(bytes)) return -1;
  if (mprotect(va, bytes, PROT_READ | PROT_WRITE)) return -1;
  for (int i = 0; i < n; i++) h[i] = (uint64_t)(uintptr_t)va + (uint64_t)i * gran;
  live_bytes += bytes;
  return 0;
}
void df_cuda_vm_unmap(void *va, size_t gran, uint64_t h) {
  if (h != (uint64_t)(uintptr_t)va) {
    fprintf(stderr, "mock: a granule unmapped with another's handle\n");
    _exit(3);
  }
  /* the memory goes back: its bytes are not kept for the next mapping */
  madvise(va, gran, MADV_DONTNEED);
  mprotect(va, gran, PROT_NONE);
  live_bytes -= gran;
}
/* Registered ranges must be unregistered before they are freed: the mock
 * keeps them and the exit check (DF_MOCK_CUDA_CHECK_PINS) fails a run that
 * left one behind or unregistered what it never registered. */
#define MAXPIN 4096
static void *pins[MAXPIN];
static int npins, pin_errors;
static void pins_at_exit(void) {
  if (npins || pin_errors) {
    fprintf(stderr, "mock: %d host ranges still registered, %d bad unregisters\n", npins, pin_errors);
    _exit(3);
  }
}
int df_cuda_host_register(void *p, size_t bytes) {
  (void)bytes;
  static int hooked;
  if (!hooked && getenv("DF_MOCK_CUDA_CHECK_PINS")) atexit(pins_at_exit), hooked = 1;
  if (npins == MAXPIN) return -1;
  pins[npins++] = p;
  return 0;
}
void df_cuda_host_unregister(void *p) {
  for (int i = 0; i < npins; i++)
    if (pins[i] == p) {
      pins[i] = pins[--npins];
      return;
    }
  pin_errors++;
}
void *df_cuda_host_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
void df_cuda_host_free(void *p) { free(p); }
