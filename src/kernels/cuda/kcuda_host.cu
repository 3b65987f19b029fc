/* kcuda_host.h: apart from kcuda.cu, which holds the kernels. */
#include <cuda_runtime.h>

extern "C" {
#include "kernels/cuda/kcuda_host.h"
}

#include <stdlib.h>

/* Every kernel's code loaded when the context is made, not at the kernel's
 * first launch (CUDA 12.2 on loads lazily): by then the weight tier may
 * have filled the device, and a load that finds no room fails the launch.
 * The full-depth trunk's first decode on an 80 GB H100 failed so with
 * "unknown error", its first GEMVs coming after the prefill had filled the
 * tier (2026-12-05). Set before main, so before the runtime reads it; a
 * value the user set is kept. */
__attribute__((constructor)) static void eager_modules(void) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

extern "C" int df_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

extern "C" int df_cuda_use(int dev) {
  if (cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

extern "C" int df_cuda_host_register(void *p, size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

extern "C" void df_cuda_host_unregister(void *p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

extern "C" void *df_cuda_host_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return p;
}

extern "C" void df_cuda_host_free(void *p) {
  if (p) cudaFreeHost(p);
}
