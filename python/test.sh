#!/usr/bin/env bash
# Builds the Python package into a virtual environment and runs its pytest
# suite (python/tests, including the checks against JAX). Installs maturin,
# pytest, numpy, jax and optax into the environment when they are missing.
#   GRAFT_PY_VENV   where the environment lives (default target/pyvenv)
#   PYTHON          the interpreter to build it from (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GRAFT_PY_VENV:-target/pyvenv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  # Debian's python3 lacks `venv` without python3-venv; virtualenv (from pip) does not.
  "$PY" -m venv "$VENV" 2>/dev/null || {
    rm -rf "$VENV"
    "$PY" -m pip install --quiet --user virtualenv 2>/dev/null || "$PY" -m pip install --quiet --break-system-packages --user virtualenv
    "$PY" -m virtualenv --quiet "$VENV"
  }
fi
need=()
for mod in maturin pytest numpy jax optax; do
  "$VENV/bin/python" -c "import $mod" >/dev/null 2>&1 || need+=("$mod")
done
if [ ${#need[@]} -gt 0 ]; then
  "$VENV/bin/python" -m pip install --quiet "${need[@]}"
fi
# The dev profile: its dependencies (opt-level 2) are the ones
# `cargo test --workspace` built, so this build adds graft's own crates at
# opt-level 0 and the extension. (`--profile test` would build the library
# as a test harness executable, which Python cannot load.)
start=$(date +%s)
VIRTUAL_ENV="$(cd "$VENV" && pwd)" PATH="$VENV/bin:$PATH" \
  "$VENV/bin/maturin" develop --quiet --manifest-path python/Cargo.toml
echo "== graft Python package built in $(( $(date +%s) - start )) s"
"$VENV/bin/python" -m pytest -q python/tests "$@"
