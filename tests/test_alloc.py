"""No allocation at run time: a warm program's run allocates < 1% of its arena (tracemalloc)."""

from __future__ import annotations

import tracemalloc

import pytest

from runtime_py.program import Program


# The transformer's arena is 152 KB, so 1% is 1.5 KB; numpy's iterator for one broadcasting
# ufunc call (layer norm, softmax, bias adds) is ~1.1 KB of it. Calls prepared at load and the
# numpy mode set once per program keep everything else out of a run.
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "transformer"])
def test_run_allocates_under_one_percent_of_arena(name: str, exported) -> None:
    ex = exported(name)
    program = Program.load(ex.path)
    program.run(*ex.inputs)  # warm-up: lazy numpy/BLAS initialisation, kernel plan caches
    tracemalloc.start()
    try:
        program.run(*ex.inputs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.01 * program.arena_bytes, (
        f"{name}: run peak {peak} B = {peak / program.arena_bytes:.2%} of "
        f"{program.arena_bytes} B arena")
