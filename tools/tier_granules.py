#!/usr/bin/env python3
"""What each matrix of a checkpoint loses to its last device granule when
the GPU tier allocates it on its own (docs/PERFORMANCE.md, "The GPU tier's
lost granules"): the bytes as kgpu.c stores it (the weights 256-byte
aligned, then int8 row scales for a 2-D bf16 spine matrix converted to
int8, or an MXFP4 matrix's block scales) rounded up to the granule.

  python3 tools/tier_granules.py MODEL_DIR [GRANULE_BYTES]

Reads the safetensors headers only. Prints one line per kind of matrix
(a layer's tensor name without the layer; routed experts together) and
the total over the layers present."""
import glob
import json
import struct
import sys


def up(n, a):
    return (n + a - 1) // a * a


def main():
    d = sys.argv[1]
    gran = int(sys.argv[2]) if len(sys.argv) > 2 else 2 << 20
    per, total, lost = {}, 0, 0
    for f in sorted(glob.glob(d + "/*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            head = json.loads(fh.read(n))
        for name, t in head.items():
            if name == "__metadata__" or ".layers." not in name:
                continue
            shape = t["shape"]
            if name.endswith("weight_packed"):
                r, c = shape
                size = up(r * c, 256) + r * (c * 2 // 32)
            elif t["dtype"] == "BF16" and len(shape) == 2 and min(shape) >= 64:
                r, c = shape
                size = up(r * c, 256) + r * 4
            else:
                continue
            key = name.split(".layers.", 1)[1].split(".", 1)[1]
            if ".experts." in key and "shared" not in key:
                key = "routed experts (each matrix)"
            waste = up(size, gran) - size
            k = per.setdefault(key, [0, 0, 0])
            k[0] += 1
            k[1] += size
            k[2] += waste
            total += size
            lost += waste
    for key, (c, size, waste) in sorted(per.items(), key=lambda x: -x[1][2]):
        print(f"{key:56s} {c:5d} x {size / c / 2**20:8.2f} MiB, {waste / c / 2**20:5.2f} MiB lost each")
    print(f"total {total / 1e9:.3f} GB stored, {lost / 1e9:.3f} GB lost to granules of {gran} bytes")


main()
