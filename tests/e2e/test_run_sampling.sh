#!/bin/sh
# `deltafin run`'s sampling options beyond temperature and top-p (--top-k,
# --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
# --frequency-penalty), checked against properties of the policy and against
# the server, which applies the same policy from a request's fields:
#  - top-k 1, and min-p 1, at any temperature draw the greedy ids;
#  - a very strong repeat penalty over a window covering the whole context
#    makes greedy decoding never repeat an id of that window;
#  - run and /v1/completions give the same text for the same penalties,
#    temperature and seed, also when the server starts from a kept state of
#    the same prompt (the repeat penalty must still see the cached ids);
#  - bad values, and truncation without a temperature, are refused.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-run-sampling.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
P=5,17,99,3,250,17,5
run() { "$DF_BIN" run --model "$T/model" --prompt-ids $P --max-new 16 --threads 1 --json "$@"; }
ids() { python3 -c 'import json,sys; print(json.load(sys.stdin)["output_ids"])'; }

G=$(run | ids)
[ "$(run --temperature 0.9 --seed 5 | ids)" != "$G" ] || fail "sampling at 0.9 drew the greedy ids (test too weak)"
[ "$(run --temperature 0.9 --seed 5 --top-k 1 | ids)" = "$G" ] || fail "--top-k 1 is not greedy"
[ "$(run --temperature 2 --seed 9 --min-p 1 | ids)" = "$G" ] || fail "--min-p 1 is not greedy"
pass "top-k 1 and min-p 1 are greedy"

[ "$(run --repeat-penalty 1.3 | ids)" != "$G" ] || fail "--repeat-penalty 1.3 changed nothing (test too weak)"
run --repeat-penalty 100 --repeat-last-n 64 | python3 -c '
import json, sys
prompt = [int(x) for x in sys.argv[1].split(",")]
out = json.load(sys.stdin)["output_ids"]
ctx = prompt[:]
for i, t in enumerate(out):
    assert t not in ctx[-64:], ("id %d repeated at %d" % (t, i), out)
    ctx.append(t)
' "$P" || fail "a repeat penalty of 100 let an id repeat"
pass "the repeat penalty keeps greedy ids out of its window"

start S
python3 - "$PORT" "$DF_BIN" "$T/model" "$P" <<'PY' || fail "run and serve differ"
import json, subprocess, sys, urllib.request
port, BIN, MODEL, P = sys.argv[1:]
ids = [int(x) for x in P.split(",")]
cases = [
    ({"repeat_penalty": 1.3}, ["--repeat-penalty", "1.3"]),
    ({"presence_penalty": 1.5, "frequency_penalty": 0.7},
     ["--presence-penalty", "1.5", "--frequency-penalty", "0.7"]),
    ({"temperature": 0.8, "seed": 4, "top_k": 5, "min_p": 0.05, "repeat_penalty": 1.1},
     ["--temperature", "0.8", "--seed", "4", "--top-k", "5", "--min-p", "0.05", "--repeat-penalty", "1.1"]),
]
cached = []
for body, args in cases:
    b = {"model": "k3-tiny", "prompt": ids, "max_tokens": 16, "temperature": 0}
    b.update(body)
    rq = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(b).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        d = json.load(r)
    served = d["choices"][0]["text"]
    cached.append(d["usage"]["prompt_tokens_details"]["cached_tokens"])
    out = subprocess.run([BIN, "run", "--model", MODEL, "--prompt-ids", P, "--max-new", "16",
                          "--threads", "1", "--json"] + args, check=True, capture_output=True,
                         text=True).stdout
    ran = json.loads(out)["text"]
    assert ran == served, (body, ran, served, cached)
# the later requests start from the kept state of the same prompt: the
# penalties must still see the cached prompt ids
assert cached[0] == 0 and all(c == len(ids) for c in cached[1:]), cached
PY
pass "run and /v1/completions apply the same penalties and truncation"

bad() { # expected-message args...
  want=$1
  shift
  if "$DF_BIN" run --model "$T/model" --prompt-ids $P --max-new 2 "$@" >/dev/null 2>"$T/bad.err"; then
    fail "accepted: $*"
  fi
  grep -q -- "$want" "$T/bad.err" || fail "$*: $(cat "$T/bad.err")"
}
bad "--top-k: '-1' is not an integer" --temperature 1 --top-k -1
bad "--top-k: '1.5' is not an integer" --temperature 1 --top-k 1.5
bad "--min-p: '2' is not a number" --temperature 1 --min-p 2
bad "--repeat-penalty: '0' is not a number" --repeat-penalty 0
bad "--presence-penalty: '3' is not a number" --presence-penalty 3
bad "--top-k needs --temperature" --top-k 4
bad "--min-p needs --temperature" --min-p 0.1
pass "bad sampling options refused"
