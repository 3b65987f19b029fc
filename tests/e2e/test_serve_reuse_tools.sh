#!/bin/sh
# Conversation reuse on a multi-turn chat with tools declared: a user turn,
# the assistant's tool call sent back as a client would (with tool_calls), the
# tool's result, the model's own reply sent back, another user turn. Against
# a server with reuse on and one with --reuse-mb 0, greedy:
# - every turn's reply (content, reasoning, tool calls, finish reason, token
#   count) is the same on both servers, and matches the ids of `deltafin run
#   --prompt-ids` on the prompt /apply-template gives: as many tokens, and
#   the reasoning is their text (the server gives no logprobs with tools, so
#   the ids themselves are not exposed);
# - each turn's cached_tokens is what the kept states allow, computed here
#   independently from those ids: the server keeps the state at the end of
#   every prompt (MAX_KEPT of them, well within --reuse-mb here) and the live
#   state at the end of the last reply (prompt + reply ids but the last, which
#   was drawn, not run); a prompt reuses the longest of those that is a prefix
#   of it, token for token (never a part of one: a state is not truncated);
#   each turn reuses at least the whole previous prompt (the encoder renders
#   the history so that the previous prompt is a prefix of the next one);
# - the no-reuse server reports 0 cached; /metrics' reuse counters move by
#   exactly the reported amounts.
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-reuse-tools.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny

start_reuse_pair

python3 - "$R" "$N" "$DF_BIN" "$T/model" <<'PY' || fail "conversation reuse with tools"
import json, subprocess, sys, urllib.request
R, N, BIN, MODEL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
MAXTOK = 8

def post(port, path, body):
    rq = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        return json.load(r)

def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#") and "{" not in line:
                k, v = line.split()
                out[k] = float(v)
        return out

# the chat stop id, from the release's tokenizer config (not from the server)
cfg = json.load(open(f"{MODEL}/tokenizer_config.json"))
# the specials are the 256 ids after the BPE ranks; those the config does not
# list are the release's <|reserved_token_ID|> (docs/kimi-k3.md section 6)
NRANKS = sum(1 for line in open(f"{MODEL}/tiktoken.model") if line.strip())
LISTED = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
SPECIAL = {i: LISTED.get(i, f"<|reserved_token_{i}|>") for i in range(NRANKS, NRANKS + 256)}
EOM = next(k for k, v in SPECIAL.items() if v == "<|end_of_msg|>")

def run(ids):
    """The reference reply ids: `deltafin run` on the whole prompt, greedy."""
    out = subprocess.run([BIN, "run", "--model", MODEL, "--json", "--threads", "1",
                          "--prompt-ids", ",".join(map(str, ids)), "--max-new", str(MAXTOK),
                          "--stop", str(EOM)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["output_ids"]

def is_prefix(a, b):
    return len(a) <= len(b) and b[:len(a)] == a

def common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]

def call(i, city):
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}

