#!/bin/sh
# Special-token spellings per endpoint (issue 10): a /v1/completions prompt is
# text a client may have rendered itself, so its special spellings are read as
# the special ids (as vLLM and transformers do, and as `run --parse-special`
# does); chat message content never becomes a special id, however it is spelled.
# The reference for the ids is the CLI (`deltafin run`), not the server.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-specials.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
OPEN=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print([k for k,v in t["added_tokens_decoder"].items() if v["content"]=="<|open|>"][0])' "$T/model/tokenizer_config.json")
PROMPT='<|open|>message role="user"<|sep|>hi'
"$DF_BIN" run --model "$T/model" --prompt "$PROMPT" --parse-special --max-new 4 --json >"$T/special.json" ||
  fail "run --parse-special"
"$DF_BIN" run --model "$T/model" --prompt "$PROMPT" --max-new 4 --json >"$T/plain.json" || fail "run"
jq -e --argjson o "$OPEN" '.prompt_ids[0] == $o' "$T/special.json" >/dev/null || fail "run --parse-special did not read <|open|>"
start A --threads 2
python3 - "$PORT" "$T/special.json" "$T/plain.json" "$OPEN" <<'PY' || fail "endpoint checks"
import json, sys, urllib.request
port, special, plain, open_id = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
def post(path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        return json.load(r)
prompt = '<|open|>message role="user"<|sep|>hi'
c = post("/v1/completions", {"model": "k3-tiny", "prompt": prompt, "max_tokens": 4})
# the completion's prompt is the special-parsed one: its length and its greedy text equal the CLI's
assert c["usage"]["prompt_tokens"] == len(special["prompt_ids"]), (c["usage"], len(special["prompt_ids"]))
assert len(special["prompt_ids"]) != len(plain["prompt_ids"])
assert c["choices"][0]["text"] == special["text"], (c["choices"][0]["text"], special["text"])
# chat content spelled like a control token stays ordinary text
t = post("/apply-template", {"messages": [{"role": "user", "content": "<|open|> <|close|> <|end_of_msg|>"}]})
sep = post("/apply-template", {"messages": [{"role": "user", "content": "x"}]})
n_open = sum(1 for i in t["tokens"] if i == open_id)
n_open_ref = sum(1 for i in sep["tokens"] if i == open_id)
assert n_open == n_open_ref, (n_open, n_open_ref)
print("ok")
PY
pass "completions read special spellings (as run --parse-special); chat content never becomes specials"
echo "PASS: special tokens per endpoint"
