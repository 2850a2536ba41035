"""Persistent state (a KV cache), methods sharing weights and state, buckets of a dynamic dim,
and greedy generation from a bundle, against torch eager."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from runtime_py.cli import main as run_main
from runtime_py.errors import BundleError, InputError
from runtime_py.generate import GenerationStats, generate
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from tests.conftest import load_example
from tests.test_loader_errors import _repack
from toolchain.cli import export_main, inspect_main
from toolchain.errors import ExportError, UnsupportedModelError
from toolchain.export import export
from toolchain.export.buckets import export_buckets, export_methods, module_dim, parse_dynamic
from toolchain.serialize.bundle import write_bundle

BUCKETS = [1, 8, 32]


@pytest.fixture(scope="module")
def llama():
    return load_example("llama")


@pytest.fixture(scope="module")
def bucketed(llama, tmp_path_factory):
    """The example decoder exported with buckets 1, 8 and 32 of its seq dim."""
    model = llama.Model()
    dim = module_dim(model, llama.dynamic_shapes())
    result = export_buckets(export, model, llama.example_inputs(), dim, BUCKETS, name="llama")
    path = tmp_path_factory.mktemp("llama") / "llama.nee"
    write_bundle(result, path)
    return model, result, path


def _eager(llama, model, tokens: np.ndarray, start: int) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens), torch.tensor([start])).numpy()


def test_kv_cache_is_state_updated_in_place_and_kept_across_runs(llama, bucketed) -> None:
    model, _, path = bucketed
    program = Program.load(path)
    cache_bytes = sum(b.nbytes for name, b in model.named_buffers() if "cache" in name)
    assert program.state_bytes == cache_bytes
    for method in program.methods[:3]:  # each bucket updates the cache in place: no copy
        calls = [c.op for c in program.method(method).calls]
        assert "aten::copy.out" not in calls and calls.count("aten::index_put.out") == 8
    decode = program.method("forward[seq=1]")  # no second cache planned in its arena
    assert sum(a.nbytes for a in decode.arenas) < cache_bytes / 8
    llama.reset(model)
    tokens = np.arange(1, 13, dtype=np.int64)[None, :]
    for start, chunk in ((0, tokens[:, :5]), (5, tokens[:, 5:12]), (12, tokens[:, :1])):
        want = _eager(llama, model, chunk, start)
        got = program.run(chunk, np.array([start]))[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())
    llama.reset(model)
    program.reset()  # back to zeros: the same call gives the first result again
    want = _eager(llama, model, tokens[:, :1], 0)
    np.testing.assert_allclose(program.run(tokens[:, :1], np.array([0]))[0], want, rtol=1e-4,
                               atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("size", [1, 2, 7, 8, 9, 31, 32])
def test_buckets_match_eager_at_every_size(llama, bucketed, size: int) -> None:
    model, _, path = bucketed
    program = Program.load(path)
    tokens = ((np.arange(size) * 37 + 5) % 4096).astype(np.int64)[None, :]
    llama.reset(model)
    want = _eager(llama, model, tokens, 0)
    got = program.run(tokens, np.array([0]))[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())
    assert program.bucket(tokens, np.array([0])).dim.size == min(b for b in BUCKETS if b >= size)


def test_sizes_outside_the_dim_are_refused_naming_the_range(bucketed) -> None:
    program = Program.load(bucketed[2])
    for tokens in (np.zeros((1, 33), np.int64), np.zeros((1, 0), np.int64)):
        with pytest.raises(InputError, match=r"one size in \[1, 32\] \(buckets \[1, 8, 32\]\)"):
            program.run(tokens, np.array([0]))


@pytest.mark.parametrize("size", [3, 8, 20])
def test_bucket_runs_allocate_nothing_once_a_size_is_warm(bucketed, size: int) -> None:
    program = Program.load(bucketed[2])
    tokens, start = np.ones((1, size), np.int64), np.array([0])
    program.run(tokens, start)
    tracemalloc.start()
    try:
        program.run(tokens, start)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.01 * program.arena_bytes, f"{peak} B at size {size}"


@pytest.mark.parametrize("prompt", [[1, 2, 3], list(range(100, 140))])
def test_greedy_generation_gives_eagers_64_tokens(llama, bucketed, prompt) -> None:
    model, _, path = bucketed
    stats = GenerationStats()
    with Program.load(path) as program:
        got = list(generate(program, prompt, 64, stats))
    assert got == llama.eager_generate(model, prompt, 64)
    assert stats.new_tokens == 64 and stats.prompt_tokens == len(prompt)
    assert stats.prefill_ms > 0 and stats.decode_tokens_per_s > 0


def test_methods_share_weights_and_state(llama, tmp_path) -> None:
    model = llama.Model()
    tokens, start = llama.example_inputs()
    result = export_methods(export, model, {"prefill": (tokens, start),
                                            "decode": (tokens[:, :1], start)}, name="llama")
    size = write_bundle(result, tmp_path / "m.nee")
    weights = sum(p.nbytes for p in model.parameters())
    assert size < 1.1 * weights  # one copy of the weights for both methods
    program = Program.load(tmp_path / "m.nee")
    assert program.methods == ["prefill", "decode"]
    llama.reset(model)
    want = [_eager(llama, model, tokens.numpy(), 0), _eager(llama, model, np.array([[7]]), 8)]
    got = [program.run(tokens.numpy(), np.array([0]))[0].copy(),
           program.method("decode").run(np.array([[7]]), np.array([8]))[0]]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max())
    with pytest.raises(InputError, match="one of"):
        program.method("nope")


class _Counter(torch.nn.Module):
    """State read after its update in one call: written back by a copy at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        old = self.total.clone()
        self.total.add_(x)
        return self.total * 2 + old


