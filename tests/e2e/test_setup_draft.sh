#!/bin/sh
# deltafin setup --draft qwen3 against the loopback hub: nano-draft (a Qwen3
# checkpoint as Hugging Face publishes one) installs byte-identical and
# verified, and `run --draft DIR` with it gives the ids of --draft off while
# accepting drafts; a repository that is not a Qwen3 is refused after the
# download, naming why; K3-only options are refused.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin setup_draft

cp -r "$DF_SRC/models/nano-draft" "$T/qsrc"
start_hub "$T/qsrc" test-org/nano-draft 7a1c0e5d9b3f2a4c6e8d0b1f3a5c7e9d2b4f6a8c
EP="http://127.0.0.1:$HUB_PORT"
"$BIN" setup --draft qwen3 --repo test-org/nano-draft --endpoint "$EP" --model-root "$T/d" \
  >"$T/o" 2>"$T/e" || { cat "$T/e"; fail "setup --draft"; }
for f in "$T"/qsrc/*; do
  cmp -s "$f" "$T/d/$(basename "$f")" || fail "$(basename "$f") differs from the published file"
done
grep -q "draft ready: $T/d (vocabulary 3072)" "$T/e" || { cat "$T/e"; fail "no 'draft ready' line"; }

NANO="$DF_SRC/models/nano-k3"
P="A list is a sequence of items. A list can hold other lists. A list"
run_ids() { "$BIN" run --model "$NANO" --prompt "$P" --max-new 32 --json --heat "" "$@" >"$T/r.json" &&
  ids "$T/r.json"; }
base=$(run_ids --draft off) || fail "run without a draft"
got=$(run_ids --draft "$T/d") || fail "run with the installed draft"
[ "$got" = "$base" ] || fail "ids with the installed draft $got differ from $base"
acc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"]["speculation"]["accepted"])' "$T/r.json")
[ "$acc" -gt 0 ] || fail "the installed draft had no draft accepted"
stop_hub

# a K3 repository is not a draft: installed, then refused by name
hub_tiny 3 0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d
if "$BIN" setup --draft qwen3 --repo "$REPO" --endpoint "$EP" --model-root "$T/k" >"$T/o" 2>"$T/e"; then
  fail "a K3 repository installed as a draft"
fi
grep -q "not a Qwen3 draft deltafin can run" "$T/e" || { cat "$T/e"; fail "no reason given"; }
for bad in "--draft llama" "--draft qwen3 --drives $T/x" "--draft qwen3 --spine int8"; do
  # shellcheck disable=SC2086
  if "$BIN" setup $bad --repo "$REPO" --endpoint "$EP" --model-root "$T/z" >"$T/o" 2>"$T/e"; then
    fail "setup $bad accepted"
  fi
  grep -q "draft" "$T/e" || { cat "$T/e"; fail "setup $bad: the error does not say why"; }
done
echo "test_setup_draft: ok (nano-draft installed, $acc drafts accepted)"
