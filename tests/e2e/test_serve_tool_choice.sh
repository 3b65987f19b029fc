#!/bin/sh
# tool_choice enforced while decoding, with a tiny random model that would
# never call a tool on its own: a named function is always called (once,
# with arguments that follow its parameters schema), "required" always
# calls offered tools with valid arguments, parallel_tool_calls false stops
# after the first call, and the stream carries the same calls as the whole
# reply. Sampled at temperature 1 over several seeds; the arguments are
# checked against each tool's schema by hand (enums and booleans).
set -eu
: "${DF_BIN:?DF_BIN must name the deltafin binary}"
: "${DF_SRC:?DF_SRC must name the source root}"
T=$(mktemp -d /tmp/df-e2e-serve-toolchoice.XXXXXX)
. "$DF_SRC/tests/e2e/serve_lib.sh"
make_tiny
start S --threads 2

python3 - "$PORT" <<'PY' || fail "tool choice checks"
import json, sys, urllib.request, urllib.error
port = sys.argv[1]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "unit": {"enum": ["c", "f"]}, "hourly": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "kind": {"enum": ["web", "news", "images"]}}}}},
]
SCHEMA = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in TOOLS}

def post(body, stream=False):
    body = {"model": "k3-tiny", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": TOOLS, "max_tokens": 400, "temperature": 1,
            "chat_template_kwargs": {"thinking": False}, **body}
    if stream:
        body["stream"] = True
    rq = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=120) as r:
            raw = r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
    if not stream:
        return 200, json.loads(raw)
    calls, fin = {}, None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"]
        if not ch:
            continue
        fin = ch[0]["finish_reason"] or fin
        for tc in ch[0]["delta"].get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            c["name"] += tc.get("function", {}).get("name") or ""
            c["arguments"] += tc.get("function", {}).get("arguments") or ""
    return 200, {"choices": [{"finish_reason": fin, "message": {"tool_calls": [
        {"function": calls[k]} for k in sorted(calls)]}}]}

def calls_of(d):
    c = d["choices"][0]
    tc = c["message"].get("tool_calls") or []
    return c["finish_reason"], [(t["function"]["name"], t["function"]["arguments"]) for t in tc]

def valid(name, args):
    """the arguments follow the tool's schema: the properties in order, values in range"""
    v = json.loads(args)
    props = SCHEMA[name]
    if list(v) != list(props):
        return False
    for k, s in props.items():
        if "enum" in s and v[k] not in s["enum"]:
            return False
        if s.get("type") == "boolean" and not isinstance(v[k], bool):
            return False
    return True

seeds = range(1, 7)
# ---- a named function: called once, arguments valid, whole and streamed alike
for name in ("search", "get_weather"):
    for seed in seeds:
        s, d = post({"tool_choice": {"type": "function", "function": {"name": name}}, "seed": seed})
        assert s == 200, d
        fin, calls = calls_of(d)
        assert fin == "tool_calls" and len(calls) == 1 and calls[0][0] == name, (name, seed, d)
        assert valid(*calls[0]), (name, seed, calls)
        s, ds = post({"tool_choice": {"type": "function", "function": {"name": name}}, "seed": seed}, True)
        assert calls_of(ds) == (fin, calls), (name, seed, calls_of(ds), calls)
print("ok - a named tool_choice always calls that function once with valid arguments")

# ---- required: at least one call, every call valid; parallel_tool_calls false: exactly one
multi = 0
for seed in seeds:
    s, d = post({"tool_choice": "required", "seed": seed})
    fin, calls = calls_of(d)
    assert s == 200 and fin == "tool_calls" and len(calls) >= 1, (seed, d)
    assert all(valid(n, a) for n, a in calls), (seed, calls)
    multi += len(calls) > 1
    s, d = post({"tool_choice": "required", "parallel_tool_calls": False, "seed": seed})
    fin, calls = calls_of(d)
    assert s == 200 and fin == "tool_calls" and len(calls) == 1 and valid(*calls[0]), (seed, d)
# the control: without parallel_tool_calls false this model does make several calls
assert multi > 0, "no reply with several calls: the parallel_tool_calls check proves nothing"
print("ok - required always calls offered tools with valid arguments; parallel_tool_calls false makes one")

# ---- refusals name the field
s, d = post({"tool_choice": {"type": "function", "function": {"name": "nope"}}})
assert s == 400 and d["error"]["param"] == "tool_choice.function.name", d
s, d = post({"tool_choice": {"type": "function"}})
assert s == 400 and d["error"]["param"] == "tool_choice.function.name", d
s, d = post({"tool_choice": "sometimes"})
assert s == 400 and d["error"]["param"] == "tool_choice", d
s, d = post({"tool_choice": "required", "tools": [{"type": "function", "function": {
    "name": "f", "parameters": {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}}}}]})
assert s == 400 and d["error"]["param"] == "tools[0].function.parameters" and "oneOf" in d["error"]["message"], d
s, d = post({"tool_choice": "required", "tools": []})
assert s == 400 and d["error"]["param"] == "tool_choice", d
s, d = post({"parallel_tool_calls": "no"})
assert s == 400 and d["error"]["param"] == "parallel_tool_calls", d
print("ok - unknown functions, bad tool_choice values and unenforceable parameters get 400")
PY
pass "tool_choice named / required and parallel_tool_calls false are enforced"
echo "PASS: deltafin serve tool choice"
