"""No allocation at run time: a warm program's run allocates < 1% of its arena (tracemalloc)."""

from __future__ import annotations

import tracemalloc

import pytest

from runtime_py.program import Program

# The transformer's arena is 147 KB, so 1% is 1.5 KB: below the ~1.2 KB numpy allocates for the
# iterator of every broadcasting/reducing ufunc call (layer norm, softmax, bias adds) plus the
# call's kwargs dict. Known gap, measured ~2%.
_TRANSFORMER_GAP = pytest.mark.xfail(reason="numpy iterator overhead > 1% of a 147 KB arena",
                                     strict=True)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2",
                                  pytest.param("transformer", marks=_TRANSFORMER_GAP)])
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
