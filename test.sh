#!/usr/bin/env bash
# The test suite: every Rust test, then the distributed (MPI) tests, then
# the Python package's pytest suite (built into target/pyvenv; see
# python/test.sh). What CI runs after fmt and clippy.
#   GRAFT_REQUIRE_MPI=1   fail instead of skipping the MPI tests when the
#                         machine has no MPI (CI sets it and installs OpenMPI)
#   GRAFT_REQUIRE_GPU=1   the same for the GPU tests (see crates/graft-gpu)
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace
# The `mpi` feature builds graft-mpi against the system MPI (mpicc finds its
# headers; bindgen needs libclang) and runs the tests under mpirun -np 2, 3.
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
  cargo test -p graft-mpi --features mpi
  cargo test -p graft-cli --features mpi --test all distributed::
elif [ "${GRAFT_REQUIRE_MPI:-0}" = "1" ]; then
  echo "error: GRAFT_REQUIRE_MPI=1 but no MPI (mpicc, mpirun) is installed" >&2
  exit 1
else
  echo "skipped: the MPI tests (no mpicc/mpirun; install OpenMPI, or set GRAFT_REQUIRE_MPI=1 to fail instead)"
fi
python/test.sh
