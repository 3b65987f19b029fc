/* kcuda_host.h: apart from kcuda.cu, which holds the kernels. */
#include <cuda.h> /* the driver's types; its functions are looked up (vm_fns) */
#include <cuda_runtime.h>

extern "C" {
#include "kernels/cuda/kcuda_host.h"
}

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- virtual memory management (kcuda_host.h's df_cuda_vm_*) ---- */
static struct {
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*dev_get)(CUdevice *, int);
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
  int ok;
} vm;
static pthread_once_t vm_once = PTHREAD_ONCE_INIT;

static void vm_fn(const char *name, void **fp) {
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, fp, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    *fp = NULL;
  }
}

static void vm_load(void) {
  vm_fn("cuMemAddressReserve", (void **)&vm.reserve);
  vm_fn("cuMemAddressFree", (void **)&vm.addr_free);
  vm_fn("cuMemCreate", (void **)&vm.create);
  vm_fn("cuMemRelease", (void **)&vm.release);
  vm_fn("cuMemMap", (void **)&vm.map);
  vm_fn("cuMemUnmap", (void **)&vm.unmap);
  vm_fn("cuMemSetAccess", (void **)&vm.access);
  vm_fn("cuMemGetAllocationGranularity", (void **)&vm.granularity);
  vm_fn("cuDeviceGet", (void **)&vm.dev_get);
  vm_fn("cuDeviceGetAttribute", (void **)&vm.attr);
  vm.ok = vm.reserve && vm.addr_free && vm.create && vm.release && vm.map && vm.unmap &&
          vm.access && vm.granularity && vm.dev_get && vm.attr;
}

static CUmemAllocationProp vm_prop(int dev) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

extern "C" size_t df_cuda_vm_granule(int dev) {
  pthread_once(&vm_once, vm_load);
  int on = 0;
  CUdevice d;
  if (!vm.ok || cudaSetDevice(dev) != cudaSuccess || vm.dev_get(&d, dev) != CUDA_SUCCESS ||
      vm.attr(&on, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d) != CUDA_SUCCESS ||
      !on) {
    cudaGetLastError();
    return 0;
  }
  CUmemAllocationProp p = vm_prop(dev);
  size_t g = 0;
  /* the recommended granule: the minimum may map more slowly */
  if (vm.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS) return 0;
  return g;
}

extern "C" void *df_cuda_vm_reserve(size_t bytes, size_t align) {
  CUdeviceptr a = 0;
  if (!vm.ok || vm.reserve(&a, bytes, align, 0, 0) != CUDA_SUCCESS) return NULL;
  return (void *)(uintptr_t)a;
}

extern "C" void df_cuda_vm_unreserve(void *va, size_t bytes) {
  if (va && vm.ok) vm.addr_free((CUdeviceptr)(uintptr_t)va, bytes);
}

extern "C" int df_cuda_vm_map(int dev, void *va, size_t g, int n, uint64_t *h) {
  if (!vm.ok || n <= 0) return -1;
  CUmemAllocationProp p = vm_prop(dev);
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)va;
  int i = 0;
  for (; i < n; i++) {
    CUmemGenericAllocationHandle m;
    if (vm.create(&m, g, &p, 0) != CUDA_SUCCESS) break;
    if (vm.map(base + (size_t)i * g, g, 0, m, 0) != CUDA_SUCCESS) {
      vm.release(m);
      break;
    }
    h[i] = (uint64_t)m;
  }
  CUmemAccessDesc a;
  memset(&a, 0, sizeof a);
  a.location = p.location;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (i == n && vm.access(base, (size_t)n * g, &a, 1) == CUDA_SUCCESS) return 0;
  while (i-- > 0) {
    vm.unmap(base + (size_t)i * g, g);
    vm.release((CUmemGenericAllocationHandle)h[i]);
  }
  return -1;
}

extern "C" void df_cuda_vm_unmap(void *va, size_t gran, uint64_t h) {
  if (!vm.ok) return;
  vm.unmap((CUdeviceptr)(uintptr_t)va, gran);
  vm.release((CUmemGenericAllocationHandle)h);
}
