#!/usr/bin/env bash
# Time graft and GradBench's JAX tool under GradBench's own eval drivers and
# `run` intermediary (default workloads, --min-runs 3 --min-seconds 0.5).
#
# Usage: bench/gradbench_drivers/run_gradbench.sh [--smoke] [EVAL ...]
#   EVAL ...   default: lse llsq ode kmeans gmm det lstm
#   --smoke    only the smallest workload of each eval (for checking the setup)
# Environment:
#   GRAFT=target/release/graft       graft binary (`$GRAFT gradbench` is the tool)
#   TOOLS="graft jax"        which tools to run (jax only for lse llsq ode kmeans gmm)
#   MIN_RUNS=3 MIN_SECONDS=0.5
#   JAX_MULTITHREADED=0      1: pass --multithreaded to the JAX tool (default: the
#                            tool pins itself to CPU 0, GradBench's default)
#   PIN_GRAFT=0              1: run graft under `taskset -c 0` (like the JAX tool's
#                            default pinning); default: unpinned (rayon, all cores)
#   TIMEOUT=                 optional per-response timeout in seconds for `run`
#   GB_DIR=/tmp/gb           GradBench checkout, CLI build and venv (see README.md)
#   LOGS=$GB_DIR/logs
# Logs: $LOGS/<eval>-<tool>.jsonl (GradBench's log format), settings in
# $LOGS/settings.txt, the intermediary's console output in $LOGS/<eval>-<tool>.out.
# Then: $GB_DIR/venv/bin/python bench/gradbench_drivers/summarize.py [$LOGS]
set -u
GB=${GB_DIR:-/tmp/gb}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$GB/gradbench
PY=$GB/venv/bin/python
CLI=$GB/target/release/gradbench
GRAFT=$(realpath "${GRAFT:-$HERE/../../target/release/graft}")
TOOLS=${TOOLS:-graft jax}
MIN_RUNS=${MIN_RUNS:-3}
MIN_SECONDS=${MIN_SECONDS:-0.5}
JAX_MULTITHREADED=${JAX_MULTITHREADED:-0}
PIN_GRAFT=${PIN_GRAFT:-0}
TIMEOUT=${TIMEOUT:-}
LOGS=${LOGS:-$GB/logs}
JAX_EVALS=" lse llsq ode kmeans gmm "

smoke=0
if [ "${1:-}" = "--smoke" ]; then smoke=1; shift; fi
evals=("$@")
[ ${#evals[@]} -eq 0 ] && evals=(lse llsq ode kmeans gmm det lstm)

# Smallest workload of each driver (first value of each default list).
smoke_args() {
  case $1 in
    lse) echo "-n 2500" ;;
    llsq) echo "-n 16 -m 128" ;;
    ode) echo "-n 1000 -s 1" ;;
    kmeans) echo "-k 10 -n 1000 -d 8" ;;
    gmm) echo "-d 2 -k 5" ;;
    det) echo "-l 5" ;;
    lstm) echo "-l 2 -c 1024" ;;
    *) echo "" ;;
  esac
}

for f in "$CLI" "$GRAFT" "$PY"; do
  [ -x "$f" ] || { echo "missing: $f" >&2; exit 2; }
done
mkdir -p "$LOGS"
cd "$REPO" || exit 2

# Golden tool for validation (mismatch against GradBench's C++ `manual`).
for e in "${evals[@]}"; do
  [ -x tools/manual/bin/$e ] || make -s -C tools/manual bin/$e NATIVE=no || exit 2
done

{
  echo "date: $(date -Is)"
  echo "host: $(uname -a)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"
  echo "loadavg at start: $(cat /proc/loadavg)"
  echo "gradbench commit: $(git -C "$REPO" rev-parse HEAD)"
  echo "graft: $GRAFT sha256=$(sha256sum "$GRAFT" | cut -c1-16) mtime=$(date -r "$GRAFT" -Is)"
  echo "jax: $($PY -c 'import jax, jaxlib, numpy; print(jax.__version__, "jaxlib", jaxlib.__version__, "numpy", numpy.__version__)' 2>/dev/null)"
  echo "jax tool: $HERE/jax_tool.py (async dispatch off, block_until_ready inside timed region), multithreaded=$JAX_MULTITHREADED ($( [ "$JAX_MULTITHREADED" = 1 ] && echo 'all cores' || echo 'tool pins itself to CPU 0'))"
  echo "graft pinning: $( [ "$PIN_GRAFT" = 1 ] && echo 'taskset -c 0' || echo 'none (rayon default: all cores)')"
  echo "policy: --min-runs $MIN_RUNS --min-seconds $MIN_SECONDS; smoke=$smoke; evals: ${evals[*]}; tools: $TOOLS"
  echo "threads env: OMP_NUM_THREADS=${OMP_NUM_THREADS-unset} XLA_FLAGS=${XLA_FLAGS-unset} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS-unset} MKL_NUM_THREADS=${MKL_NUM_THREADS-unset}"
  echo "GRAFT_* env: $(env | grep '^GRAFT_' | tr '\n' ' ')"
} > "$LOGS/settings.txt"
cat "$LOGS/settings.txt"

jax_flags=""
[ "$JAX_MULTITHREADED" = 1 ] && jax_flags="--multithreaded"
timeout_flag=()
[ -n "$TIMEOUT" ] && timeout_flag=(--timeout "$TIMEOUT")

status=0
for e in "${evals[@]}"; do
  extra=""
  [ $smoke = 1 ] && extra=$(smoke_args "$e")
  eval_cmd="$PY python/gradbench/gradbench/evals/$e/run.py --min-runs $MIN_RUNS --min-seconds $MIN_SECONDS $extra"
  for t in $TOOLS; do
    case $t in
      graft) tool_cmd="$GRAFT gradbench"
        [ "$PIN_GRAFT" = 1 ] && tool_cmd="taskset -c 0 $tool_cmd" ;;
      jax)
        case "$JAX_EVALS" in *" $e "*) ;; *) continue ;; esac
        tool_cmd="$PY $HERE/jax_tool.py $jax_flags" ;;
      *) echo "unknown tool $t" >&2; exit 2 ;;
    esac
    echo "=== $e / $t: $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "    eval: $eval_cmd"
    echo "    tool: $tool_cmd"
    start=$(date +%s)
    "$CLI" run "${timeout_flag[@]}" --eval "$eval_cmd" --tool "$tool_cmd" \
      -o "$LOGS/$e-$t.jsonl" > "$LOGS/$e-$t.out" 2>&1
    rc=$?
    echo "    exit $rc after $(( $(date +%s) - start )) s (console output: $LOGS/$e-$t.out)"
    [ $rc -ne 0 ] && status=1
    echo "loadavg after $e/$t: $(cat /proc/loadavg)" >> "$LOGS/settings.txt"
  done
done
exit $status
