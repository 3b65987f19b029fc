#!/bin/sh
# Speculative decoding in `deltafin serve`: on nano-K3 a server with the
# Qwen3 nano-draft, one with n-gram drafts and one with the trained nano-DSpark answer completions and chat
# (streamed and not, a second turn through conversation reuse) with the text
# of a server without drafts; usage reports the drafts kept and thrown away
# (completion_tokens_details.accepted/rejected_prediction_tokens), the draft
# source and its blocks by length and drafts kept by position
# (usage.deltafin_speculation), and /metrics sums them.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-spec-serve.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
cp -r "$DF_SRC/models/nano-k3" "$T/model"

start P --draft off
P=$PORT
start D --draft "$DF_SRC/models/nano-draft" --draft-max 4
D=$PORT
start G --draft ngram
G=$PORT
start S --draft "dspark:$DF_SRC/models/nano-dspark" --draft-max 7
S=$PORT

python3 - "$P" "$D" "$G" "$S" <<'PY' || fail "speculation in the server"
import json, sys, urllib.request
P, D, G, S = sys.argv[1:5]
SOURCE = {"plain": None, "nano-draft": "nano-draft", "ngram": "ngram", "dspark": "dspark"}

def post(port, path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=300) as r:
        if body.get("stream"):
            text, usage = "", None
            for line in r.read().decode().splitlines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if ev.get("usage"):
                    usage = ev["usage"]
                for c in ev.get("choices", []):
                    text += c.get("text") or (c.get("delta") or {}).get("content") or ""
            return text, usage
        d = json.load(r)
        c = d["choices"][0]
        return c.get("text") if "text" in c else c["message"]["content"], d["usage"]

prompt = "A list is a sequence of items. A list can hold other lists. A list"
turn1 = [{"role": "user", "content": "What is a list in Python?"}]
reqs = [
    ("/v1/completions", {"model": "k3-tiny", "prompt": prompt, "max_tokens": 40}),
    ("/v1/completions", {"model": "k3-tiny", "prompt": prompt, "max_tokens": 40, "stream": True,
                         "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "k3-tiny", "messages": turn1, "max_tokens": 48}),
    ("/v1/chat/completions", {"model": "k3-tiny", "messages": turn1, "max_tokens": 48, "stream": True,
                              "stream_options": {"include_usage": True}}),
]
totals = {}
def blocks_of(name, u):
    """usage.deltafin_speculation, checked against completion_tokens_details: (blocks, by position)"""
    det, sp = u["completion_tokens_details"], u.get("deltafin_speculation")
    if SOURCE[name] is None:
        assert sp is None, (name, u)
        return 0, []
    assert sp["draft"] == SOURCE[name], (name, sp)
    bl, aa = sp["block_lengths"], sp["accepted_at"]
    assert len(bl) == len(aa) and sum(bl) == sp["blocks"], (name, sp)
    assert sp["drafted"] == sum((k + 1) * n for k, n in enumerate(bl)), (name, sp)
    assert sp["drafted"] == det["accepted_prediction_tokens"] + det["rejected_prediction_tokens"], (name, sp, det)
    assert sp["accepted"] == sum(aa) == det["accepted_prediction_tokens"], (name, sp, det)
    # a draft at position j is kept only after every one before it: kept counts fall with j
    assert all(aa[j] >= aa[j + 1] for j in range(len(aa) - 1)), (name, sp)
    return sp["blocks"], aa

def add(tot, aa):
    for j, n in enumerate(aa):
        tot[j] = tot.get(j, 0) + n

for port, name in ((P, "plain"), (D, "nano-draft"), (G, "ngram"), (S, "dspark")):
    outs, acc, rej, nblk, at = [], 0, 0, 0, {}
    for path, body in reqs:
        text, u = post(port, path, body)
        det = u["completion_tokens_details"]
        acc += det["accepted_prediction_tokens"]
        rej += det["rejected_prediction_tokens"]
        b, aa = blocks_of(name, u)
        nblk += b
        add(at, aa)
        outs.append(text)
    # a second turn through the kept state
    t2 = turn1 + [{"role": "assistant", "content": outs[2]}, {"role": "user", "content": "And a tuple?"}]
    text, u = post(port, "/v1/chat/completions", {"model": "k3-tiny", "messages": t2, "max_tokens": 32})
    assert u["prompt_tokens_details"]["cached_tokens"] > 0, (name, u)
    det = u["completion_tokens_details"]
    acc += det["accepted_prediction_tokens"]
    rej += det["rejected_prediction_tokens"]
    b, aa = blocks_of(name, u)
    nblk += b
    add(at, aa)
    outs.append(text)
    totals[name] = (outs, acc, rej)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        m = {l.split()[0]: float(l.split()[1]) for l in r.read().decode().splitlines()
             if l and not l.startswith("#") and len(l.split()) == 2}
    assert m["deltafin_draft_tokens_accepted_total"] == acc, (name, m["deltafin_draft_tokens_accepted_total"], acc)
    assert m["deltafin_draft_tokens_total"] == acc + rej, (name, m["deltafin_draft_tokens_total"], acc + rej)
    assert m["deltafin_draft_blocks_total"] == nblk, (name, m["deltafin_draft_blocks_total"], nblk)
    for j in range(16):
        got = m['deltafin_draft_accepted_at_total{position="%d"}' % (j + 1)]
        assert got == at.get(j, 0), (name, j, got, at)
    print(f"{name}: {acc} drafts kept, {rej} thrown away, {nblk} blocks, kept by position {at}")
base = totals["plain"][0]
for name in ("nano-draft", "ngram", "dspark"):
    for i, (a, b) in enumerate(zip(base, totals[name][0])):
        assert a == b, f"{name}: reply {i} differs: {b!r} vs {a!r}"
assert totals["plain"][1] == totals["plain"][2] == 0
assert totals["nano-draft"][1] > 0, "nano-draft: no draft kept"
assert totals["dspark"][1] > 0, "dspark: no draft kept"
PY
pass "speculation in the server: the replies of a server without drafts, usage and /metrics count them"
serve_cleanup
