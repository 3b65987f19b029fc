#!/bin/sh
# deltafin setup --draft dspark against the loopback hub: a DSpark checkpoint
# (the published layout, generated for nano-K3) installs byte-identical and
# verified into MODEL/dspark beside the K3 in --model-root, is checked
# against that K3, and `run --draft auto` then drafts with it and gives the
# ids of --draft off; a DSpark made for another K3 is refused after the
# download naming the key; a --model-root without a K3 is refused first.
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin setup_dspark

NANO="$DF_SRC/models/nano-k3"
"$BIN" make-model --preset dspark --target "$NANO" --seed 2 --out "$T/dsrc" -q || fail "make-model dspark"
cp -r "$T/dsrc" "$T/dorig"
# an installed K3 to put it beside (links to nano-K3's files)
mkdir "$T/k3"
for f in "$NANO"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/k3/"; done

start_hub "$T/dsrc" test-org/nano-dspark 5e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f
EP="http://127.0.0.1:$HUB_PORT"
"$BIN" setup --draft dspark --repo test-org/nano-dspark --revision 5e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f \
  --endpoint "$EP" --model-root "$T/k3" >"$T/o" 2>"$T/e" || { cat "$T/e"; fail "setup --draft dspark"; }
for f in "$T"/dorig/*; do
  cmp -s "$f" "$T/k3/dspark/$(basename "$f")" || fail "$(basename "$f") differs from the published file"
done
grep -q "draft ready: $T/k3/dspark" "$T/e" || { cat "$T/e"; fail "no 'draft ready' line"; }

# a chat prompt: --draft auto drafts with the DSpark for chat (n-gram for raw text)
P="A list is a sequence of items. A list can hold other lists. A list"
run_ids() { "$BIN" run --model "$T/k3" --chat --prompt "$P" --max-new 24 --json --heat "" "$@" >"$T/r.json" &&
  ids "$T/r.json"; }
base=$(run_ids --draft off) || fail "run without a draft"
got=$(run_ids --draft auto --draft-max 7) || fail "run --draft auto with the installed DSpark"
[ "$got" = "$base" ] || fail "ids with the installed DSpark $got differ from $base"
blocks=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]["speculation"]; print(sum(s["block_lengths"]) if s["confidence_mean"] and s["confidence_mean"][0] is not None else 0)' "$T/r.json")
[ "$blocks" -gt 0 ] || fail "--draft auto did not draft with the installed DSpark"
got=$(run_ids --draft "dspark:$T/k3/dspark" --draft-max 7) || fail "run --draft dspark:DIR"
[ "$got" = "$base" ] || fail "ids with --draft dspark:DIR differ"
stop_hub

# a DSpark for another K3 (the tiny preset's dims): installed, then refused by key
"$BIN" make-model --preset tiny --seed 3 --out "$T/tiny" -q >/dev/null 2>&1
"$BIN" make-model --preset dspark --target "$T/tiny" --out "$T/tds" -q || fail "make-model dspark tiny"
start_hub "$T/tds" test-org/tiny-dspark 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567
EP="http://127.0.0.1:$HUB_PORT"
mkdir "$T/k3b"
for f in "$NANO"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/k3b/"; done
if "$BIN" setup --draft dspark --repo test-org/tiny-dspark --endpoint "$EP" --model-root "$T/k3b" \
  >"$T/o" 2>"$T/e"; then fail "a DSpark for another K3 installed"; fi
grep -q "not a DSpark draft for this K3.*'hidden_size' = 64 does not match the target model's 256" "$T/e" ||
  { cat "$T/e"; fail "no reason given"; }
mkdir "$T/empty"
if "$BIN" setup --draft dspark --repo test-org/tiny-dspark --endpoint "$EP" --model-root "$T/empty" \
  >"$T/o" 2>"$T/e"; then fail "a --model-root without K3 accepted"; fi
grep -q "must hold the installed K3" "$T/e" || { cat "$T/e"; fail "no K3: no reason given"; }
[ ! -e "$T/empty/dspark" ] || fail "downloaded before checking --model-root"
echo "test_setup_dspark: ok (installed beside nano-K3, $blocks blocks drafted by --draft auto)"
