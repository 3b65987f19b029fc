/* Host-side CUDA helpers for kgpu.c, apart from kcuda.h's kernels: device
 * memory figures for planning the weight tier, and page-locked host memory,
 * without which a copy to the device waits for the stream's earlier work
 * (a pageable copy synchronises first) and nothing overlaps. A program
 * linking these loads every kernel when its context is made
 * (CUDA_MODULE_LOADING=EAGER unless set: kcuda_host.cu says why). */
#ifndef DF_KERNELS_CUDA_KCUDA_HOST_H
#define DF_KERNELS_CUDA_KCUDA_HOST_H

#include <stddef.h>

/* Free and total bytes of device dev's memory; 0, or -1 on a CUDA error. */
int df_cuda_mem_info(int dev, size_t *free_b, size_t *total_b);
/* Makes dev the calling thread's current device (the runtime keeps one per
 * thread: a server's generation thread is not the one that opened it);
 * 0, or -1 on a CUDA error. */
int df_cuda_use(int dev);
/* Page-locks existing host memory for the device's copies (and undoes it
 * before that memory is freed); 0, or -1 on a CUDA error. */
int df_cuda_host_register(void *p, size_t bytes);
void df_cuda_host_unregister(void *p);
/* Page-locked host memory (NULL on failure) and its release. */
void *df_cuda_host_alloc(size_t bytes);
void df_cuda_host_free(void *p);

#endif
