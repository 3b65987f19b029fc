/* Where the compute runs (--device): the CPU, or a CUDA device when this
 * binary was built with -DDF_CUDA=ON. Compiled in every build, so callers
 * need no #ifdef. */
#ifndef DF_KERNELS_KDEVICE_H
#define DF_KERNELS_KDEVICE_H

#include <stddef.h>

/* "cpu" -> *cuda_dev = -1; "cuda" or "cuda:N" -> N (0 for "cuda"), checked
 * against the build and the devices found. Returns 0, or -1 with the reason
 * in err (not a CUDA build, no device, no device N, bad spelling). A
 * well-spelled device that is not here still sets *cuda_dev (deltafin plan
 * plans for a device the machine need not have); a bad spelling leaves it. */
int df_kern_device_parse(const char *s, int *cuda_dev, char *err, size_t errlen);

/* The CUDA build, e.g. "CUDA 13.0 kernels (sm_90)"; NULL without DF_CUDA. */
const char *df_kern_cuda_build(void);
/* One line on device dev ("NVIDIA H200 (sm_90, 139.8 GiB)") or why none. */
void df_kern_cuda_describe(int dev, char *out, size_t n);
/* CUDA devices found (0 without DF_CUDA, a driver or a device). */
int df_kern_cuda_devices(void);

#endif
