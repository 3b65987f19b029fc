/* --device: parsing and the CUDA build's description (kdevice.h). */
#include "kernels/kdevice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DF_HAVE_CUDA
#include "kernels/cuda/kcuda.h"
#endif

const char *df_kern_cuda_build(void) {
#if defined(DF_MOCK_CUDA)
  return "MOCK: a stand-in in host memory with the scalar kernels (tests only, -DDF_MOCKGPU=ON)";
#elif defined(DF_HAVE_CUDA)
  return "CUDA kernels (sm_90, static runtime)";
#else
  return NULL;
#endif
}

int df_kern_cuda_devices(void) {
#ifdef DF_HAVE_CUDA
  return df_cuda_device_count();
#else
  return 0;
#endif
}

void df_kern_cuda_describe(int dev, char *out, size_t n) {
#ifdef DF_HAVE_CUDA
  char err[256];
  df_cuda *c = df_cuda_open(dev, err, sizeof err);
  if (!c) {
    snprintf(out, n, "%s", err);
    return;
  }
  snprintf(out, n, "%s", df_cuda_describe(c));
  df_cuda_close(c);
#else
  (void)dev;
  snprintf(out, n, "not built with CUDA");
#endif
}

int df_kern_device_parse(const char *s, int *cuda_dev, char *err, size_t errlen) {
  if (!strcmp(s, "cpu")) {
    *cuda_dev = -1;
    return 0;
  }
  long dev = 0;
  if (!strncmp(s, "cuda:", 5)) {
    char *end;
    dev = strtol(s + 5, &end, 10);
    if (!s[5] || *end || dev < 0 || dev > 1024) {
      snprintf(err, errlen, "'%s' is not cpu, cuda or cuda:N", s);
      return -1;
    }
  } else if (strcmp(s, "cuda")) {
    snprintf(err, errlen, "'%s' is not cpu, cuda or cuda:N", s);
    return -1;
  }
  *cuda_dev = (int)dev; /* the spelling's, even when the device is not here */
  if (!df_kern_cuda_build()) {
    snprintf(err, errlen, "this deltafin was built without CUDA (configure with -DDF_CUDA=ON)");
    return -1;
  }
  int n = df_kern_cuda_devices();
  if (n == 0) {
    snprintf(err, errlen, "no CUDA device found (no driver, or no GPU visible)");
    return -1;
  }
  if (dev >= n) {
    snprintf(err, errlen, "no CUDA device %ld (%d found: cuda:0 .. cuda:%d)", dev, n, n - 1);
    return -1;
  }
  return 0;
}
