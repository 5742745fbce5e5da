#!/usr/bin/env bash
# The test suite: every Rust test, then the Python package's pytest suite
# (built into target/pyvenv; see python/test.sh). What CI runs after fmt
# and clippy.
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace
python/test.sh
