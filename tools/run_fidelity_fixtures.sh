#!/usr/bin/env bash
# Runs Dynamo 1.6.1 (through tools/dynamo-replay, one worker unless replay_args.txt says) on every fidelity fixture
# and stores its outputs next to the inputs: dynamo.csv and dynamo.trace.jsonl, with the extra
# flags of replay_args.txt when a fixture has one. Each fixture is
# run twice and the two CSVs must be identical (one worker is deterministic in 1.6.1).
# DYNAMO_REPLAY names another driver with the same flags.
# Usage: tools/run_fidelity_fixtures.sh [FIXTURE_ROOT] [NAME...]
set -euo pipefail
root=${1:-tests/fixtures/fidelity}
shift || true
replay=${DYNAMO_REPLAY:-$(dirname "${BASH_SOURCE[0]}")/dynamo-replay}
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=()
  for d in "$root"/*/; do names+=("$(basename "$d")"); done
fi
replay=$(cd "$(dirname "$replay")" && pwd)/$(basename "$replay")
same_up_to_worker_names() {
  python3 - "$1" "$2" <<'PY'
import csv, sys
def canonical(path):
    names, out = {}, []
    for row in csv.DictReader(open(path)):
        for column in ("worker", "prefill_worker"):
            if row.get(column):
                row[column] = str(names.setdefault((column, row[column]), len(names)))
        row["dp_rank"] = None  # the driver's worker numbers ranks: renamed with it
        out.append(row)
    return out
sys.exit(0 if canonical(sys.argv[1]) == canonical(sys.argv[2]) else 1)
PY
}
for name in "${names[@]}"; do
  d=$root/$name
  # Run inside the fixture, so that a relative profile path in engine.json (a
  # `dynamo_profile` timing model) means the file beside it, as routersim reads it.
  args=(--trace trace.jsonl --workers 1 --engine engine.json)
  [[ -f $d/policy.yaml ]] && args+=(--policy policy.yaml)
  [[ -f $d/router.json ]] && args+=(--router router.json)
  # Dynamo's other replay modes (closed loop, arrival speed-up): flags on one line.
  if [[ -f $d/replay_args.txt ]]; then read -r -a extra <"$d/replay_args.txt"; args+=("${extra[@]}"); fi
  tmp=$(mktemp -d)
  (cd "$d" && "$replay" "${args[@]}" --out "$tmp/a.csv" --tagged-trace "$tmp/a.trace.jsonl" >"$tmp/a.out")
  (cd "$d" && "$replay" "${args[@]}" --out "$tmp/b.csv" --tagged-trace "$tmp/b.trace.jsonl" >"$tmp/b.out")
  # Two workers (or ranks) that tie are picked between at random by 1.6.1: runs may name them
  # the other way round, so they are compared with workers renamed in order of first use.
  same_up_to_worker_names "$tmp/a.csv" "$tmp/b.csv" || { echo "$name: two runs differ" >&2; exit 1; }
  cp "$tmp/a.csv" "$d/dynamo.csv"
  cp "$tmp/a.trace.jsonl" "$d/dynamo.trace.jsonl"
  echo "$name: $(cat "$tmp/a.out")"
  rm -rf "$tmp"
done
