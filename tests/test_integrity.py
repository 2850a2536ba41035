"""Integrity at load (CRC-32 of the flatbuffer and of every segment), the opt-out for trusted
storage, and a Program's lifetime: one run at a time, close() and the context manager."""

from __future__ import annotations

import random
import struct
import threading
import zlib

import numpy as np
import pytest
import torch
from bundle_fuzz import repacked

from runtime_py.errors import (
    BundleError,
    InputError,
    NeeError,
    ProgramBusyError,
    ProgramClosedError,
)
from runtime_py.format import FOOTER_BYTES
from runtime_py.loader import load_bundle
from runtime_py.program import Program


@pytest.fixture
def mlp(exported):
    return exported("mlp")


def _regions(path) -> tuple[int, list[tuple[int, int]]]:
    """End of the flatbuffer, and the [start, end) byte range of every segment."""
    loaded = load_bundle(path)
    head = 4 + int.from_bytes(loaded.data[:4], "little")
    segments = [(loaded.segment_base + s.offset, loaded.segment_base + s.offset + s.size)
                for s in loaded.bundle.segments]
    return head, segments


@pytest.mark.parametrize("seed", range(4))
def test_any_flipped_bit_in_used_bytes_is_refused(mlp, tmp_path, seed):
    data = mlp.path.read_bytes()
    head, segments = _regions(mlp.path)
    used = [(0, head), *segments, (len(data) - FOOTER_BYTES, len(data))]
    rng = random.Random(seed)
    for _ in range(60):
        start, end = rng.choice(used)
        at = rng.randrange(start, end)
        mutated = bytearray(data)
        mutated[at] ^= 1 << rng.randrange(8)
        path = tmp_path / "bad.nee"
        path.write_bytes(mutated)
        with pytest.raises(BundleError, match=r"CRC-32|footer|identifier|NEE bundle|truncated"):
            Program.load(path)


def test_damaged_weights_name_the_segment_and_the_opt_out_skips_only_them(mlp, tmp_path):
    data = bytearray(mlp.path.read_bytes())
    head, segments = _regions(mlp.path)
    start, _ = segments[0]
    data[start] ^= 0x40
    path = tmp_path / "weights.nee"
    path.write_bytes(data)
    with pytest.raises(BundleError, match=r"1 segment\(s\): .*segment 0 \(CRC-32"):
        Program.load(path)
    Program.load(path, verify_segments=False)  # trusted storage: loads (and would run on them)
    data[head - 1] ^= 0x01  # the flatbuffer is always checked
    path.write_bytes(data)
    with pytest.raises(BundleError, match=r"flatbuffer CRC-32"):
        Program.load(path, verify_segments=False)


def test_footer_must_match_the_flatbuffer(mlp, tmp_path):
    data = mlp.path.read_bytes()
    head, _ = _regions(mlp.path)
    wrong = data[:-4] + struct.pack("<I", zlib.crc32(data[:head]) ^ 1)
    (tmp_path / "footer.nee").write_bytes(wrong)
    with pytest.raises(BundleError, match="flatbuffer CRC-32"):
        Program.load(tmp_path / "footer.nee")
    (tmp_path / "old.nee").write_bytes(data[:-FOOTER_BYTES])  # as schema 1 wrote them
    with pytest.raises(BundleError, match=r"footer .*older NEE \(bundle schema below 2\)"):
        Program.load(tmp_path / "old.nee")


def test_close_releases_the_map_and_the_program_refuses_to_run(mlp):
    program = Program.load(mlp.path)
    first = program.run(*mlp.inputs)[0].copy()
    data = program.loaded.data
    program.close()
    assert data.closed and program.closed
    with pytest.raises(ProgramClosedError, match="closed"):
        program.run(*mlp.inputs)
    program.close()  # twice is fine
    with Program.load(mlp.path) as again:
        np.testing.assert_array_equal(again.run(*mlp.inputs)[0], first)
        data = again.loaded.data
    assert data.closed


def test_a_second_run_while_one_is_in_progress_fails_at_once(mlp):
    program = Program.load(mlp.path)
    # program._busy held: a run in progress on another thread
    with program._busy, pytest.raises(ProgramBusyError, match="one run at a time"):
        program.run(*mlp.inputs)
    program.run(*mlp.inputs)


