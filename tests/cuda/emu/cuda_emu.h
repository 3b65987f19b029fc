/* Host stand-ins for the CUDA built-ins that src/kernels/cuda's kernel
 * headers (the *.cuh files) use, so the host compiler builds
 * those same kernels and emu_launch runs them on the CPU: a grid's blocks
 * one after another, a block's threads as coroutines of one host thread
 * (ucontext), each running until it reaches a barrier; __syncthreads and
 * the warp shuffles are barriers among the block's (or the warp's) threads
 * that have not yet returned. Each warp runs ahead of the others as far as
 * its barriers let it (cuda_emu.cc), so shared memory that one warp reads
 * before a block barrier has let another write it shows.
 *
 * What it checks is a kernel's logic: its indexing, its barriers, its
 * order of operations, which decide whether the result is bit for bit the
 * scalar reference's. The arithmetic is the host's IEEE float, compiled
 * without contraction (-ffp-contract=off), which is what __fadd_rn and
 * __fmul_rn are on the GPU; the GPU's own units and speed are not modelled
 * (gpu.test_cuda_kernels on the GPU machine checks those). A barrier that
 * only some threads reach stops the test here (a deadlock the scheduler
 * sees). The threads run in a fixed order between barriers (first to last
 * in even blocks, last to first in odd ones), so a race between two threads
 * gives the same result every time: a missing barrier shows only where one
 * of the two orders lets a thread read what another has not yet written or
 * has already overwritten; race freedom is argued in the kernel, not
 * proved here. */
#ifndef DF_TESTS_CUDA_EMU_CUDA_EMU_H
#define DF_TESTS_CUDA_EMU_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* one block runs at a time, so a function-static array is the block's */
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
  unsigned x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return uint4{a, b, c, d};
}

/* The running thread's place in the grid (one host thread runs every
 * emulated thread, switching between them at barriers). */
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

/* A barrier among the live threads of the block (w < 0) or of warp w;
 * threads that have returned are not waited for, as on the GPU. */
void emu_barrier(int w);
/* The 32-bit slot of lane `lane` of the calling thread's warp in the
 * exchange buffer `parity` (shuffles alternate buffers: a lane can only
 * reach the shuffle after next once every lane has passed the next one's
 * barrier, by which time the buffer's reads are done). */
uint32_t *emu_slot(int parity, int lane);
int emu_shfl_parity(void);

static inline void __syncthreads(void) { emu_barrier(-1); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  emu_barrier((int)threadIdx.x / 32);
}

/* __syncthreads_and (w < 0) and __all_sync over warp w: a barrier whose
 * result is whether every thread that reached it (the live ones) voted
 * nonzero */
int emu_vote_all(int pred, int w);
static inline int __syncthreads_and(int pred) { return emu_vote_all(pred, -1); }
static inline int __all_sync(unsigned mask, int pred) {
  (void)mask;
  return emu_vote_all(pred, (int)threadIdx.x / 32);
}

template <class T> static inline T emu_shfl(T v, int src) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only");
  int lane = (int)threadIdx.x % 32, par = emu_shfl_parity();
  memcpy(emu_slot(par, lane), &v, 4);
  emu_barrier((int)threadIdx.x / 32);
  T out;
  memcpy(&out, emu_slot(par, src), 4);
  return out;
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  (void)mask;
  int lane = (int)threadIdx.x % 32;
  int src = lane ^ m;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return emu_shfl(v, src);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  (void)mask;
  int lane = (int)threadIdx.x % 32;
  int src = lane + (int)d;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return emu_shfl(v, src);
}

template <class T> static inline T __ldg(const T *p) { return *p; }
static inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
/* shf.l.wrap: the top 32 bits of (hi:lo) << (n & 31) */
static inline uint32_t __funnelshift_l(uint32_t lo, uint32_t hi, uint32_t n) {
  n &= 31;
  return n ? (hi << n) | (lo >> (32 - n)) : hi;
}
static inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t n) {
  n &= 31;
  return n ? (lo >> n) | (hi << (32 - n)) : lo;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }

/* cp.async as PTX defines it: a copy is pending until a wait_group that
 * leaves at most N of the thread's newer committed groups pending; only
 * then do its bytes land. They are read when it is issued, the earliest
 * the GPU may read them, so a copy issued before pdl_wait reads what the
 * memory held then (the kernel headers call these under DF_CUDA_EMU, in
 * place of the PTX). */
#define DF_CUDA_EMU 1
void emu_cp_async(void *dst, const void *src, int bytes);
void emu_cp_commit(void);
void emu_cp_wait(int n);

/* kcuda_pdl.cuh's pdl_wait: counts each thread's waits in emu_pdl_waits
 * and, at a block's first one, calls emu_on_pdl_wait (when set); a test
 * sets emu_on_block to make the memory a dependent launch may not read
 * before its wait unreadable (NaN) at each block's start, and
 * emu_on_pdl_wait to put it back, as the kernel before it would finish. */
void emu_pdl_wait(void);
inline std::function<void()> emu_on_block, emu_on_pdl_wait;
inline long emu_pdl_waits;
/* kcuda_gemv.cuh's MXFP4 fused form: its units run (tf_mxfp4::unit_fma's
 * calls), which the test of when it is taken counts */
inline long emu_fused_units;

/* a launch's dynamic shared memory (emu_launch_dyn's bytes, 16-aligned) */
void *emu_dyn_shared(void);
#define DF_DYN_SHARED(type, name) type *name = (type *)emu_dyn_shared()
/* prmt's default mode: byte n of the result is byte (s >> 4n) & 7 of the
 * pair {y, x} (x bytes 0-3); the kernels never set a selector's sign bit */
uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s);

/* Runs body for every thread of one block (blockDim.x of them, at most
 * 1024), each on its own stack, switching at barriers. */
void emu_run_block(const std::function<void()> &body);

/* Runs kernel(args...) over grid x block (block: x only): blocks in
 * order. */
template <class K, class... A> void emu_launch(dim3 grid, dim3 block, K kernel, A... args) {
  if (block.y != 1 || block.z != 1 || block.x < 1 || block.x > 1024) __builtin_trap();
  gridDim = grid, blockDim = block;
  std::function<void()> body = [&] { kernel(args...); };
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx = uint3{bx, by, bz};
        if (emu_on_block) emu_on_block();
        emu_run_block(body);
      }
}
/* the same with `bytes` of dynamic shared memory (<<<grid, block, bytes>>>) */
void emu_set_dyn_shared(size_t bytes);
template <class K, class... A>
void emu_launch_dyn(dim3 grid, dim3 block, size_t bytes, K kernel, A... args) {
  emu_set_dyn_shared(bytes);
  emu_launch(grid, block, kernel, args...);
  emu_set_dyn_shared(0);
}

#endif