def reply_msg(m):
    """The reply as a client sends it back in the next request's history."""
    out = {"role": "assistant", "content": m.get("content") or ""}
    if m.get("reasoning_content") is not None:
        out["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    return out

msgs = [{"role": "system", "content": "You are a terse weather assistant."},
        {"role": "user", "content": "What is the weather in Paris?"}]
# what each later turn appends after the model's reply: the tiny random model
# does not call tools itself, so the tool calls are the client's construction
# (the reply the model gave is replaced by a tool-calling one, as a client
# replaying a tool-using agent's log would send it)
script = [
    ("replace", {"role": "assistant", "content": "", "tool_calls": [call(1, "Paris")]},
     {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18, "sky": "clear"}'}),
    ("keep", {"role": "user", "content": "And in Rome?"}),
    ("replace", {"role": "assistant", "content": "Checking.", "tool_calls": [call(2, "Rome")]},
     {"role": "tool", "tool_call_id": "call_2", "content": '{"temp_c": 24, "sky": "sunny"}'}),
    ("keep", {"role": "user", "content": "Thanks. Which is warmer?"}),
]

kept = []          # the prompt states the reuse server keeps (ids), in order
live = None        # the reuse server's live state (ids)
m0 = metrics(R)
sum_prompt = sum_cached = 0
report = []
checked_text = 0
for turn in range(len(script) + 1):
    body = {"model": "k3-tiny", "messages": msgs, "tools": TOOLS, "max_tokens": MAXTOK,
            "temperature": 0}
    P = post(R, "/apply-template", body)["tokens"]
    assert P == post(N, "/apply-template", body)["tokens"]
    ref = run(P)
    a = post(R, "/v1/chat/completions", body)
    b = post(N, "/v1/chat/completions", body)
    ca, cb = a["choices"][0], b["choices"][0]
    # the same reply with and without reuse, down to each token's logprob
    assert ca["message"] == cb["message"], (turn, ca["message"], cb["message"])
    assert ca["finish_reason"] == cb["finish_reason"], (turn, ca, cb)
    # ... and the ids of `deltafin run` on the whole prompt (the server gives
    # no logprobs with tools): as many, and the reply's text is theirs
    assert a["usage"]["completion_tokens"] == len(ref), (turn, a["usage"], ref)
    # the prompt ends inside the think channel, so a reply that emits no
    # structural special (only the random model's reserved ids, which the
    # text leaves out) is all reasoning: the text of its ordinary ids
    if all(i not in LISTED for i in ref):
        text = post(R, "/detokenize", {"tokens": [i for i in ref if i not in SPECIAL]})["content"]
        assert ca["message"]["reasoning_content"] == text, (turn, ca["message"], text, ref)
        assert not ca["message"].get("content") and not ca["message"].get("tool_calls"), ca
        checked_text += 1
    ua, ub = a["usage"], b["usage"]
    assert ua["prompt_tokens"] == ub["prompt_tokens"] == len(P), (turn, ua, ub, len(P))
    assert ub["prompt_tokens_details"]["cached_tokens"] == 0, ub
    cached = ua["prompt_tokens_details"]["cached_tokens"]
    # what the server can have kept: the longest kept state that is a prefix.
    # The live reply state is never the one here, and rightly: the reply the
    # client sends back is text, not ids. Either the history drops the
    # reasoning (a turn after a user message renders an empty think channel)
    # or it renders the reasoning text, and the random model's reply holds
    # reserved ids (left out of the text) and partial UTF-8 bytes (U+FFFD in
    # the text), so re-encoding it gives other ids right after the previous
    # prompt (or a few ids in); a reply cut by max_tokens also lacks the
    # close-think the history renders. So the prompt state of the previous
    # turn is what is reused, and only the rendered reply, the tool result and
    # the new user message are prefilled. (The live state's own reuse is
    # covered by test_serve_reuse.sh on completions.)
    states = kept + ([live] if live is not None else [])
    want = max([len(s) for s in states if is_prefix(s, P) and len(s) < len(P)], default=0)
    assert cached == want, (turn, cached, want, [len(s) for s in states])
    if turn > 0:
        # the previous prompt is a prefix of this one, so at least it is reused
        assert is_prefix(kept[-1], P), turn
        assert cached >= len(kept[-1]) and cached < len(P), (turn, cached)
    via = "live reply state" if live is not None and cached == len(live) and is_prefix(live, P) \
        else "kept prompt state" if cached else "none"
    lc = common(live, P) if live is not None else 0
    report.append(f"turn {turn + 1}: {len(P)} prompt tokens, {cached} cached ({via}), "
                  f"{len(P) - cached} prefilled; reply {len(ref)} ids, finish "
                  f"{ca['finish_reason']}; last prompt+reply shares {lc} ids with this prompt")
    sum_prompt += len(P)
    sum_cached += cached
    kept.append(P)
    live = P + ref[:-1]
    if turn < len(script):
        step = script[turn]
        msgs = msgs + ([reply_msg(ca["message"])] if step[0] == "keep" else []) + list(step[1:])

m1 = metrics(R)
n_turns = len(script) + 1
assert m1["deltafin_requests_total"] - m0["deltafin_requests_total"] == n_turns, (m0, m1)
assert m1["deltafin_prompt_tokens_total"] - m0["deltafin_prompt_tokens_total"] == sum_prompt
assert m1["deltafin_prompt_tokens_cached_total"] - m0["deltafin_prompt_tokens_cached_total"] == sum_cached
assert sum_cached > 0
assert checked_text > 0  # seed 1's tiny model: every reply here is plain reasoning
assert m1["deltafin_reuse_kept_states"] == n_turns and m1["deltafin_reuse_kept_bytes"] > 0, m1
mn = metrics(N)
assert mn["deltafin_prompt_tokens_cached_total"] == 0 and mn["deltafin_reuse_kept_states"] == 0, mn
print("\n".join(report))
print(f"total: {sum_prompt} prompt tokens, {sum_cached} cached")
PY
pass "conversation reuse with tools: same replies with and without reuse, cached = the longest kept prefix"
echo "PASS: deltafin serve conversation reuse with tools"
