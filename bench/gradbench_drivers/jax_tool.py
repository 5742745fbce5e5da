"""GradBench's JAX tool (tools/jax/run.py of the snapshot, unmodified), run with
async dispatch off and every result blocked on inside the timed region.

The snapshot's `gradbench.wrap.multiple_runs` times `function(input)` with
perf_counter_ns around the call; a jitted JAX function may return before its
computation is done. This wrapper:
  1. sets `jax_cpu_enable_async_dispatch = False`, and
  2. replaces `gradbench.wrap.multiple_runs` / `gradbench.wrap.function` (before
     the tool's modules are imported by `define`) by versions that decorate
     `lambda x: jax.block_until_ready(f(x))`, so the block is inside the
     timed region.
All arguments (e.g. --multithreaded) are passed to the tool's run.py.
"""

import os
import runpy
import sys

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import gradbench.wrap as wrap  # noqa: E402

_orig_multiple_runs = wrap.multiple_runs
_orig_function = wrap.function


def _blocking(f):
    def g(x):
        return jax.block_until_ready(f(x))

    return g


def multiple_runs(**kwargs):
    decorator = _orig_multiple_runs(**kwargs)
    return lambda f: decorator(_blocking(f))


def function(**kwargs):
    decorator = _orig_function(**kwargs)
    return lambda f: decorator(_blocking(f))


wrap.multiple_runs = multiple_runs
wrap.function = function

tool_dir = os.path.join(
    os.path.dirname(wrap.__file__), "tools", "jax"
)
run_py = os.path.join(tool_dir, "run.py")
sys.path.insert(0, tool_dir)  # as `python tools/jax/run.py` would do
sys.argv = [run_py, *sys.argv[1:]]
runpy.run_path(run_py, run_name="__main__")