def test_threads_sharing_a_program_get_results_or_a_nee_error(mlp):
    program = Program.load(mlp.path)
    want = program.run(*mlp.inputs)[0].copy()
    outcomes: list[str] = []

    def hammer() -> None:
        for _ in range(200):
            try:
                program.run(*mlp.inputs)
                outcomes.append("ran")
            except ProgramBusyError:
                outcomes.append("busy")
            except Exception as e:  # anything else is a failure of this test
                outcomes.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(outcomes) <= {"ran", "busy"} and "ran" in outcomes
    np.testing.assert_array_equal(program.run(*mlp.inputs)[0], want)
    assert issubclass(ProgramBusyError, NeeError)


# -- structured rewrites, re-packed as valid bundles (checksums recomputed) -------------------


def _rewritten(exported_model, tmp_path, mutate) -> str:
    path = tmp_path / "rewritten.nee"
    path.write_bytes(repacked(exported_model.path.read_bytes(), mutate))
    return str(path)


def _huge_arena(b):
    b.plan.arenas[0].size = 1 << 35


def _swap_nodes(b):
    b.nodes[0], b.nodes[1] = b.nodes[1], b.nodes[0]


def _zero_stride(b):
    conv = next(n for n in b.nodes if "conv" in n.op)
    next(a for a in conv.args if a.name == "stride").ints = [0, 0]


def _negative_padding(b):
    conv = next(n for n in b.nodes if "conv" in n.op)
    next(a for a in conv.args if a.name == "padding").ints = [-5, -5]


def _weight_in_arena(b):
    weight = next(t for t in b.tensors if t.storageKind == 1 and t.aliasOf < 0)
    weight.storageKind, weight.storage = 0, 0


def _misaligned_view(b):
    view = next(t for t in b.tensors if t.aliasOf >= 0 and t.dtype == 0 and t.strides[-1] == 1)
    view.byteOffset += 2
    view.shape = [*view.shape[:-1], view.shape[-1] - 1]  # still inside its storage


def _overlapping_segments(b):
    b.segments[1].offset = b.segments[0].offset


def _huge_broadcast_view(b):
    """A zero-stride view of 2^31 rows: inside its storage, but a node would loop for hours."""
    view = next(t for t in b.tensors if t.aliasOf >= 0)
    view.shape = [1 << 31, *view.shape[1:]]
    view.strides = [0, *view.strides[1:]]


@pytest.mark.parametrize("mutate, message", [
    (_overlapping_segments, r"segments 0 and 1: expected disjoint byte ranges"),
    (_huge_broadcast_view, r"expected at most \d+ elements .* found shape \[2147483648"),
    (_weight_in_arena, r"tensor layout problem.*buffer 0 is already tensor \d+'s"),
    (_misaligned_view, r"byte offset \d+ not a multiple of its float32 size"),
    (_huge_arena, r"arena sizes: expected each the size its buffers need.*34359738368 B"),
    (_swap_nodes, r"lifetime problem\(s\): .*outside its buffer's steps"),
    (_zero_stride, r"strides, dilations, groups and kernel sizes >= 1 .*stride=\[0, 0\]"),
    (_negative_padding, r"paddings >= 0.*padding=\[-5, -5\]"),
])
def test_semantic_rewrites_are_refused(exported, tmp_path, mutate, message):
    with pytest.raises(BundleError, match=message):
        Program.load(_rewritten(exported("cnn"), tmp_path, mutate))


def test_caller_bounds_the_arena(mlp):
    need = Program.load(mlp.path).arena_bytes
    Program.load(mlp.path, max_arena_bytes=need)
    with pytest.raises(BundleError, match=rf"at most {need - 1} bytes \(the caller's limit\)"):
        Program.load(mlp.path, max_arena_bytes=need - 1)


class _Embed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e = torch.nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.e(ids).sum(1)


def test_token_ids_out_of_range_are_an_input_error_naming_the_call(tmp_path):
    from toolchain.export import export
    from toolchain.serialize.bundle import write_bundle

    write_bundle(export(_Embed().eval(), (torch.tensor([[1, 2, 3]]),)), tmp_path / "e.nee")
    program = Program.load(tmp_path / "e.nee")
    with pytest.raises(InputError, match=r"aten::embedding\.out at \S*test_integrity\.py:\d+: "
                                         r".*token ids.*found IndexError: index out of range"):
        program.run(np.array([[1, 20, 3]]))
    assert program.run(np.array([[1, 2, 3]]))[0].shape == (1, 4)  # the program is still usable
