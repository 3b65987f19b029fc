/* Host-side CUDA helpers for kgpu.c, apart from kcuda.h's kernels: device
 * memory figures for planning the weight tier, and page-locked host memory,
 * without which a copy to the device waits for the stream's earlier work
 * (a pageable copy synchronises first) and nothing overlaps. A program
 * linking these loads every kernel when its context is made
 * (CUDA_MODULE_LOADING=EAGER unless set: kcuda_host.cu says why). */
#ifndef DF_KERNELS_CUDA_KCUDA_HOST_H
#define DF_KERNELS_CUDA_KCUDA_HOST_H

#include <stddef.h>
#include <stdint.h>

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

/* Device memory mapped into reserved addresses a granule at a time (the
 * driver's virtual memory management), for the weight tier's heap
 * (dheap.h says why). The driver's functions are looked up at the first
 * call, not linked, so a build runs where no driver is installed.
 * df_cuda_vm_granule: the granule of dev's memory, 0 where the driver or
 * the device has no virtual memory management (the tier then allocates
 * each matrix on its own). */
size_t df_cuda_vm_granule(int dev);
/* bytes (a multiple of the granule) of addresses starting at a multiple
 * of align (the granule), no memory under them; NULL on failure. */
void *df_cuda_vm_reserve(size_t bytes, size_t align);
void df_cuda_vm_unreserve(void *va, size_t bytes);
/* n granules (of gran bytes, df_cuda_vm_granule's) of dev's memory mapped
 * at va, readable and writable by dev, one handle each into h; 0, or -1
 * with nothing left mapped. */
int df_cuda_vm_map(int dev, void *va, size_t gran, int n, uint64_t *h);
/* The granule at va unmapped and its memory given back. */
void df_cuda_vm_unmap(void *va, size_t gran, uint64_t h);

#endif
