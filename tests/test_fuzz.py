"""The loader under the fuzzer (tests/bundle_fuzz.py): byte-level damage is always refused;
rewritten fields never escape as anything but a NeeError."""

from __future__ import annotations

import pytest
import torch
from bundle_fuzz import fuzz

from toolchain.export import export
from toolchain.export.buckets import export_buckets, parse_dynamic
from toolchain.export.symbolic import export_symbolic
from toolchain.serialize.bundle import write_bundle


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_byte_level_mutations_are_refused_or_harmless(exported, name):
    counts = fuzz(exported(name).path, 1500, "bytes", seed=1)
    assert set(counts) <= {"refused", "same"}, counts
    assert counts["refused"] > 1400


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_field_rewrites_are_refused_or_run_without_crashing(exported, name):
    """Re-packed with valid checksums, a rewrite may be a different valid program ("changed"),
    but never an exception other than a NeeError, a hang or a read of unwritten memory."""
    counts = fuzz(exported(name).path, 1000, "fields", seed=11)
    assert {k.split(":")[0] for k in counts} <= {"refused", "same", "changed"}, counts


def test_forged_xnnpack_payloads_are_refused_or_run(tmp_path):
    """Bit flips and overwrites in an XNNPACK partition's .tflite, checksums recomputed, reach
    LiteRT: its flatbuffer verifier and checks refuse some (a BundleError); the rest load and
    run a forged model ("changed"); none crashes, hangs or reads unwritten memory."""
    pytest.importorskip("ai_edge_litert")
    from tests.conftest import load_example
    from toolchain.boards import load_board

    module = load_example("cnn")
    path = tmp_path / "cnn.nee"
    write_bundle(export(module.Model().eval(), module.example_inputs(),
                        board=load_board("rpi5")), path)
    counts = fuzz(path, 300, "payload", seed=4)
    assert set(counts) <= {"refused", "same", "changed", "changed: payload segment"}, counts
    assert counts["refused"] > 0 and sum(counts[k] for k in ("refused", "same", "changed")) == 300


class _TinyDecoder(torch.nn.Module):
    """A cache of 8 positions written with index_copy_ and attended under a causal mask."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)
        self.register_buffer("cache", torch.zeros(1, 8, 8), persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        pos = start_pos + torch.arange(tokens.shape[1])
        self.cache.index_copy_(1, pos, x)
        mask = torch.arange(8)[None, :] <= pos[:, None]
        scores = (x @ self.cache.transpose(1, 2)).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ self.cache


def _decoder(tmp_path_factory, dims: str, how, *args):
    """The tiny decoder with state, its token dim ``dims`` exported by ``how``."""
    dim = parse_dynamic(f"tokens:1={dims}", ["tokens", "start_pos"])
    inputs = (torch.tensor([[1, 2]]), torch.tensor([0]))
    path = tmp_path_factory.mktemp("decoder") / "decoder.nee"
    write_bundle(how(export, _TinyDecoder(), inputs, dim, *args), path)
    return path


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """The tiny decoder with buckets 1 and 4 of its token dim."""
    return _decoder(tmp_path_factory, "1..4", export_buckets, [1, 4])


def test_state_and_bucket_rewrites_are_refused_or_run_without_crashing(decoder):
    """The same promise for the state table, the buckets and every method's program."""
    counts = fuzz(decoder, 1000, "fields", seed=5)
    assert {k.split(":")[0] for k in counts} <= {"refused", "same", "changed"}, counts
    assert counts["refused"] > 600


def test_byte_damage_of_a_bundle_with_state_and_methods_is_refused(decoder):
    counts = fuzz(decoder, 500, "bytes", seed=2)
    assert set(counts) <= {"refused", "same"}, counts


@pytest.fixture(scope="module")
def symbolic_decoder(tmp_path_factory):
    """The tiny decoder as one symbolic program for 1 to 8 tokens."""
    return _decoder(tmp_path_factory, "1..8", export_symbolic)


def test_size_expression_rewrites_are_refused_or_run_without_crashing(symbolic_decoder):
    """Runs at the max and the min of the symbolic method on every case."""
    counts = fuzz(symbolic_decoder, 1000, "fields", seed=7)
    assert {k.split(":")[0] for k in counts} <= {"refused", "same", "changed"}, counts
    assert counts["refused"] > 500


def test_byte_damage_of_a_symbolic_bundle_is_refused(symbolic_decoder):
    counts = fuzz(symbolic_decoder, 500, "bytes", seed=3)
    assert set(counts) <= {"refused", "same"}, counts
