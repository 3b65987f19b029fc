# Shared by the speculation tests (test_spec.sh, test_dspark.sh), sourced
# after BIN, T and fail are set: one run's ids, a field of its speculation
# report, and the check that every variant gives --draft off's ids.
# SPEC_NEW: new tokens per run (default 40).
ids_of() { # model, then run args; the JSON in $T/last.json
  m=$1; shift
  "$BIN" run --model "$m" --max-new "${SPEC_NEW:-40}" --json --heat "" "$@" >"$T/last.json" 2>"$T/last.err" ||
    { cat "$T/last.err" >&2; return 1; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['output_ids'])" "$T/last.json"
}
spec() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['stats']['speculation'][sys.argv[2]])" "$T/last.json" "$1"; }

check() { # label, model, base args..., then the variants as one string each
  label=$1 m=$2 args=$3; shift 3
  base=$(eval ids_of "\"$m\"" $args --draft off) || fail "$label: base run"
  for v in "$@"; do
    got=$(eval ids_of "\"$m\"" $args $v) || fail "$label $v: run failed"
    [ "$got" = "$base" ] || fail "$label $v: ids $got differ from $base"
  done
  echo "ok: $label: $# variants give the ids of --draft off"
}
