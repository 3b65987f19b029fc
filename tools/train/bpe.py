#!/usr/bin/python3
"""Byte-level BPE for the nano models, written for this project (no tokenizer library).

Two flavours from the same trainer:
  k3     the release's format: tiktoken.model ("base64(bytes) rank" per line,
         ranks 0..255 = the byte values, merges after them), pre-tokenised with
         K3's pattern (kimi-k3.md section 6), encoded tiktoken's way (merge the
         adjacent pair whose concatenation has the lowest rank, leftmost first);
         tokenizer_config.json with 256 specials of which only 16 are listed.
  hf     a Hugging Face tokenizer.json (Qwen2/Qwen3 style: NFC, Split on Qwen's
         pattern, ByteLevel without regex, BPE with merges), encoded by merge rank.

  bpe.py train --kind k3 --vocab 4096 --text train.txt --out DIR
  bpe.py train --kind hf --vocab 3072 --text train.txt --out DIR
  bpe.py encode --kind k3 --model DIR --text F --out ids.u16   (raw little-endian uint16)
"""
import argparse
import base64
import heapq
import json
import os
import sys
import unicodedata
from collections import Counter

K3_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

_RE = {}

# The 16 specials the release's tokenizer_config.json lists (offset from the first special).
K3_LISTED = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
             6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 65: "<osagent_mode>",
             18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
             254: "[UNK]", 255: "[PAD]"}
HF_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def pretok(kind, text):
    if not _RE:
        import regex  # Debian python3-regex or pip regex: \p{...} classes and && intersections
        _RE["k3"] = regex.compile(K3_PATTERN, regex.V1)
        _RE["hf"] = regex.compile(QWEN_PATTERN, regex.V0)
    if kind == "k3":
        return _RE["k3"].findall(text)
    return _RE["hf"].findall(unicodedata.normalize("NFC", text))


def bytes_to_unicode():
    """GPT-2's printable mapping of the 256 bytes (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train(kind, text, vocab):
    """Returns (tokens: list of bytes by id, merges: list of (id_a, id_b))."""
    n_special = 256 if kind == "k3" else len(HF_SPECIALS)
    target = vocab - n_special
    counts = Counter(pretok(kind, text))
    words = [list(w.encode("utf-8")) for w in counts]
    freq = list(counts.values())
    toks = [bytes([b]) for b in range(256)]
    known = {t: i for i, t in enumerate(toks)}
    pc = Counter()
    where = {}
    for wi, w in enumerate(words):
        f = freq[wi]
        for p in zip(w, w[1:]):
            pc[p] += f
            where.setdefault(p, set()).add(wi)
    heap = [(-c, toks[a] + b"\x00" + toks[b], a, b) for (a, b), c in pc.items()]
    heapq.heapify(heap)
    merges = []
    while len(toks) < target and heap:
        negc, _, a, b = heapq.heappop(heap)
        if pc.get((a, b), 0) != -negc or negc == 0:
            continue
        new = toks[a] + toks[b]
        if new in known:  # same bytes reached by another merge: reuse the id
            nid = known[new]
        else:
            nid = len(toks)
            toks.append(new)
            known[new] = nid
        merges.append((a, b))
        changed = Counter()
        for wi in list(where.get((a, b), ())):
            w = words[wi]
            f = freq[wi]
            i, out = 0, []
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(nid)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            for p in zip(w, w[1:]):
                changed[p] -= f
            for p in zip(out, out[1:]):
                changed[p] += f
                where.setdefault(p, set()).add(wi)
            words[wi] = out
        for p, d in changed.items():
            if d == 0:
                continue
            pc[p] += d
            if pc[p] <= 0:
                del pc[p]
            else:
                heapq.heappush(heap, (-pc[p], toks[p[0]] + b"\x00" + toks[p[1]], p[0], p[1]))
        pc.pop((a, b), None)
    return toks, merges


# ------------------------------------------------------------------ encoders

class TiktokenBPE:
    """tiktoken's rule: repeatedly merge the adjacent pair whose bytes have the lowest rank."""

    def __init__(self, ranks):
        self.ranks = ranks  # bytes -> rank
        self.cache = {}

    def word(self, b):
        if b in self.ranks:
            return [self.ranks[b]]
        r = self.cache.get(b)
        if r is not None:
            return r
        parts = [b[i:i + 1] for i in range(len(b))]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                rk = self.ranks.get(parts[i] + parts[i + 1])
                if rk is not None and (best is None or rk < best):
                    best, bi = rk, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        r = [self.ranks[p] for p in parts]
        self.cache[b] = r
        return r

    def encode(self, text):
        out = []
        for piece in pretok("k3", text):
            out += self.word(piece.encode("utf-8"))
        return out


