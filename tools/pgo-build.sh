#!/usr/bin/env bash
# Builds routersim with profile-guided optimization (PGO) into target/pgo/release/routersim:
# an instrumented build first, trained on the bundled scenarios, the fidelity fixtures and a
# generated Poisson trace (none of them the bench's traces), then the optimized build.
# Outputs are byte-identical to the plain build's; only speed differs (docs/performance.md).
#
# Needs llvm-profdata of rustc's own LLVM version: `rustup component add llvm-tools`, or a
# distribution's package (Debian: llvm-N, for LLVM N). LLVM_PROFDATA names it explicitly.
# python3 writes the generated trace (tools/gen_bench_trace.py).
# Usage: tools/pgo-build.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')

# llvm-profdata whose major version is rustc's LLVM's: a raw profile is read only by its own.
find_profdata() {
  local host sysroot candidate
  host=$(rustc -vV | sed -n 's/^host: //p')
  sysroot=$(rustc --print sysroot)
  for candidate in "${LLVM_PROFDATA:-}" "$sysroot/lib/rustlib/$host/bin/llvm-profdata" \
    "llvm-profdata-$llvm_major" llvm-profdata; do
    [[ -n $candidate ]] && command -v "$candidate" >/dev/null || continue
    if "$candidate" --version | grep -q "LLVM version $llvm_major\."; then
      echo "$candidate"
      return
    fi
  done
  echo "pgo-build: no llvm-profdata of LLVM $llvm_major (rustc's): run" \
    "'rustup component add llvm-tools', install llvm-$llvm_major, or set LLVM_PROFDATA" >&2
  exit 2
}

# Runs the instrumented binary $1 on the training inputs, writing outputs below $2.
train() {
  local bin=$1 out=$2 scenario fixture name status
  for scenario in "$repo"/scenarios/*.yaml; do
    name=$(basename "$scenario" .yaml)
    # 1 is a scenario's expectation not met: the run itself is what trains.
    status=0
    "$bin" run "$scenario" --quiet --out "$out/run-$name" >/dev/null || status=$?
    [[ $status -le 1 ]] || { echo "pgo-build: training on $name failed" >&2; exit 1; }
  done
  for fixture in "$repo"/tests/fixtures/fidelity/*/; do
    name=$(basename "$fixture")
    local args=(--trace trace.jsonl --engine engine.json)
    [[ -f $fixture/policy.yaml ]] && args+=(--policy policy.yaml)
    [[ -f $fixture/router.json ]] && args+=(--router router.json)
    if [[ -f $fixture/replay_args.txt ]]; then
      local extra
      read -r -a extra <"$fixture/replay_args.txt"
      args+=("${extra[@]}")
    fi
    # Inside the fixture: its files name each other relative to it.
    (cd "$fixture" && "$bin" replay "${args[@]}" --quiet --out "$out/fixture-$name" >/dev/null)
  done
  python3 "$repo/tools/gen_bench_trace.py" --requests 20000 --rate-per-s 100 --input 2048 \
    --output 256 --seed 7 "$out/poisson.jsonl"
  "$bin" replay --trace "$out/poisson.jsonl" --workers 16 --quiet --out "$out/poisson-16"
  "$bin" replay --trace "$out/poisson.jsonl" --prefill-workers 4 --decode-workers 4 \
    --quiet --out "$out/poisson-4p4d"
}

profdata=$(find_profdata)
work="$repo/target/pgo-work"
rm -rf "$work"
mkdir -p "$work/profiles" "$work/out"
cd "$repo"
# The cfg has the instrumented binary end through the C runtime's exit handlers, one of which
# writes its profile (the plain build skips them: src/main.rs). Eight value counters per call
# site hold the targets of routersim's indirect calls (with LLVM's default, training warned
# 140 times that they ran out).
RUSTFLAGS="${RUSTFLAGS:-} --cfg routersim_pgo_training -Cprofile-generate=$work/profiles \
  -Cllvm-args=-vp-counters-per-site=8" \
  cargo build --release --bin routersim --target-dir "$repo/target/pgo-instrumented"
# Build scripts and proc macros were instrumented too, and profiled the build: not routersim.
rm -f "$work/profiles"/*
export LLVM_PROFILE_FILE="$work/profiles/%m.profraw"
train "$repo/target/pgo-instrumented/release/routersim" "$work/out"
unset LLVM_PROFILE_FILE
"$profdata" merge -o "$work/routersim.profdata" "$work/profiles"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$work/routersim.profdata" \
  cargo build --release --bin routersim --target-dir "$repo/target/pgo"
echo "built $repo/target/pgo/release/routersim"
