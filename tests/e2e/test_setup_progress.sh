#!/bin/sh
# setup's progress tells the truth:
#  1. a download that fails ends its progress at the real figure, marked
#     failed, never at 100%;
#  2. on a terminal (a pty from script(1)), the screen it leaves, replayed
#     through a small terminal model (\r, \n, ESC[K, overwrite), has no line
#     with the remains of an older, longer one; every file gets its own
#     line, and the total's bar ends the download;
#  3. sizes print in units that fit them (a 2 MB model is not "0.00 GB").
set -eu
DF_SRC=${DF_SRC:-.}
. "$DF_SRC/tests/setup/hubenv.sh"
hub_test_begin progress

hub_tiny 23 5555555555555555555555555555555555555555

# --- 1: failure: the real figure ---
start_proxy --rate 400000 --limit-after 12 --limit-s 600 --log "$T/p1.log"
if "$BIN" setup --full --repo "$REPO" --revision "$COMMIT" --endpoint "http://127.0.0.1:$PROXY_PORT" \
  --model-root "$T/r1" --chunk-kb 64 --connections 2 --max-wait 1s 2>"$T/r1.err"; then
  fail "setup succeeded through a 600 s rate limit with --max-wait 1s"
fi
stop_proxy
LAST=$(grep -E "^download .*%" "$T/r1.err" | tail -1)
[ -n "$LAST" ] || fail "no progress line: $(cat "$T/r1.err")"
case "$LAST" in *"(failed)"*) ;; *) fail "the last progress line does not say it failed: $LAST" ;; esac
case "$LAST" in *"100.0%"*) fail "a failed download ends at 100%: $LAST" ;; esac
python3 - "$LAST" <<'EOF' || fail "the failed line's figure is not the bytes downloaded: $LAST"
import re, sys
m = re.match(r"download ([0-9.]+)/([0-9.]+) MB \(failed\): ([0-9.]+)%", sys.argv[1])
got, total, pct = map(float, m.groups())
assert 0 < got < total and abs(pct / 100 * total - got) <= 0.06, (got, total, pct)  # MB shown to 0.1
EOF

# --- 2: a terminal ---
start_proxy --rate 1500000 --log "$T/p2.log"
script -qec "'$BIN' setup --full --repo '$REPO' --revision '$COMMIT' --endpoint 'http://127.0.0.1:$PROXY_PORT' --model-root '$T/r2' --chunk-kb 64 --connections 2" \
  "$T/typescript" >"$T/tty.out" 2>&1 || fail "setup on a pty: $(cat "$T/tty.out")"
stop_proxy
python3 - "$T/tty.out" "$T/src" <<'EOF' || fail "the terminal's screen is wrong (above)"
import os, re, sys
data = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
# a terminal: \r to column 0, \n to a new line, ESC[K clears to the end of the line
lines, col = [""], 0
i = 0
while i < len(data):
    c = data[i]
    if data.startswith("\x1b[K", i):
        lines[-1] = lines[-1][:col]
        i += 3
        continue
    if c == "\r":
        col = 0
    elif c == "\n":
        lines.append("")
        col = 0
    else:
        cur = lines[-1]
        cur = cur.ljust(col)
        lines[-1] = cur[:col] + c + cur[col + 1:]
        col += 1
    i += 1
screen = [l for l in lines if l.strip()]
bad = []
for l in screen:
    if l.startswith("deltafin: "):
        if "[#" in l or "[." in l:
            bad.append(("a message mixed with a bar", l))
    elif l.startswith("download "):
        if not re.fullmatch(r"download [0-9.]+/[0-9.]+ MB \[[#.]{30}\] +[0-9.]+% +[0-9.]+ MB/s ETA +[0-9]+s", l):
            bad.append(("a bar line with remains", l))
    else:
        bad.append(("neither a message nor a bar", l))
files = [f for f in os.listdir(sys.argv[2])]
for f in files:
    if not any(l.startswith("deltafin: %s: " % f) and "downloaded and verified" in l for l in screen):
        bad.append(("no line of its own", f))
bars = [l for l in screen if l.startswith("download ")]
if not bars or not re.search(r" 100\.0% ", bars[-1]):
    bad.append(("no final bar at 100%", bars[-1] if bars else ""))
for b in bad:
    print("  %s: %r" % b)
sys.exit(1 if bad else 0)
EOF

# --- 3: units ---
grep -q "0.00 GB" "$T/tty.out" "$T/r1.err" && fail "a small size printed as 0.00 GB: $(grep -h '0.00 GB' "$T/tty.out" "$T/r1.err")"
grep -Eq "step 1/1: download \([0-9.]+ MB missing of [0-9.]+ MB\)" "$T/tty.out" \
  || fail "the download step's sizes: $(grep -a 'step 1' "$T/tty.out")"
grep -Eq "setup --full done in .*: [0-9.]+ MB downloaded" "$T/tty.out" || fail "the summary's size: $(tail -2 "$T/tty.out")"
echo "PASS: setup progress (failed at the real figure; a clean terminal; per-file lines; units)"
