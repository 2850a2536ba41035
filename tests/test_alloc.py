"""No allocation at run time: a warm program's run allocates < 1% of its arena, or less than
numpy's own iterator bookkeeping on a small arena (tracemalloc)."""

from __future__ import annotations

import tracemalloc

import pytest

from runtime_py.program import Program

# numpy's iterator for one broadcasting ufunc call (layer norm, softmax, bias adds) and the run's
# own bookkeeping come to ~1.5 KB, more than 1% of the transformer's 128 KB arena; a copy of one
# of its (32, 128) activations is 16 KB, so a temporary still fails. Calls prepared at load and
# the numpy mode set once per program keep everything else out of a run.
ITERATOR_BYTES = 2048
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
    assert peak < max(0.01 * program.arena_bytes, ITERATOR_BYTES), (
        f"{name}: run peak {peak} B = {peak / program.arena_bytes:.2%} of "
        f"{program.arena_bytes} B arena")
