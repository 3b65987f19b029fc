/* Programmatic dependent launch, the device side (sm_90 and later; a no-op
 * elsewhere and in a launch without the attribute).
 *
 * A kernel launched with it (kcuda_launch.cuh, where the context asks for
 * it, and only after another kernel, never after a copy) may start while the
 * kernel before it is still running; pdl_wait then holds it until that
 * kernel has finished and its writes are visible. Before its pdl_wait a
 * kernel reads only what no kernel writes (a GEMV's weights and scales,
 * uploaded by copies that the stream orders as usual) and writes nothing to
 * global memory; every thread of every block reaches pdl_wait exactly once,
 * so the kernel's own end still implies its predecessor's and the chain
 * stays ordered. pdl_trigger lets the next kernel start early; it says
 * nothing of this kernel's writes, so it can sit at the top of every
 * kernel. Every kernel but the row tiles starts with both (pdl_enter): it
 * gains only the launch's latency; the row tiles stage their first weights
 * between the two. Neither changes an operation or its order: the bits are
 * those of a plain launch. */
#ifndef DF_KERNELS_CUDA_KCUDA_PDL_CUH
#define DF_KERNELS_CUDA_KCUDA_PDL_CUH

__device__ __forceinline__ static void pdl_wait(void) {
#if defined(DF_CUDA_EMU)
  emu_pdl_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ static void pdl_trigger(void) {
#if !defined(DF_CUDA_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* the start of a kernel that reads its inputs from the first instruction */
__device__ __forceinline__ static void pdl_enter(void) {
  pdl_trigger();
  pdl_wait();
}

#endif