class MergeBPE:
    """Hugging Face BPE: repeatedly apply the mergeable pair of lowest merge index, leftmost first."""

    def __init__(self, vocab, merges):
        self.vocab = vocab  # str -> id
        self.mrank = {tuple(m): i for i, m in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        self.cache = {}

    def word(self, s):
        r = self.cache.get(s)
        if r is not None:
            return r
        parts = [self.b2u[c] for c in s.encode("utf-8")]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                rk = self.mrank.get((parts[i], parts[i + 1]))
                if rk is not None and (best is None or rk < best):
                    best, bi = rk, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        r = [self.vocab[p] for p in parts]
        self.cache[s] = r
        return r

    def encode(self, text):
        out = []
        for piece in pretok("hf", text):
            out += self.word(piece)
        return out


# ------------------------------------------------------------------ files

def atomic_write(path, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path + ".tmp", mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def k3_special_name(off, n_ranks):
    return K3_LISTED.get(off, f"<|reserved_token_{n_ranks + off}|>")


def write_k3(out, toks):
    n = len(toks)
    lines = "".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(toks))
    atomic_write(os.path.join(out, "tiktoken.model"), lines)
    dec = {}
    for off in sorted(K3_LISTED):
        dec[str(n + off)] = {"content": K3_LISTED[off], "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False, "special": True}
    cfg = {
        "added_tokens_decoder": dict(sorted(dec.items(), key=lambda kv: int(kv[0]))),
        "additional_special_tokens": ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]", "clean_up_tokenization_spaces": False, "eos_token": "[EOS]",
        "extra_special_tokens": {}, "model_max_length": 1048576, "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer", "unk_token": "[UNK]",
    }
    atomic_write(os.path.join(out, "tokenizer_config.json"), json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def write_hf(out, toks, merges):
    b2u = bytes_to_unicode()
    u = lambda t: "".join(b2u[c] for c in t)
    vocab = {}
    for i, t in enumerate(toks):
        vocab.setdefault(u(t), i)
    n = len(toks)
    added = [{"id": n + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(HF_SPECIALS)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[u(toks[a]), u(toks[b])] for a, b in merges]},
    }
    atomic_write(os.path.join(out, "tokenizer.json"), json.dumps(tj, ensure_ascii=False) + "\n")
    cfg = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 4096,
           "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
           "tokenizer_class": "Qwen2Tokenizer",
           "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    atomic_write(os.path.join(out, "tokenizer_config.json"), json.dumps(cfg, indent=2) + "\n")


def load_k3(d):
    ranks = {}
    with open(os.path.join(d, "tiktoken.model")) as f:
        for line in f:
            b64, r = line.split()
            ranks[base64.b64decode(b64)] = int(r)
    return TiktokenBPE(ranks)


def load_hf(d):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    m = tj["model"]
    return MergeBPE(m["vocab"], [tuple(x) for x in m["merges"]])


def decode_k3(enc, ids):
    inv = {r: b for b, r in enc.ranks.items()}
    return b"".join(inv[i] for i in ids).decode("utf-8", "replace")


def decode_hf(enc, ids):
    inv = {i: s for s, i in enc.vocab.items()}
    u2b = {v: k for k, v in enc.b2u.items()}
    return bytes(u2b[c] for i in ids for c in inv[i]).decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["train", "encode"])
    ap.add_argument("--kind", choices=["k3", "hf"], required=True)
    ap.add_argument("--vocab", type=int, default=4096, help="total ids, specials included")
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", help="encode: the directory holding the tokenizer")
    a = ap.parse_args()
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    if a.cmd == "train":
        os.makedirs(a.out, exist_ok=True)
        toks, merges = train(a.kind, text, a.vocab)
        (write_k3(a.out, toks) if a.kind == "k3" else write_hf(a.out, toks, merges))
        enc = load_k3(a.out) if a.kind == "k3" else load_hf(a.out)
        sample = text[:200000]
        ids = enc.encode(sample)
        back = decode_k3(enc, ids) if a.kind == "k3" else decode_hf(enc, ids)
        want = sample if a.kind == "k3" else unicodedata.normalize("NFC", sample)
        if back != want:
            sys.exit("round trip failed")
        print(f"{a.kind}: {len(toks)} ranks + specials, {len(merges)} merges; "
              f"{len(sample) / len(ids):.2f} chars/token on the first 200k chars; round trip ok")
    else:
        import array
        enc = load_k3(a.model) if a.kind == "k3" else load_hf(a.model)
        ids = array.array("H", enc.encode(text))
        if sys.byteorder != "little":
            ids.byteswap()
        atomic_write(a.out, ids.tobytes())
        print(f"{len(ids)} tokens")


if __name__ == "__main__":
    main()
