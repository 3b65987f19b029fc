#!/bin/sh
# Stream-mode decode with cold experts over an EMULATED link (not a test: a
# measurement for docs/PERFORMANCE.md). Needs a running hub (hubgen.py +
# nginx) on HUB_PORT and a stream install STREAM_DIR made from it.
# usage: bench_stream.sh HUB_PORT STREAM_DIR RATE_BYTES_PER_S LATENCY_MS CONNECTIONS [REPEATS] [MODES]
# MODES: space-separated PREFETCH:FETCH_AHEAD pairs (default "off:off", the
# run with no predictor at all), e.g. "auto:off auto:on gate:off gate:on";
# each repeat runs every mode on its own fresh copy of the install.
set -eu
B=${DF_BIN:-build/deltafin}
HERE=$(dirname "$0")
HUB=$1 DIR=$2 RATE=$3 LAT=$4 CONNS=$5 REP=${6:-3} MODES=${7:-off:off}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$HERE/faultproxy.py" --listen "$PORT" --upstream "$HUB" --rate "$RATE" --latency-ms "$LAT" \
  --only '^$' 2>/dev/null &
P=$!
trap 'kill $P 2>/dev/null; rm -rf "$W"' EXIT
W=$(mktemp -d /tmp/df_bench_stream.XXXXXX)
sleep 0.5
for _ in $(seq 1 "$REP"); do
for MODE in $MODES; do
  PF=${MODE%%:*} FA=${MODE#*:}
  rm -rf "$W/m"
  cp -r --sparse=always "$DIR" "$W/m"
  DF_FETCH_CONNECTIONS=$CONNS HF_ENDPOINT=http://127.0.0.1:$PORT "$B" run --model "$W/m" \
    --prompt-ids 1,2,3,4 --max-new 16 --json --prefetch "$PF" --fetch-ahead "$FA" >"$W/cold.json" 2>/dev/null
  "$B" run --model "$W/m" --prompt-ids 1,2,3,4 --max-new 16 --json --prefetch off >"$W/warm.json" 2>/dev/null
  python3 - "$W" "$RATE" "$LAT" "$CONNS" "$PF" "$FA" <<'PY'
import json, sys
w, rate, lat, conns, pf, fa = sys.argv[1:]
c = json.load(open(w + "/cold.json")); h = json.load(open(w + "/warm.json"))
assert c["output_ids"] == h["output_ids"], "cold and warm ids differ"
net = c["stats"]["store"]["network"]
tot = lambda d: d["stats"]["prefill_s"] + d["stats"]["decode_s"]
print("EMULATED link %s B/s, %s ms, %s connections, --prefetch %s --fetch-ahead %s: cold %.2f s "
      "(decode %.2f s), network wait %.2f s, %d records %.1f MB in %d requests, ahead %d records "
      "(%d used, %.1f MB); redirects followed %s, skipped %s; warm %.2f s" % (rate, lat, conns, pf, fa,
      tot(c), c["stats"]["decode_s"],
      net["wait_seconds"], net["records_fetched"], net["bytes_fetched"] / 1e6, net["http_requests"],
      net.get("ahead_records_fetched", 0), net.get("ahead_used", 0),
      net.get("ahead_bytes_fetched", 0) / 1e6, net.get("http_redirects_followed", "n/a"),
      net.get("http_redirects_skipped", "n/a"), tot(h)))
PY
done
done
