#!/bin/sh
# deltafin pack / doctor from the command line: a pack verifies clean; a
# corrupt byte, a missing drive and a truncated pack file are each reported;
# a pack killed with SIGKILL at several points and resumed gives pack files
# byte-identical to an uninterrupted pack, and no manifest exists until the
# pack is complete.
set -eu
BIN=${DF_BIN:-build/deltafin}
T=$(mktemp -d /tmp/df_e2e_pack.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" make-model --preset tiny --seed 11 --out "$T/m" -q >/dev/null 2>&1
cp -r "$T/m" "$T/m2"

# --- a clean pack on two drives, 50% hot replicas ---
"$BIN" pack --model "$T/m" --drives "$T/a0,$T/a1" --replicas-hot 50 -q
[ -f "$T/m/deltafin-pack.json" ] || fail "no manifest recorded in the model folder"
[ ! -f "$T/m/deltafin-pack.json.plan" ] || fail "plan left behind after a complete pack"
"$BIN" doctor --model "$T/m" -q >"$T/doc0" || fail "doctor on a fresh pack: $(cat "$T/doc0")"
grep -q "all good" "$T/doc0" || fail "doctor summary: $(cat "$T/doc0")"

# bad usage is refused with a message naming the option
if "$BIN" pack --model "$T/m" --drives "$T/x0" --replicas-hot 10 2>"$T/err"; then fail "replicas on one drive accepted"; fi
grep -q "two drives" "$T/err" || fail "replicas error: $(cat "$T/err")"
if "$BIN" pack --model "$T/m" --drives "$T/x0@fast" 2>"$T/err"; then fail "bad bandwidth accepted"; fi
grep -q "bandwidth" "$T/err" || fail "bandwidth error: $(cat "$T/err")"

# --- one corrupt byte in a replicated copy ---
python3 - "$T/m/deltafin-pack.json" >"$T/where" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for layer, expert, copies in m["records"]:
    if len(copies) == 2:
        d, off, _ = copies[0]
        dr = m["drives"][d]
        print(dr["path"] + "/" + dr["file"], off + 100, layer, expert)
        break
EOF
read -r FILE OFF LAYER EXPERT <"$T/where"
python3 -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))
" "$FILE" "$OFF"
rc=0; "$BIN" doctor --model "$T/m" -q >"$T/doc1" || rc=$?
[ "$rc" = 1 ] || fail "doctor exit $rc on a corrupt replicated copy (want 1): $(cat "$T/doc1")"
grep -q "CORRUPT layer $LAYER expert $EXPERT copy 0" "$T/doc1" || fail "corrupt copy not named: $(cat "$T/doc1")"
grep -q "every expert still has a good copy" "$T/doc1" || fail "summary: $(cat "$T/doc1")"

# --- a missing drive: unreplicated experts are lost ---
mv "$T/a1" "$T/a1.gone"
rc=0; "$BIN" doctor --model "$T/m" -q >"$T/doc2" || rc=$?
[ "$rc" = 2 ] || fail "doctor exit $rc with a drive missing (want 2): $(cat "$T/doc2")"
grep -q "MISSING drive 1" "$T/doc2" || fail "missing drive not named: $(cat "$T/doc2")"
grep -q "LOST layer" "$T/doc2" || fail "lost experts not named: $(cat "$T/doc2")"
mv "$T/a1.gone" "$T/a1"

# --- a truncated pack file ---
SIZE=$(stat -c %s "$T/a1/m.dfpack")
truncate -s $((SIZE - 8192)) "$T/a1/m.dfpack"
rc=0; "$BIN" doctor --model "$T/m" -q >"$T/doc3" || rc=$?
[ "$rc" != 0 ] || fail "doctor passed a truncated pack file"
grep -q "TRUNCATED drive 1" "$T/doc3" || fail "truncation not reported: $(cat "$T/doc3")"

# --- kill -9 during pack, resume, compare with an uninterrupted pack ---
"$BIN" pack --model "$T/m2" --drives "$T/ref0,$T/ref1,$T/ref2" --replicas-hot 25 \
  --manifest "$T/ref.json" -q
for delay in 0.3 0.9 1.5; do
  "$BIN" pack --model "$T/m2" --drives "$T/k0,$T/k1,$T/k2" --replicas-hot 25 --max-rate 150KB/s -q &
  PID=$!
  sleep "$delay"
  kill -9 "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  [ ! -f "$T/m2/deltafin-pack.json" ] || {
    # the pack finished before the kill: nothing left to resume
    break
  }
  [ -f "$T/m2/deltafin-pack.json.plan" ] || fail "no plan after a killed pack"
done
[ ! -f "$T/m2/deltafin-pack.json" ] || fail "pack finished before any kill; raise the rate limit test"
"$BIN" pack --model "$T/m2" --drives "$T/k0,$T/k1,$T/k2" --replicas-hot 25 >"$T/resume" 2>&1 ||
  fail "resumed pack: $(cat "$T/resume")"
grep -q "resuming" "$T/resume" || fail "the second run did not resume: $(cat "$T/resume")"
grep -q "already written" "$T/resume" || fail "the resumed run rewrote everything: $(cat "$T/resume")"
"$BIN" doctor --model "$T/m2" -q >"$T/doc4" || fail "doctor after resume: $(cat "$T/doc4")"
for i in 0 1 2; do
  cmp -s "$T/k$i/m2.dfpack" "$T/ref$i/m2.dfpack" || fail "drive $i: resumed pack differs from an uninterrupted one"
  [ ! -f "$T/k$i/m2.dfpack.journal" ] || fail "journal left behind on drive $i"
done
python3 - "$T/m2/deltafin-pack.json" "$T/ref.json" <<'EOF' || fail "manifests differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["records"] == b["records"], "records differ"
EOF
echo "pack e2e: ok"
