/* kcuda_host.h: apart from kcuda.cu, which holds the kernels. */
#include <cuda_runtime.h>

extern "C" {
#include "kernels/cuda/kcuda_host.h"
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
