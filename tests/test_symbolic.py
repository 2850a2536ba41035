"""Symbolic programs: one program for every size of a dynamic dim, against torch eager; the
fitted size expressions, refusals, the loader's checks of the expressions, the CLI."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runtime_py.cli import main as run_main
from runtime_py.errors import BundleError, InputError
from runtime_py.fbs.SizeField import SizeField
from runtime_py.generate import generate
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from tests.conftest import load_example
from tests.test_loader_errors import _repack
from toolchain.cli import export_main, inspect_main
from toolchain.errors import UnsupportedModelError
from toolchain.export import export
from toolchain.export.buckets import DynamicDim
from toolchain.export.symbolic import export_symbolic, fit
from toolchain.serialize.bundle import write_bundle

SEQ = DynamicDim("seq", 1, 12, ((0, 1),))


class _Attend(torch.nn.Module):
    """Causal self-attention over [1, L, 8] masked with a folded ``arange(L)``, and the last
    position's output: shapes follow L, the scores' strides L^2, the last row's offset L."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(1, 2) / 8**0.5
        pos = torch.arange(x.shape[1])
        scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        y = self.out(scores.softmax(-1) @ v)
        return y, y[:, -1]


class _Strided(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, ::2] * 2


class _Ramp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.linspace(0, 1, x.shape[1])[None, :, None]


def _export(model: torch.nn.Module, dim: DynamicDim = SEQ):
    return export_symbolic(export, model, (torch.randn(1, 4, 8),), dim)


@pytest.fixture(scope="module")
def attend(tmp_path_factory):
    model = _Attend()
    path = tmp_path_factory.mktemp("symbolic") / "attend.nee"
    write_bundle(_export(model), path)
    return model, path


@pytest.fixture(scope="module")
def llama():
    return load_example("llama")


@pytest.mark.parametrize("xs, ys, want", [
    ([12, 11, 6], [5, 5, 5], (5,)),
    ([12, 11, 6, 2, 3], [96, 88, 48, 16, 24], (0, 8)),
    ([12, 11, 6, 2, 3], [-24, -32, -72, -104, -96], (-120, 8)),
    ([12, 11, 6, 2, 3], [144, 121, 36, 4, 9], (0, 0, 1)),
    ([12, 11, 6, 2, 3], [6, 5, 3, 1, 1], None),  # ceil(s / 2): no polynomial
    ([12, 11, 6, 2, 3], [6, 5.5, 3, 1, 1.5], None),  # not integer coefficients
])
def test_fit_finds_the_integer_polynomial_or_none(xs, ys, want) -> None:
    assert fit(xs, ys) == want


def test_one_program_matches_eager_at_every_size(attend) -> None:
    model, path = attend
    program = Program.load(path)
    assert program.dim.symbolic and program.methods == ["forward"]
    for size in range(SEQ.min, SEQ.max + 1):
        x = torch.randn(1, size, 8)
        with torch.no_grad():
            want = [t.numpy() for t in model(x)]
        got = program.run(x.numpy())
        for w, g in zip(want, got, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_size_expressions_cover_quadratic_strides_and_offsets(attend) -> None:
    exprs = load_bundle(attend[1]).bundle.dims[0].exprs
    degrees = {(e.field, len(e.coeffs)) for e in exprs}
    assert (SizeField.Stride, 3) in degrees  # the [1, L, L] scores
    assert (SizeField.ByteOffset, 2) in degrees  # y[:, -1] starts at row L - 1
    assert any(e.field == SizeField.ArgInt for e in exprs)  # a view's target shape


def test_a_size_is_prepared_once_then_runs_allocate_nothing(attend) -> None:
    program = Program.load(attend[1])
    x = np.ones((1, 5, 8), np.float32)
    program.run(x)
    prepared = program._sized[5]
    peaks = []
    for _ in range(3):  # the least of 3 runs: a one-off lazy cache elsewhere is not the run's
        tracemalloc.start()
        try:
            program.run(x)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # numpy's iterators for a few broadcasting calls (~1.8 KB); any array of the run is more
    assert program._sized[5] is prepared and min(peaks) < 2048, f"{peaks} B"
    program.prepare()
    assert sorted(program._sized) == [s for s in range(SEQ.min, SEQ.max + 1) if s != SEQ.max]


def test_bucket_of_a_symbolic_method_is_the_method_itself(attend) -> None:
    program = Program.load(attend[1])
    assert program.bucket(np.ones((1, 5, 8), np.float32)) is program


def test_sizes_outside_the_range_are_refused(attend) -> None:
    program = Program.load(attend[1])
    with pytest.raises(InputError, match=r"one size in \[1, 12\] \(a symbolic program\)"):
        program.run(np.ones((1, 13, 8), np.float32))
    with pytest.raises(InputError, match=r"sizes in \[1, 12\]"):
        program.prepare(0, 3)


@pytest.mark.parametrize("model, message", [
    (_Strided(), "a polynomial of degree <= 2 in the size"),
    (_Ramp(), r"the same program at every size but for integers, found argument \w+ = "),
])
def test_models_that_are_not_one_program_are_refused(model, message) -> None:
    with pytest.raises(UnsupportedModelError, match=message):
        _export(model)


def test_a_range_too_small_to_fit_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="at least five sizes"):
        _export(_Attend(), DynamicDim("seq", 1, 4, ((0, 1),)))


