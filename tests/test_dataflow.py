"""The loader's layout and dataflow rules (runtime_py/dataflow.py) on small hand-made tables:
what a rewritten offset, storage, alias or node order does to the bytes nodes read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime_py.dataflow import dataflow_problems, layout_problems
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import contiguous_strides

ARENA, CONSTANT = StorageKind.Arena, StorageKind.Constant


def _tensor(storage: int, shape: tuple[int, ...] = (4,), offset: int = 0, alias: int = -1,
            strides: tuple[int, ...] | None = None, kind: int = ARENA, dtype: int = 0):
    return SimpleNamespace(name=f"t{storage}@{offset}", shape=list(shape),
                           strides=list(strides or contiguous_strides(shape)), dtype=dtype,
                           storageKind=kind, storage=storage, byteOffset=offset, aliasOf=alias)


def _node(reads: list[int], writes: list[int]):
    args = [SimpleNamespace(name="self", tensors=[k]) for k in reads]
    args += [SimpleNamespace(name="out", tensors=[k]) for k in writes]
    return SimpleNamespace(op="aten::relu.out", args=args, outputs=writes)


# t0: the input (buffer 0); t1 in buffer 1; t2 in buffer 0 again once t0 is dead (in place).
TENSORS = [_tensor(0), _tensor(1), _tensor(0, alias=0)]


def test_a_sound_program_has_no_problems():
    nodes = [_node([0], [1]), _node([1], [2])]  # t0 dies at step 0; t2 reuses its bytes
    assert dataflow_problems(TENSORS, nodes, [0]) == []
    assert layout_problems(TENSORS) == []


def test_a_tensor_read_before_the_node_writing_it_is_refused():
    problems = dataflow_problems(TENSORS, [_node([1], [2]), _node([0], [1])], [0])
    assert "node 0 aten::relu.out reads tensor 1 (t1@0), written only at step 1" in problems


def test_bytes_overwritten_before_their_last_read_are_refused():
    nodes = [_node([0], [1]), _node([1], [2]), _node([0], [1])]  # t2's write clobbers t0
    problems = dataflow_problems(TENSORS, nodes, [0])
    assert any("tensor 0" in p and "overwritten at step 1 before its last read at step 2" in p
               for p in problems), problems


def test_a_base_tensor_no_node_writes_is_refused():
    tensors = [_tensor(0), _tensor(1), _tensor(2)]
    (problem,) = dataflow_problems(tensors, [_node([1], [2])], [0])
    assert "reads tensor 1 (t1@0), which no node writes" in problem


def test_a_view_reading_bytes_nothing_wrote_is_refused():
    tensors = [_tensor(0), _tensor(1, shape=(8,)), _tensor(1, shape=(4,), offset=16, alias=1),
               _tensor(2)]
    node = _node([2], [3])  # reads the upper half of t1, which nothing wrote
    (problem,) = dataflow_problems(tensors, [node], [0])
    assert "reads tensor 2" in problem and "bytes [16, 32) of which nothing wrote" in problem


@pytest.mark.parametrize(("tensors", "message"), [
    ([_tensor(0), _tensor(0)], "buffer 0 is already tensor 0's"),
    ([_tensor(0, offset=64)], "a base tensor at byte 64 of its storage, not 0"),
    ([_tensor(0, shape=(2, 2), strides=(1, 2))], "not C-contiguous"),
    ([_tensor(0), _tensor(0, offset=2, alias=0)], "byte offset 2 not a multiple of its float32"),
    ([_tensor(0), _tensor(0, alias=1)], "a view of tensor 1, which is not a base tensor"),
    ([_tensor(0), _tensor(0, alias=0), _tensor(0, alias=1)], "which is not a base tensor"),
    ([_tensor(0), _tensor(0, alias=0, kind=CONSTANT)], "in another storage or dtype"),
    ([_tensor(0, shape=(2,)), _tensor(0, shape=(4,), alias=0)],
     "bytes [0, 16) outside its base tensor 0's [0, 8)"),
])
def test_layout_rules(tensors, message):
    problems = layout_problems(tensors)
    assert any(message in p for p in problems), problems
