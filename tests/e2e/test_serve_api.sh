#!/bin/sh
# llama-server-style endpoints of `deltafin serve`: POST /tokenize and
# /detokenize against `deltafin tokenize` / `deltafin detokenize`, and GET
# /metrics (Prometheus text) whose counters add up to the usage the
# responses reported.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-api.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start A
TEXT='Hello, wörld: 日本 <|end_of_msg|> end'
want=$("$DF_BIN" tokenize --model "$T/model" "$TEXT")
python3 - "$PORT" "$TEXT" "$want" "$DF_BIN" "$T/model" <<'PY' || fail "tokenize / detokenize / metrics"
import json, subprocess, sys, urllib.request, urllib.error
port, text, want, BIN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
def post(path, body, ctype="application/json"):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": ctype})
    try:
        with urllib.request.urlopen(rq, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
ids = [int(x) for x in want.split(",")]
s, d = post("/tokenize", {"content": text})
assert s == 200 and d["tokens"] == ids, (s, d, ids)
s, d = post("/tokenize", {"content": text, "with_pieces": True})
assert [t["id"] for t in d["tokens"]] == ids
# the special's text is plain text unless parse_special is set
s, d = post("/tokenize", {"content": "<|end_of_msg|>", "parse_special": True})
assert len(d["tokens"]) == 1, d
eom = d["tokens"][0]
s, d = post("/detokenize", {"tokens": ids})
assert s == 200 and d["content"] == text, d
ref = subprocess.run([BIN, "detokenize", "--model", MODEL, ",".join(map(str, ids))],
                     check=True, capture_output=True, text=True).stdout
assert ref.rstrip("\n") == text, ref
s, d = post("/detokenize", {"tokens": [eom]})
assert d["content"] == "<|end_of_msg|>", d
s, d = post("/detokenize", {"tokens": [10**9]})
assert s == 400 and d["error"]["param"] == "tokens", d
# llama-server clients send model and add_special (K3's tokenizer adds no BOS: same ids)
for extra in ({"model": "k3-tiny"}, {"add_special": True}, {"add_special": False, "model": "k3-tiny"}):
    s, d = post("/tokenize", {"content": text, **extra})
    assert s == 200 and d["tokens"] == ids, (extra, s, d)
s, d = post("/tokenize", {"content": text, "with_pieces": True, "add_special": True, "model": "k3-tiny"})
pieces = b"".join(t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"]) for t in d["tokens"])
assert s == 200 and [t["id"] for t in d["tokens"]] == ids and pieces.decode() == text, d
s, d = post("/detokenize", {"tokens": ids, "model": "k3-tiny"})
assert s == 200 and d["content"] == text, d
s, d = post("/tokenize", {"content": text, "add_special": "yes"})
assert s == 400 and d["error"]["param"] == "add_special", d
s, d = post("/tokenize", {"text": "x"})
assert s == 400 and d["error"]["param"] == "text", d
s, d = post("/tokenize", {"content": "x"}, "text/plain")
assert s == 415, s

# /metrics adds up what the responses reported
usage = []
for i, body in enumerate([
        {"prompt": "Once upon a time", "max_tokens": 5},
        {"prompt": "Once upon a time, there", "max_tokens": 7},
        {"prompt": [5, 6, 7], "max_tokens": 3, "n": 2}]):
    body["model"] = "k3-tiny"
    s, d = post("/v1/completions", body)
    assert s == 200, d
    usage.append(d["usage"])
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers["Content-Type"]
    lines = r.read().decode().splitlines()
vals, families, seen, types = {}, [], set(), {}
for ln in lines:
    if ln.startswith("# TYPE "):
        name = ln.split()[2]
        assert name not in seen, f"family {name} is split"
        seen.add(name)
        families.append(name)
        types[name] = ln.split()[3]
        continue
    if ln.startswith("#") or not ln:
        continue
    key, v = ln.rsplit(" ", 1)
    base = key.split("{")[0]
    # a histogram family's samples are NAME_bucket, NAME_sum and NAME_count
    fam = families[-1]
    allowed = [fam + x for x in ("_bucket", "_sum", "_count")] if types[fam] == "histogram" else [fam]
    assert base in allowed, f"{key} outside its family"
    vals[key] = float(v)
assert vals["deltafin_requests_total"] == 3, vals
assert vals["deltafin_prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usage)
assert vals["deltafin_generated_tokens_total"] == sum(u["completion_tokens"] for u in usage)
assert vals["deltafin_prompt_tokens_cached_total"] == sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
assert vals["deltafin_prompt_tokens_cached_total"] > 0  # the second prompt extends the first
assert vals["deltafin_prefill_seconds_total"] > 0 and vals["deltafin_decode_seconds_total"] > 0
assert vals["deltafin_expert_bytes_read_total"] > 0
assert vals['deltafin_drive_bytes_read_total{drive="0"}'] == vals["deltafin_expert_bytes_read_total"]
assert vals["deltafin_expert_cache_hits_total"] <= vals["deltafin_expert_requests_total"]
assert vals["deltafin_busy"] == 0 and vals["deltafin_queue_max"] == 4
print("api ok")
PY
pass "/tokenize and /detokenize equal the CLI; /metrics counters equal the reported usage"
echo "PASS: deltafin serve tokenize, detokenize, metrics"
