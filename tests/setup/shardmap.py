#!/usr/bin/env python3
"""Independent views of a checkpoint's shards and of a stream install's
present-ranges journals, for the setup tests (reads safetensors headers and
the journal format directly; shares no code with deltafin).

  spine-bytes SRC              bytes of every shard header + non-expert tensor
  record-bytes SRC             bytes of one routed expert record
  check-present ROOT SRC WHICH headers and spine present; the expert records
                               present are exactly WHICH (none, or a file of
                               "layer expert" lines); none partly present
  count-present ROOT SRC       expert records fully present
  verify-present ROOT SRC      every present range equals the original's bytes
  missing-bytes ROOT           bytes not present in the journalled shards
  damage-fetched ROOT SRC      flip a byte inside one present expert record
  add-vision SRC               add a shard of vision tensors only; prints its header bytes
  shard-regex WWW COMMIT       a regex of the served shards' blob paths
  pick-n TRACE                 an N with a strict gap in use counts after it
  top-n TRACE N                the N most used (demand reads), "layer expert"
  corrupt-blob-expert WWW SRC COMMIT   flip a byte of an expert record in a
                               served blob; prints the shard's name
  served LOG WWW SRC COMMIT    from nginx's access log: "RECORDS BYTES" of the
                               expert records served (each must be served whole,
                               no byte of one served twice)
  corrupt-blob-record WWW SRC COMMIT L X   the same for layer L expert X;
                               prints "shard offset" of the record
  check-sums DOC SRC           a record-sums document lists exactly SRC's shards,
                               their spans (header, spine tensors) and routed-expert
                               records, with their sha256
  corrupt-blob-spine WWW SRC COMMIT   flip a byte of a spine tensor in a served
                               blob; prints the shard's name
  is-present ROOT SRC L X      exit 0 when layer L expert X is present
"""
import glob
import hashlib
import json
import os
import re
import struct
import sys

EXP = re.compile(r"\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight_(packed|scale)$")


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    base = 8 + n
    return base, {k: (base + v["data_offsets"][0], base + v["data_offsets"][1]) for k, v in h.items()}


def shards(src):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(src, "*.safetensors")))


def records(src):
    """(layer, expert) -> (shard, begin, end)."""
    recs = {}
    for s in shards(src):
        _, t = header(os.path.join(src, s))
        for k, (b, e) in t.items():
            m = EXP.search(k)
            if not m:
                continue
            key = (int(m.group(1)), int(m.group(2)))
            old = recs.get(key)
            recs[key] = (s, min(b, old[1]) if old else b, max(e, old[2]) if old else e)
    return recs


def spine_ranges(src, s):
    base, t = header(os.path.join(src, s))
    out = [(0, base)]
    for k, (b, e) in t.items():
        if not EXP.search(k) and e > b and not k.startswith(("vision_tower.", "mm_projector.")):
            out.append((b, e))
    return out


def journal(root, s):
    p = os.path.join(root, s + ".ranges")
    if not os.path.exists(p):
        return None
    rs = []
    for line in open(p):
        f = line.split()
        if len(f) == 5 and f[0] == "R":
            rs.append((int(f[1], 16), int(f[2], 16)))
    return union(rs)


def local_ranges(root, s):
    """What is local of a shard: its journal's ranges, or the whole file for
    a shard at its final name without a journal (complete and verified, by
    the install's invariant); None when there is neither."""
    u = journal(root, s)
    if u is None and os.path.exists(os.path.join(root, s)):
        return [(0, os.path.getsize(os.path.join(root, s)))]
    return u


def union(rs):
    out = []
    for b, e in sorted(rs):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


def covered(u, b, e):
    return any(x <= b and e <= y for x, y in u)


def overlaps(u, b, e):
    return any(x < e and b < y for x, y in u)