def test_state_read_after_its_update_is_copied_back(tmp_path) -> None:
    model = _Counter()
    x = torch.arange(4.0)
    write_bundle(export(model, (x,)), tmp_path / "c.nee")
    program = Program.load(tmp_path / "c.nee")
    model.total.fill_(1)
    for _ in range(3):
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(program.run(x.numpy())[0], want)
    program.reset()
    np.testing.assert_allclose(program.run(x.numpy())[0], [3, 5, 7, 9])


class _Swap(torch.nn.Module):
    """Returns the state's old value (a view of it until the update): kept by a clone."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old = self.last.clone()
        self.last.copy_(x)
        return old, self.last.reshape(3, 1)


def test_an_output_showing_the_old_state_is_kept_before_the_update(tmp_path) -> None:
    write_bundle(export(_Swap(), (torch.ones(3),)), tmp_path / "s.nee")
    program = Program.load(tmp_path / "s.nee")
    for k in range(3):
        old, new = program.run(np.full(3, k + 1.0, np.float32))
        np.testing.assert_array_equal(old, np.full(3, float(k)))
        np.testing.assert_array_equal(new, np.full((3, 1), k + 1.0))


class _MeanPool(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=1, keepdim=True)


def test_buckets_refuse_a_model_that_sees_the_padding() -> None:
    dim = parse_dynamic("x:1=1..8", ["x"])
    with pytest.raises(UnsupportedModelError, match="unchanged by zero padding"):
        export_buckets(export, _MeanPool(), (torch.ones(1, 4, 3),), dim, [4, 8])


@pytest.mark.parametrize("text", ["x=1..8", "x:1=0..8", "y:1=1..8", "x:1=9..8"])
def test_bad_dynamic_specs_are_refused(text: str) -> None:
    with pytest.raises(ExportError, match=r"INPUT:AXIS=MIN\.\.MAX"):
        parse_dynamic(text, ["x"])


@pytest.mark.parametrize("mutate, message", [
    (lambda b: setattr(b.state[1], "offset", b.state[0].offset), "share bytes"),
    (lambda b: setattr(b.state[0], "initial", 0), "initial segment"),
    (lambda b: setattr(b.methods[0].dims[0], "size", 40), "bucket problem"),
    (lambda b: setattr(b.methods[1].dims[0], "min", 2), "bucket problem"),
    (lambda b: setattr(b.methods[0], "name", b.methodName), "distinct method names"),
    (lambda b: setattr(b.methods[1].dims[0], "outputAxes", [-1]), "bucket problem"),
])
def test_forged_state_and_bucket_tables_are_refused(bucketed, tmp_path, mutate, message) -> None:
    bundle, write = _repack(bucketed[2], tmp_path, "forged.nee")
    mutate(bundle)
    with pytest.raises(BundleError, match=message):
        load_bundle(write())


def test_cli_exports_buckets_inspects_state_and_generates(tmp_path) -> None:
    out = tmp_path / "llama.nee"
    done = CliRunner().invoke(export_main, ["examples/llama.py:Model", "-o", str(out),
                                            "--buckets", "seq=1,16"])
    assert done.exit_code == 0, done.output
    assert "buckets [1, 16]" in done.output and "2 methods" in done.output
    shown = CliRunner().invoke(inspect_main, [str(out)])
    assert "state: 524288 B in 8 buffer(s)" in shown.output
    assert "forward[seq=16] (seq in [2, 16])" in shown.output
    ran = CliRunner().invoke(run_main, [str(out), "--generate", "1,2,3", "--max-new-tokens", "5"])
    assert ran.exit_code == 0, ran.output
    assert len(ran.output.split("\n")[0].split()) == 5 and "tokens/s" in ran.output


def test_bundle_io_gates_and_board_build_cover_every_method(tmp_path) -> None:
    out, report = tmp_path / "d.nee", tmp_path / "r.json"
    done = CliRunner().invoke(export_main, [
        "examples/llama.py:Model", "-o", str(out), "--buckets", "seq=1,4", "--bundle-io",
        "--report", str(report), "--max-arena", "1MiB"])
    assert done.exit_code == 0, done.output
    body = json.loads(report.read_text())
    assert body["state_bytes"] == 524288 and [m["name"] for m in body["methods"]] == [
        "forward[seq=1]", "forward[seq=4]"]
    assert body["arenas"][0]["bytes"] == max(m["arenas"]["default"] for m in body["methods"])
    assert body["gates"][0]["value"] == body["arenas"][0]["bytes"] + 524288
    verified = CliRunner().invoke(run_main, [str(out), "--verify"])
    assert verified.exit_code == 0, verified.output
    assert "vector 0 of forward[seq=4] output_0" in verified.output
    assert "2 of 2 output(s) within tolerance" in verified.output


def test_int8_kv_cache_saves_state_and_decodes_like_its_eager_model(llama, tmp_path) -> None:
    model = llama.Int8KvModel()
    dim = module_dim(model, llama.dynamic_shapes())
    write_bundle(export_buckets(export, model, llama.example_inputs(), dim, [1, 8]),
                 tmp_path / "kv8.nee")
    program = Program.load(tmp_path / "kv8.nee")
    assert program.state_bytes == 147456  # int8 rows + float scales, against 524288 B
    prompt = [5, 6, 7]
    assert list(generate(program, prompt, 64)) == llama.eager_generate(model, prompt, 64)
