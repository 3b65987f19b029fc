#!/bin/sh
# make-model --spine int8: the int8 spine written straight from the generator
# is byte for byte what convert-spine makes of the same preset and seed written
# normally (whatever the thread count), a run of it gives the same ids, the
# bf16 spine's ranges are holes that nothing reads: a run without --spine
# int8, convert-spine and pack --spine bf16 refuse it by name.
set -eu
BIN=${DF_BIN:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ids() { m=$1; shift; "$BIN" run --model "$m" --spine int8 --prompt-ids 1,2,3,4,5 --max-new 16 --json "$@" 2>/dev/null |
  sed -n 's/.*"output_ids": *\[\([^]]*\)\].*/\1/p' | tr -d ' \n'; }

"$BIN" make-model --preset tiny --seed 5 --out "$tmp/a" -q
"$BIN" convert-spine --model "$tmp/a" -q
"$BIN" make-model --preset tiny --seed 5 --out "$tmp/b" --spine int8 --threads 1 -q
"$BIN" make-model --preset tiny --seed 5 --out "$tmp/c" --spine int8 --threads 3 -q

# the int8 copy: every file identical to convert-spine's, index included
n=0
for f in "$tmp"/a/spine-int8/*; do
  b=$(basename "$f")
  cmp -s "$f" "$tmp/b/spine-int8/$b" || fail "direct int8 $b differs from convert-spine's"
  cmp -s "$f" "$tmp/c/spine-int8/$b" || fail "int8 $b depends on --threads"
  n=$((n + 1))
done
[ "$n" -ge 2 ] || fail "convert-spine wrote $n files"
[ "$(ls "$tmp/b/spine-int8" | wc -l)" = "$n" ] || fail "make-model wrote other int8 files than convert-spine"
echo "ok   int8 spine byte-identical to convert-spine ($n files), any thread count"

# the shards: same names and sizes (the same headers), the spine ranges as holes
for f in "$tmp"/a/model-*.safetensors; do
  b=$(basename "$f")
  [ "$(wc -c <"$f")" = "$(wc -c <"$tmp/b/$b")" ] || fail "$b: size differs"
  cmp -s "$tmp/b/$b" "$tmp/c/$b" || fail "shard $b depends on --threads"
done
for f in config.json generation_config.json tiktoken.model tokenizer_config.json; do
  cmp -s "$tmp/a/$f" "$tmp/b/$f" || fail "$f differs"
done
grep -q '"deltafin_bf16_spine": "holes"' "$tmp/b/model.safetensors.index.json" ||
  fail "the index does not mark the holes"
# holes take no blocks (every file system the tests run on has sparse files)
da=$(du -k -c "$tmp"/a/model-*.safetensors | tail -1 | cut -f1)
db=$(du -k -c "$tmp"/b/model-*.safetensors | tail -1 | cut -f1)
[ "$db" -lt "$da" ] || fail "shards with holes take $db KB, the full ones $da KB"
echo "ok   shards: same sizes and small files, spine as holes ($db KB on disk vs $da KB)"

# every tensor the run reads from the shards (routers, norms, experts) is real
ia=$(ids "$tmp/a")
ib=$(ids "$tmp/b")
[ -n "$ia" ] || fail "no ids from the convert-spine model"
[ "$ia" = "$ib" ] || fail "ids differ: convert-spine [$ia] vs direct [$ib]"
echo "ok   same ids: [$ia]"

# the holes are never read as weights
expect_refusal() {
  what=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$what accepted a model without its bf16 spine"; fi
  grep -q "holes" "$tmp/err" || fail "$what: no clear reason: $(cat "$tmp/err")"
  grep -q -- "--spine int8" "$tmp/err" || fail "$what: does not say how to run it: $(cat "$tmp/err")"
}
expect_refusal "run (bf16)" "$BIN" run --model "$tmp/b" --prompt-ids 1,2,3 --max-new 2
expect_refusal "run --spine bf16" "$BIN" run --model "$tmp/b" --spine bf16 --prompt-ids 1 --max-new 1
expect_refusal "convert-spine" "$BIN" convert-spine --model "$tmp/b" --out "$tmp/b8" -q
mkdir "$tmp/drive"
expect_refusal "pack --spine bf16" "$BIN" pack --model "$tmp/b" --drives "$tmp/drive" --spine bf16 -q
[ ! -e "$tmp/b8/model.safetensors.index.json" ] || fail "convert-spine wrote an index from holes"
echo "ok   run without --spine int8, convert-spine and pack --spine bf16 refuse it"

# --spine-dir: the copy elsewhere, named in the refusal; an existing copy needs --force
"$BIN" make-model --preset tiny --seed 5 --out "$tmp/d" --spine int8 --spine-dir "$tmp/d8" -q
[ ! -e "$tmp/d/spine-int8" ] || fail "--spine-dir also wrote DIR/spine-int8"
for f in "$tmp"/a/spine-int8/*; do
  cmp -s "$f" "$tmp/d8/$(basename "$f")" || fail "--spine-dir copy differs: $(basename "$f")"
done
[ "$(ids "$tmp/d" --spine-dir "$tmp/d8")" = "$ia" ] || fail "--spine-dir run gives other ids"
expect_refusal "run (bf16, --spine-dir model)" "$BIN" run --model "$tmp/d" --prompt-ids 1 --max-new 1
grep -q -- "--spine-dir $tmp/d8" "$tmp/err" || fail "refusal does not name the int8 dir: $(cat "$tmp/err")"
if "$BIN" make-model --preset tiny --seed 6 --out "$tmp/e" --spine int8 --spine-dir "$tmp/d8" -q 2>"$tmp/err"; then
  fail "replaced an int8 spine without --force"
fi
grep -q "int8 spine" "$tmp/err" || fail "no reason given: $(cat "$tmp/err")"
[ ! -e "$tmp/e" ] || fail "the refusal left $tmp/e behind"
if "$BIN" make-model --preset tiny --out "$tmp/f" --spine-dir "$tmp/f8" -q 2>/dev/null; then
  fail "--spine-dir without --spine int8 accepted"
fi
echo "ok   --spine-dir"

# replacing a model drops its int8 copy's index: a stale copy is never loaded
"$BIN" make-model --preset tiny --seed 6 --out "$tmp/a" --force -q
if "$BIN" run --model "$tmp/a" --spine int8 --prompt-ids 1 --max-new 1 2>"$tmp/err" >/dev/null; then
  fail "a replaced model ran with the previous model's int8 spine"
fi
grep -q "convert-spine" "$tmp/err" || fail "no hint to convert again: $(cat "$tmp/err")"
echo "ok   --force invalidates the old int8 copy"

"$BIN" make-model --preset k3-trunk --layers 93 --spine int8 --dry-run >"$tmp/dry"
grep -q "93 layers.*int8 spine 56\.[0-9]* GB" "$tmp/dry" || fail "dry run: $(cat "$tmp/dry")"
echo "make-model --spine int8: ok"
