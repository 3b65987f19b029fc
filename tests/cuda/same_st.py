"""same_st.py A B LABEL: every tensor of two safetensors files (`deltafin
logits --hidden --routes`) equal byte for byte; exits 1 naming the first
tensor and byte that differ. Used by the GPU's engine test and the mock
GPU's fault test."""
import json
import struct
import sys


def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    d = b[8 + n:]
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}


a, b = load(sys.argv[1]), load(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("%s: tensors %s vs %s" % (sys.argv[3], sorted(a), sorted(b)))
for k in sorted(a):
    if a[k] != b[k]:
        x = next((i for i in range(min(len(a[k]), len(b[k]))) if a[k][i] != b[k][i]), min(len(a[k]), len(b[k])))
        sys.exit("%s: %s differs first at byte %d" % (sys.argv[3], k, x))
print("ok: %s: %s equal bit for bit" % (sys.argv[3], ", ".join("%s (%d B)" % (k, len(a[k])) for k in sorted(a))))
