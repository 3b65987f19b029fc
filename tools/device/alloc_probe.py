#!/usr/bin/env python3
"""How much of a device's free memory one allocation of each size takes
(issue 21, run 26: the H100's tier, 2,783 matrices each allocated on its
own, left 3.4 GB that our sizes did not count). Through the driver API
(libcuda.so.1, as every CUDA program has it), so no runtime or framework
allocator of its own rounds in between: for each size, N allocations, the
free memory before and after, the difference a piece against the size.

  python3 tools/device/alloc_probe.py [N] [SIZE ...]

Sizes default to K3's: an MXFP4 expert matrix with its scales (3072 x 3584
either way: 5,505,024 + 344,064 bytes), the two of an expert's gate and up
in one, a 2 MiB page and a small block (a layer's norms)."""
import ctypes
import sys

cu = ctypes.CDLL("libcuda.so.1")


def ck(r, what):
    if r != 0:
        raise SystemExit(f"{what}: CUDA driver error {r}")


def free_bytes():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ck(cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)), "cuMemGetInfo")
    return f.value


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    sizes = [int(s) for s in sys.argv[2:]] or [5849088, 2 * 5849088, 2 << 20, 16 << 10, 27 << 20]
    ck(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    print(f"{'size':>12} {'n':>5} {'taken a piece':>14} {'over the size':>14}")
    for size in sizes:
        ptrs = []
        before = free_bytes()
        for _ in range(n):
            p = ctypes.c_uint64()
            ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), f"cuMemAlloc {size}")
            ptrs.append(p)
        taken = (before - free_bytes()) / n
        for p in ptrs:
            ck(cu.cuMemFree_v2(p), "cuMemFree")
        print(f"{size:>12} {n:>5} {taken:>14.0f} {taken / size - 1:>13.1%}")


main()
