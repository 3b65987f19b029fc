#!/bin/sh
# Conversation reuse in `deltafin serve`: a prompt that extends the kept
# state (the end of the last reply, or the end of the last prompt) prefills
# only its new part, reported as usage.prompt_tokens_details.cached_tokens,
# and the ids are those of `deltafin run` on the whole prompt and of a server
# without reuse (--reuse-mb 0), on completions and a multi-turn chat.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-reuse.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

start_reuse_pair

python3 - "$R" "$N" "$DF_BIN" "$T/model" <<'PY' || fail "conversation reuse"
import json, subprocess, sys, urllib.request
R, N, BIN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def post(port, path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        return json.load(r)

def run(ids, n):
    out = subprocess.run([BIN, "run", "--model", MODEL, "--json", "--threads", "1",
                          "--prompt-ids", ",".join(map(str, ids)), "--max-new", str(n)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

def compl(port, ids, n):
    d = post(port, "/v1/completions", {"model": "k3-tiny", "prompt": ids, "max_tokens": n})
    u = d["usage"]
    return d["choices"][0]["text"], u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]

A = [100 + (i * 37) % 900 for i in range(50)]
r1 = run(A, 10)
t1, p1, c1 = compl(R, A, 10)
assert (p1, c1) == (50, 0), (p1, c1)
assert t1 == r1["text"], (t1, r1["text"])
ids1 = r1["output_ids"]
assert len(ids1) == 10, ids1

# turn 2 extends the end of the reply: the live state covers A and the first
# 9 reply ids (the 10th was drawn, not run), so 1 + 5 positions are prefilled
B = A + ids1 + [7, 8, 9, 10, 11]
r2 = run(B, 8)
t2, p2, c2 = compl(R, B, 8)
assert (p2, c2) == (65, 59), (p2, c2)
assert t2 == r2["text"]
t2n, _, c2n = compl(N, B, 8)
assert t2n == t2 and c2n == 0
print(f"turn 2: {p2} prompt tokens, {c2} reused, {p2 - c2} prefilled")

# turn 3 branches from the first prompt: the prompt snapshot is used
C = A + [5, 6, 7]
r3 = run(C, 6)
t3, p3, c3 = compl(R, C, 6)
assert (p3, c3) == (53, 50), (p3, c3)
assert t3 == r3["text"]
# nothing in common: a reset
D = [900 - i for i in range(20)]
t4, p4, c4 = compl(R, D, 4)
assert c4 == 0 and t4 == run(D, 4)["text"]

# a multi-turn chat: the same replies with and without reuse; each later
# turn reuses at least the previous prompt
msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
prev_prompt = 0
for turn in range(3):
    body = {"model": "k3-tiny", "messages": msgs, "max_tokens": 16}
    a = post(R, "/v1/chat/completions", body)
    b = post(N, "/v1/chat/completions", body)
    ma, mb = a["choices"][0]["message"], b["choices"][0]["message"]
    assert (ma["content"], ma["reasoning_content"]) == (mb["content"], mb["reasoning_content"]), (ma, mb)
    ua = a["usage"]
    cached = ua["prompt_tokens_details"]["cached_tokens"]
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    if turn > 0:
        assert cached >= prev_prompt, (turn, cached, prev_prompt)
        assert cached < ua["prompt_tokens"]
    print(f"chat turn {turn + 1}: {ua['prompt_tokens']} prompt tokens, {cached} reused")
    prev_prompt = ua["prompt_tokens"]
    msgs = msgs + [{"role": "assistant", "content": ma["content"], "reasoning_content": ma["reasoning_content"]},
                   {"role": "user", "content": f"And another, number {turn + 2}?"}]
# n = 3 greedy choices: the later choices reuse the prompt state, same text
d = post(R, "/v1/completions", {"model": "k3-tiny", "prompt": C, "max_tokens": 6, "n": 3})
assert [c["text"] for c in d["choices"]] == [t3] * 3
print("reuse ok")
PY
pass "conversation reuse: only new tokens prefilled, ids unchanged (completions, 3-turn chat, n = 3)"
echo "PASS: deltafin serve conversation reuse"
