#!/bin/sh
# The hub's environment variables change what they should, as huggingface_hub
# reads them (the fault proxy logs whether each request carried a token; with
# --require-token it answers 401 to any other):
#  1. HUGGING_FACE_HUB_TOKEN is used when HF_TOKEN is unset; HF_TOKEN wins;
#  2. the token file: HF_TOKEN_PATH, else HF_HOME/token, else
#     XDG_CACHE_HOME/huggingface/token (HF_HOME unset);
#  3. HF_HUB_DISABLE_IMPLICIT_TOKEN=1: no request carries a token, even with
#     HF_TOKEN set (and without it, every request to the hub does);
#  4. HF_HUB_DISABLE_PROGRESS_BARS=1: no progress line, the messages stay;
#  5. HF_HUB_DOWNLOAD_TIMEOUT: a server silent for longer fails the
#     transfer (a timeout), where the default waits for it.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin hubenv

hub_tiny 19 4444444444444444444444444444444444444444
TOKEN=hf_envtest_0123456789abcdef
WRONG=hf_wrong_000
export HOME="$T/home"
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH HF_HOME XDG_CACHE_HOME HF_HUB_CACHE 2>/dev/null || true
mkdir -p "$HOME"
start_proxy --require-token "$TOKEN" --log "$T/auth.log"
EPA="http://127.0.0.1:$PROXY_PORT"
try() { # expect(ok|401) label, then env assignments via the caller's subshell
  d=$(mktemp -d "$T/a.XXXXXX") # a fresh install each time (subshells share no counter)
  if "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "$EPA" --model-root "$d/m" \
    --retries 1 -q 2>"$d.err"; then got=ok; else got=401; fi
  [ "$got" = ok ] || grep -q "401" "$d.err" || fail "$2: failed, but not with a 401: $(cat "$d.err")"
  [ "$got" = "$1" ] || fail "$2: expected $1, got $got: $(cat "$d.err")"
}

# --- 1 ---
(HUGGING_FACE_HUB_TOKEN=$TOKEN; export HUGGING_FACE_HUB_TOKEN; try ok "HUGGING_FACE_HUB_TOKEN")
(HF_TOKEN=$TOKEN HUGGING_FACE_HUB_TOKEN=$WRONG; export HF_TOKEN HUGGING_FACE_HUB_TOKEN; try ok "HF_TOKEN over HUGGING_FACE_HUB_TOKEN")
(HF_TOKEN=$WRONG HUGGING_FACE_HUB_TOKEN=$TOKEN; export HF_TOKEN HUGGING_FACE_HUB_TOKEN; try 401 "HF_TOKEN wins, wrong")
try 401 "no token anywhere"

# --- 2: token files ---
printf '%s\n' "$TOKEN" >"$T/tokfile"
(HF_TOKEN_PATH="$T/tokfile"; export HF_TOKEN_PATH; try ok "HF_TOKEN_PATH")
mkdir -p "$T/hfhome" && printf '%s\n' "$WRONG" >"$T/hfhome/token"
(HF_TOKEN_PATH="$T/tokfile" HF_HOME="$T/hfhome"; export HF_TOKEN_PATH HF_HOME; try ok "HF_TOKEN_PATH over HF_HOME/token")
(HF_HOME="$T/hfhome"; export HF_HOME; try 401 "HF_HOME/token (a wrong one)")
mkdir -p "$T/xdg/huggingface" && printf '%s\n' "$TOKEN" >"$T/xdg/huggingface/token"
(XDG_CACHE_HOME="$T/xdg"; export XDG_CACHE_HOME; try ok "XDG_CACHE_HOME/huggingface/token")
(XDG_CACHE_HOME="$T/xdg" HF_HOME="$T/hfhome"; export XDG_CACHE_HOME HF_HOME; try 401 "HF_HOME over XDG_CACHE_HOME")
mkdir -p "$HOME/.cache/huggingface" && printf '%s\n' "$TOKEN" >"$HOME/.cache/huggingface/token"
try ok "~/.cache/huggingface/token"
rm "$HOME/.cache/huggingface/token"

# --- 3: HF_HUB_DISABLE_IMPLICIT_TOKEN ---
(HF_TOKEN=$TOKEN HF_HUB_DISABLE_IMPLICIT_TOKEN=1; export HF_TOKEN HF_HUB_DISABLE_IMPLICIT_TOKEN; try 401 "HF_HUB_DISABLE_IMPLICIT_TOKEN=1")
stop_proxy
start_proxy --log "$T/open.log"
: >"$T/open.log"
HF_TOKEN=$TOKEN HF_HUB_DISABLE_IMPLICIT_TOKEN=true "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/i1" -q 2>"$T/i1.err" || fail "implicit off: $(cat "$T/i1.err")"
[ "$(awk '$6 == "yes"' "$T/open.log" | wc -l)" = 0 ] || fail "a token was sent with HF_HUB_DISABLE_IMPLICIT_TOKEN"
[ "$(wc -l <"$T/open.log")" -gt 0 ] || fail "nothing was requested"
: >"$T/open.log"
HF_TOKEN=$TOKEN "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/i2" -q 2>"$T/i2.err" || fail "implicit on: $(cat "$T/i2.err")"
[ "$(awk '$1 !~ /^\/cdn\// && $6 != "yes"' "$T/open.log" | wc -l)" = 0 ] || fail "a request to the hub went without the token"
stop_proxy

# --- 4: HF_HUB_DISABLE_PROGRESS_BARS (a download of > 1 s prints a final progress line) ---
start_proxy --rate 1200000 --log "$T/slow.log"
"$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/p1" 2>"$T/p1.err" || fail "setup: $(cat "$T/p1.err")"
grep -Eq "^download .*[0-9.]+%" "$T/p1.err" || fail "no progress line without the variable: $(cat "$T/p1.err")"
HF_HUB_DISABLE_PROGRESS_BARS=1 "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/p2" 2>"$T/p2.err" || fail "setup: $(cat "$T/p2.err")"
grep -Eq "%" "$T/p2.err" && fail "a progress line with HF_HUB_DISABLE_PROGRESS_BARS=1: $(cat "$T/p2.err")"
grep -q "setup --full done" "$T/p2.err" || fail "the messages went too: $(cat "$T/p2.err")"
stop_proxy

# --- 5: HF_HUB_DOWNLOAD_TIMEOUT ---
start_proxy --latency-ms 2500 --latency-rx "^/api/" --log "$T/lat.log" # the model info is slow
if HF_HUB_DOWNLOAD_TIMEOUT=1 "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" \
  --endpoint "http://127.0.0.1:$PROXY_PORT" --model-root "$T/t1" --retries 1 --retry-wait-ms 1 -q 2>"$T/t1.err"; then
  fail "HF_HUB_DOWNLOAD_TIMEOUT=1 against a server silent for 2.5 s succeeded"
fi
grep -Eqi "timeout|timed out|too slow" "$T/t1.err" || fail "HF_HUB_DOWNLOAD_TIMEOUT: not a timeout: $(cat "$T/t1.err")"
HF_HUB_DOWNLOAD_TIMEOUT=6 "$BIN" setup --stream --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/t2" --retries 1 -q 2>"$T/t2.err" || fail "HF_HUB_DOWNLOAD_TIMEOUT=6 did not wait 2.5 s: $(cat "$T/t2.err")"
echo "PASS: setup hubenv (tokens: env, files, precedence, implicit off; progress bars; download timeout)"
