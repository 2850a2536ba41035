"""nn.Module -> bundle -> numpy runtime equals torch eager."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.program import Program


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_skeleton_models_match_eager_exactly(exported, name):
    ex = exported(name)
    outputs = Program.load(ex.path).run(*ex.inputs)
    assert len(outputs) == len(ex.expected)
    for got, want in zip(outputs, ex.expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name", ["mobilenet_v2", "mobilenet_v3_small", "resnet18", "transformer", "gru"]
)
def test_zoo_models_match_eager(exported, name):
    ex = exported(name)
    outputs = Program.load(ex.path).run(*ex.inputs)
    for got, want in zip(outputs, ex.expected, strict=True):
        scale = max(float(np.abs(want).max()), 1e-6)
        assert float(np.abs(got - want).max()) <= 1e-4 * scale


def test_runs_are_repeatable_and_use_fresh_inputs(exported):
    ex = exported("cnn")
    program = Program.load(ex.path)
    first = program.run(*ex.inputs)[0].copy()
    other = program.run(*[np.ones_like(x) for x in ex.inputs])[0].copy()
    again = program.run(*ex.inputs)[0]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


ALL = ["mlp", "cnn", "mobilenet_v2", "mobilenet_v3_small", "resnet18", "transformer", "gru"]


@pytest.mark.parametrize("name", ALL)
def test_plan_reaches_lower_bound_on_real_graphs(exported, name):
    plan = exported(name).result.plan
    assert [a.size for a in plan.arenas] == [a.lower_bound for a in plan.arenas]


def test_plan_reports_lower_bound_and_aliases_views(exported):
    result = exported("cnn").result
    (arena,) = result.plan.arenas
    assert arena.size >= arena.lower_bound > 0
    views = [t for t in result.graph.tensors.values() if t.view_of]
    assert views, "flatten/permute in the CNN should be zero-copy views"


def test_weights_are_used_in_place_from_the_mapped_file(exported):
    program = Program.load(exported("resnet18").path)
    mapped = program.loaded.data
    consts = [(v, t) for v, t in zip(program.tensors, program.loaded.bundle.tensors, strict=True)
              if t.storageKind == StorageKind.Constant]
    assert consts and all(not v.flags.writeable for v, _ in consts)
    start = np.frombuffer(mapped, np.uint8).ctypes.data
    for v, t in consts:
        assert start <= v.ctypes.data < start + len(mapped)  # inside the mapping: no copy
        if t.byteOffset == 0:
            assert (v.ctypes.data - start) % 64 == 0  # segments are 64-byte aligned


def test_arena_is_allocated_once(exported):
    ex = exported("mobilenet_v2")
    program = Program.load(ex.path)
    before = [a.ctypes.data for a in program.arenas]
    for _ in range(2):
        program.run(*ex.inputs)
    assert [a.ctypes.data for a in program.arenas] == before
    assert all(a.ctypes.data % 64 == 0 for a in program.arenas)


def test_caller_numpy_settings_are_untouched(exported):
    """The kernels' numpy mode (errors ignored, small ufunc buffers) stays inside the program."""
    ex = exported("transformer")
    with np.errstate(all="raise"):
        np.setbufsize(4096)
        program = Program.load(ex.path)
        program.run(*ex.inputs)
        program.profile(*ex.inputs)
        assert np.geterr()["over"] == "raise" and np.getbufsize() == 4096
        with pytest.raises(FloatingPointError):
            np.exp(np.float32(100))
