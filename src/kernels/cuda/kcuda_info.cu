/* kcuda_info.h: apart from kcuda.cu, which holds the kernels. */
#include <cuda_runtime.h>

extern "C" {
#include "kernels/cuda/kcuda_info.h"
}

extern "C" int df_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  if (cudaSetDevice(dev) != cudaSuccess || cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}
