/* One kernel launch on a stream, plain or as a programmatic dependent
 * launch (kcuda_pdl.cuh says what a kernel launched so must obey); for the
 * .cu files, after cuda_runtime.h. Which one a launch takes is the
 * context's call (kcuda.h's df_cuda_launch_dependent). */
#ifndef DF_KERNELS_CUDA_KCUDA_LAUNCH_CUH
#define DF_KERNELS_CUDA_KCUDA_LAUNCH_CUH

/* false when dependent was asked for and the runtime refused it; the kernel
 * is then launched plain (cudaGetLastError says how that went) */
template <class... P, class... A>
static bool df_launch(cudaStream_t s, bool dependent, void (*k)(P...), dim3 grid, dim3 block,
                      size_t smem, A... args) {
  if (dependent) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cfg.attrs = at, cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, k, args...) == cudaSuccess) return true;
    cudaGetLastError(); /* the plain launch below */
  }
  k<<<grid, block, smem, s>>>(args...);
  return !dependent;
}

#endif