def uses(trace):
    c = {}
    for line in open(trace):
        o = json.loads(line)
        if o.get("k") == "read" and o.get("demand") == 1 and o.get("ok") == 1:
            key = (o["layer"], o["expert"])
            c[key] = c.get(key, 0) + 1
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "spine-bytes":
        print(sum(e - b for s in shards(a[0]) for b, e in spine_ranges(a[0], s)))
    elif cmd == "record-bytes":
        s, b, e = next(iter(records(a[0]).values()))
        print(e - b)
    elif cmd in ("check-present", "count-present"):
        root, src = a[0], a[1]
        want = set()
        if cmd == "check-present" and a[2] != "none":
            want = {tuple(int(x) for x in l.split()) for l in open(a[2]) if l.strip()}
        present = set()
        for s in shards(src):
            u = local_ranges(root, s)
            if u is None:
                sys.exit("no journal and no complete shard for %s" % s)
            for b, e in spine_ranges(src, s):
                if not covered(u, b, e):
                    sys.exit("%s: spine/header range %d-%d not present" % (s, b, e))
        for key, (s, b, e) in records(src).items():
            u = local_ranges(root, s)
            if covered(u, b, e):
                present.add(key)
            elif overlaps(u, b, e):
                sys.exit("layer %d expert %d partly present" % key)
        if cmd == "count-present":
            print(len(present))
        elif present != want:
            sys.exit("present %s, expected %s" % (sorted(present - want), sorted(want - present)))
    elif cmd == "verify-present":
        root, src = a[0], a[1]
        for s in shards(src):
            u = local_ranges(root, s) or []
            with open(os.path.join(root, s), "rb") as f, open(os.path.join(src, s), "rb") as g:
                for b, e in u:
                    f.seek(b)
                    g.seek(b)
                    if f.read(e - b) != g.read(e - b):
                        sys.exit("%s: bytes %d-%d differ" % (s, b, e))
    elif cmd == "missing-bytes":
        tot = 0
        for p in glob.glob(os.path.join(a[0], "*.safetensors.ranges")):
            size = os.path.getsize(p[: -len(".ranges")])
            tot += size - sum(e - b for b, e in journal(a[0], os.path.basename(p)[: -len(".ranges")]))
        print(tot)
    elif cmd == "damage-fetched":
        root, src = a[0], a[1]
        for key, (s, b, e) in sorted(records(src).items()):
            if covered(journal(root, s), b, e):
                with open(os.path.join(root, s), "r+b") as f:
                    f.seek(b + 7)
                    x = f.read(1)
                    f.seek(b + 7)
                    f.write(bytes([x[0] ^ 0x01]))
                print("%d %d" % key)
                return
        sys.exit("no present record")
    elif cmd == "pick-n":
        u = uses(a[0])
        for n in range(min(10, len(u) - 1), 0, -1):
            if u[n - 1][1] > u[n][1]:
                print(n)
                return
        print(len(u))
    elif cmd == "top-n":
        for (l, x), _ in uses(a[0])[: int(a[1])]:
            print(l, x)
    elif cmd == "add-vision":
        # a shard holding only vision tensors, as the release has them, named in the index
        src = a[0]
        rnd = __import__("random").Random(3)
        ts = [("vision_tower.blocks.0.attn.qkv.weight", [64, 192]), ("mm_projector.linear_1.weight", [64, 64])]
        hdr, data, off = {}, b"", 0
        for name, shape in ts:
            n = shape[0] * shape[1] * 2
            hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            data += bytes(rnd.getrandbits(8) for _ in range(n))
            off += n
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(src, "model-vision.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)
        ip = os.path.join(src, "model.safetensors.index.json")
        idx = json.load(open(ip))
        for name, _ in ts:
            idx["weight_map"][name] = "model-vision.safetensors"
        json.dump(idx, open(ip, "w"), indent=2)
        print(8 + len(h))
    elif cmd == "shard-regex":
        info = json.load(open(os.path.join(a[0], "api", a[1] + ".json")))
        shas = [s["lfs"]["sha256"] for s in info["siblings"] if s["rfilename"].endswith(".safetensors")]
        print("^/cdn/(" + "|".join(shas) + ")$")
    elif cmd == "corrupt-blob-expert":
        www, src, commit = a
        info = json.load(open(os.path.join(www, "api", commit + ".json")))
        sha = {s["rfilename"]: s["lfs"]["sha256"] for s in info["siblings"] if "lfs" in s}
        recs = sorted(records(src).items(), key=lambda kv: (kv[1][0], kv[0]))
        key, (s, b, e) = recs[len(recs) // 2]
        p = os.path.join(www, "cdn", sha[s])
        with open(p, "r+b") as f:
            f.seek(b + 11)
            x = f.read(1)
            f.seek(b + 11)
            f.write(bytes([x[0] ^ 0x04]))
        print(s)
    elif cmd == "served":
        log, www, src, commit = a
        info = json.load(open(os.path.join(www, "api", commit + ".json")))
        by_sha = {s["lfs"]["sha256"]: s["rfilename"] for s in info["siblings"] if "lfs" in s}
        got = {}  # shard -> list of served [b, e)
        for line in open(log):
            f = line.split(" ", 4)
            if len(f) < 5 or f[0] != "GET" or not f[1].startswith("/cdn/") or f[2] != "206":
                continue
            shard = by_sha.get(f[1][5:])
            m = re.match(r'"bytes=(\d+)-(\d+)"', f[4].strip())
            if not shard or not m:
                continue
            b, e = int(m.group(1)), int(m.group(2)) + 1
            if int(f[3]) != e - b:
                sys.exit("%s: range %d-%d sent %s bytes" % (shard, b, e, f[3]))
            got.setdefault(shard, []).append((b, e))
        nrec = nbytes = 0
        for key, (s, b, e) in sorted(records(src).items()):
            served = sum(max(0, min(e, y) - max(b, x)) for x, y in got.get(s, []))
            if served == 0:
                continue
            if served != e - b:
                sys.exit("layer %d expert %d: %d of its %d bytes served (twice, or in part)" %
                         (key[0], key[1], served, e - b))
            nrec += 1
            nbytes += served
        print(nrec, nbytes)
    elif cmd == "corrupt-blob-record":
        www, src, commit, L, X = a
        info = json.load(open(os.path.join(www, "api", commit + ".json")))
        sha = {s["rfilename"]: s["lfs"]["sha256"] for s in info["siblings"] if "lfs" in s}
        s, b, e = records(src)[(int(L), int(X))]
        with open(os.path.join(www, "cdn", sha[s]), "r+b") as f:
            f.seek(b + 11)
            x = f.read(1)
            f.seek(b + 11)
            f.write(bytes([x[0] ^ 0x04]))
        print(s, b)
    elif cmd == "corrupt-blob-spine":
        www, src, commit = a
        info = json.load(open(os.path.join(www, "api", commit + ".json")))
        sha = {s["rfilename"]: s["lfs"]["sha256"] for s in info["siblings"] if "lfs" in s}
        s = shards(src)[-1]
        b, e = max(spine_ranges(src, s)[1:], key=lambda r: r[1] - r[0])
        with open(os.path.join(www, "cdn", sha[s]), "r+b") as f:
            f.seek((b + e) // 2)
            x = f.read(1)
            f.seek((b + e) // 2)
            f.write(bytes([x[0] ^ 0x08]))
        print(s)
    elif cmd == "check-sums":
        doc, src = json.load(open(a[0])), a[1]
        assert doc["format"] == "deltafin-record-sums/1", doc["format"]
        names = [x["name"] for x in doc["shards"]]
        if names != shards(src):
            sys.exit("shards %s, expected %s" % (names, shards(src)))
        for x in doc["shards"]:
            data = open(os.path.join(src, x["name"]), "rb").read()
            if x["size"] != len(data) or x["sha256"] != hashlib.sha256(data).hexdigest():
                sys.exit("shard %s: wrong size or sha256" % x["name"])
            # spans: exactly what a stream install fetches besides the experts
            got_sp = sorted((y["offset"], y["offset"] + y["length"], y["sha256"]) for y in x["spans"])
            want_sp = sorted((b, e, hashlib.sha256(data[b:e]).hexdigest()) for b, e in spine_ranges(src, x["name"]))
            if got_sp != want_sp:
                sys.exit("shard %s: spans differ from the header and spine tensors" % x["name"])
        recs = records(src)
        got = {(r["layer"], r["expert"]): r for r in doc["records"]}
        if set(got) != set(recs):
            sys.exit("records differ: %s" % sorted(set(got) ^ set(recs))[:5])
        for key, (s, b, e) in recs.items():
            r = got[key]
            if names[r["shard"]] != s or r["offset"] != b or r["length"] != e - b:
                sys.exit("layer %d expert %d: wrong place" % key)
            with open(os.path.join(src, s), "rb") as f:
                f.seek(b)
                if hashlib.sha256(f.read(e - b)).hexdigest() != r["sha256"]:
                    sys.exit("layer %d expert %d: wrong sha256" % key)
        print(len(recs))
    elif cmd == "is-present":
        root, src, L, X = a
        s, b, e = records(src)[(int(L), int(X))]
        u = journal(root, s)
        sys.exit(0 if u is None or covered(u, b, e) else 1)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
