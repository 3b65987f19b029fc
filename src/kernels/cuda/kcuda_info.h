/* Device memory figures for planning the weight tier (kgpu.c). */
#ifndef DF_KERNELS_CUDA_KCUDA_INFO_H
#define DF_KERNELS_CUDA_KCUDA_INFO_H

#include <stddef.h>

/* Free and total bytes of device dev's memory; 0, or -1 on a CUDA error. */
int df_cuda_mem_info(int dev, size_t *free_b, size_t *total_b);

#endif
