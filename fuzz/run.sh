#!/usr/bin/env bash
# Runs one fuzz target (or all) for a given time on the stable toolchain.
#
#   fuzz/run.sh TARGET|all SECONDS [extra libFuzzer flags...]
#
# Targets: front_end, lowering, npy, gradbench. Needs cargo-fuzz
# (`cargo install --locked cargo-fuzz`); RUSTC_BOOTSTRAP=1 lets it use the
# nightly-only sanitizer flags on stable. The corpus grows in
# fuzz/corpus/<target>/ (not committed); it is seeded from the example and
# GradBench programs, fuzz/seeds/ and fuzz/regressions/<target>/. A crash,
# leak or timeout stops the run and leaves the input in
# fuzz/artifacts/<target>/: minimise it (`cargo fuzz tmin`), fix the bug,
# and copy the input into fuzz/regressions/<target>/, which the test suite
# replays. Prints one line per target with the executions and their rate.
#
# Environment: GRAFT_FUZZ_SANITIZER (default `address`; `none` for long
# campaigns, built in target/none/ so the two builds do not replace each
# other), GRAFT_FUZZ_TIMEOUT (seconds one input may take, default 10; it is
# wall-clock time, so raise it for runs under `nice` on a busy machine) and
# RAYON_NUM_THREADS (default 1: one core per fuzz process).
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?usage: fuzz/run.sh TARGET|all SECONDS}
secs=${2:?usage: fuzz/run.sh TARGET|all SECONDS}
shift 2
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: cargo install --locked cargo-fuzz" >&2
  exit 2
fi
export RUSTC_BOOTSTRAP=1
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-1}
sanitizer=${GRAFT_FUZZ_SANITIZER:-address}
timeout=${GRAFT_FUZZ_TIMEOUT:-10}
build=(--release -s "$sanitizer")
[ "$sanitizer" = address ] || build+=(--target-dir "target/$sanitizer")
targets=("$target")
[ "$target" = all ] && targets=(front_end lowering npy gradbench)
for t in "${targets[@]}"; do
  corpus=corpus/$t
  mkdir -p "$corpus"
  case $t in
    front_end|lowering) cp -n ../examples/*.graft ../gradbench/*.graft "$corpus"/ 2>/dev/null || true ;;
  esac
  [ -d "seeds/$t" ] && cp -n seeds/"$t"/* "$corpus"/ 2>/dev/null || true
  cp -n regressions/"$t"/* "$corpus"/ 2>/dev/null || true
  log=$(mktemp)
  # -rss_limit_mb: a target may use a few hundred MB (the GradBench budget
  # is 256 MB); -timeout: one input taking longer than 10 s is a hang.
  if ! cargo fuzz run "${build[@]}" "$t" "$corpus" -- -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb=2048 \
      -print_final_stats=1 "$@" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz $t: FAILED (see the input in fuzz/artifacts/$t/)"
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "fuzz $t: $runs executions in ${secs} s, no crash, leak or timeout"
  rm -f "$log"
done