def _input_expr(b):
    return next(e for e in b.dims[0].exprs if e.field == SizeField.Shape and e.index == b.inputs[0])


def _output_shape_expr(b):
    """The size expression of the first node's output's dim axis (s, like the input's)."""
    out = b.nodes[0].outputs[0]
    return next(e for e in b.dims[0].exprs if e.field == SizeField.Shape and e.index == out
                and list(e.coeffs) == [0, 1])


def _bulge(e, k: int = 1000) -> None:
    """s + k (s - 1)(12 - s): the same at the min and the max, far larger between."""
    e.coeffs = [-12 * k, 1 + 13 * k, -k]


@pytest.mark.parametrize("mutate, message", [
    (lambda b: setattr(_input_expr(b), "coeffs", [0, 2]), "the tables hold"),
    (lambda b: setattr(b.dims[0].exprs[0], "index", 10**6), "no integer"),
    (lambda b: setattr(b.dims[0].exprs[0], "coeffs", [0, 1, 0, 0]), "coefficients"),
    (lambda b: b.dims[0].exprs.append(b.dims[0].exprs[0]), "a second expression"),
    (lambda b: b.dims[0].exprs.remove(_input_expr(b)), "without the size expression s"),
    (lambda b: setattr(_output_shape_expr(b), "coeffs", [12 * 1000 + 12, -1000]),
     r"attend.nee\[seq=1\]"),
    (lambda b: setattr(b.dims[0], "size", 11), "symbolic method's size is the max"),
    (lambda b: setattr(b, "entry", "forward"), "none for a symbolic method"),
])
def test_forged_size_expressions_are_refused_at_load(attend, tmp_path, mutate, message) -> None:
    bundle, write = _repack(attend[1], tmp_path, "attend.nee")
    mutate(bundle)
    with pytest.raises(BundleError, match=message):
        load_bundle(write())


def test_a_size_invalid_between_min_and_max_is_refused_on_its_first_run(attend, tmp_path) -> None:
    bundle, write = _repack(attend[1], tmp_path, "bulge.nee")
    _bulge(_output_shape_expr(bundle))
    program = Program.load(write())  # valid at the min and the max
    program.run(np.ones((1, 12, 8), np.float32))
    with pytest.raises(BundleError, match=r"bulge.nee\[seq=6\]"):
        program.run(np.ones((1, 6, 8), np.float32))


def test_llama_symbolic_matches_eager_and_generates_its_tokens(llama, tmp_path) -> None:
    model = llama.Model()
    dim = DynamicDim("seq", 1, 32, ((0, 1),))
    path = tmp_path / "llama.nee"
    write_bundle(export_symbolic(export, model, llama.example_inputs(), dim), path)
    with Program.load(path) as program:
        for size in (1, 2, 7, 17, 32):
            tokens = ((np.arange(size) * 37 + 5) % 4096).astype(np.int64)[None, :]
            llama.reset(model)
            program.reset()
            with torch.no_grad():
                want = model(torch.from_numpy(tokens), torch.tensor([0])).numpy()
            got = program.run(tokens, np.array([0]))[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())
        prompt = list(range(100, 140))  # longer than the dim: prefilled in two runs
        assert list(generate(program, prompt, 64)) == llama.eager_generate(model, prompt, 64)


def test_cli_exports_a_symbolic_program_and_inspects_it(tmp_path) -> None:
    out = tmp_path / "llama.nee"
    args = ["examples/llama.py:Model", "-o", str(out), "--dynamic", "tokens:1=1..16"]
    done = CliRunner().invoke(export_main, [*args, "--symbolic"])
    assert done.exit_code == 0, done.output
    assert "one symbolic program, fitted at sizes [16, 15, 9, 3, 2]" in done.output
    shown = CliRunner().invoke(inspect_main, [str(out)]).output
    assert "forward (tokens:1 in [1, 16], symbolic:" in shown
    ran = CliRunner().invoke(run_main, [str(out), "--generate", "1,2,3", "--max-new-tokens", "3"])
    assert ran.exit_code == 0 and "tokens/s" in ran.output, ran.output
    both = CliRunner().invoke(export_main, [*args, "--symbolic", "--buckets", "4,16"])
    assert both.exit_code == 2 and "exclude each other" in both.output
