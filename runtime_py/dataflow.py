"""The loader's layout and dataflow checks: where each tensor's bytes are, and that every byte
a node reads was written before it and not overwritten since.

A bundle's tensors are values, each written once: a base tensor owns its storage (an arena
buffer or a constant segment) from byte 0, C-contiguous; a view (``alias_of``) lies inside its
base. Nodes run in order; a tensor is read from the bytes its writers left. These checks turn a
rewritten storage index, byte offset, alias or storage kind, and nodes reordered or dropped,
into a refusal instead of a run on stale or uninitialized memory. They return problems (text),
the loader raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import DTYPES, SCRATCH_ARGS, contiguous_strides

_KINDS = {StorageKind.Arena: "buffer", StorageKind.Constant: "segment",
          StorageKind.Delegate: "workspace"}


def ints(values: object) -> list[int]:
    """A flatbuffer vector (numpy array, list or None) as a list of Python ints."""
    return [] if values is None else [int(v) for v in values]


def extent(t: Any) -> tuple[int, int]:
    """The bytes [lo, hi) of its storage that tensor ``t`` spans (hi == lo when empty)."""
    shape = ints(t.shape)
    if 0 in shape:
        return t.byteOffset, t.byteOffset
    last = sum((n - 1) * s for n, s in zip(shape, ints(t.strides), strict=True))
    return t.byteOffset, t.byteOffset + (last + 1) * np.dtype(DTYPES[t.dtype]).itemsize


def layout_problems(tensors: Sequence[Any]) -> list[str]:
    """Bases own their storage (one per buffer or segment, at byte 0, C-contiguous; delegate
    workspaces hold several), views lie inside a base of their dtype, offsets are aligned."""
    owners: dict[tuple[int, int], int] = {}
    problems = []
    for i, t in enumerate(tensors):
        what = f"tensor {i} ({t.name})"
        if t.byteOffset % np.dtype(DTYPES[t.dtype]).itemsize:
            problems.append(f"{what}: byte offset {t.byteOffset} not a multiple of its "
                            f"{DTYPES[t.dtype]} size")
        elif t.aliasOf < 0:
            problems += _base_problems(what, i, t, owners)
        else:
            problems += _view_problems(what, i, t, tensors)
    return problems


def _base_problems(what: str, i: int, t: Any, owners: dict[tuple[int, int], int]) -> list[str]:
    key = (t.storageKind, t.storage)
    problems = []
    if ints(t.strides) != list(contiguous_strides(ints(t.shape))):
        problems.append(f"{what}: a base tensor with strides {ints(t.strides)}, not C-contiguous")
    if t.storageKind != StorageKind.Delegate:
        if t.byteOffset:
            problems.append(f"{what}: a base tensor at byte {t.byteOffset} of its storage, not 0")
        if key in owners:
            problems.append(f"{what}: {_KINDS.get(t.storageKind, 'storage')} {t.storage} is "
                            f"already tensor {owners[key]}'s")
        owners[key] = i
    return problems


def _view_problems(what: str, i: int, t: Any, tensors: Sequence[Any]) -> list[str]:
    k = t.aliasOf
    base = tensors[k] if k < len(tensors) and k != i else None
    if base is None or base.aliasOf >= 0:
        return [f"{what}: a view of tensor {k}, which is not a base tensor"]
    if (base.storageKind, base.storage, base.dtype) != (t.storageKind, t.storage, t.dtype):
        return [f"{what}: a view of tensor {k} in another storage or dtype"]
    (lo, hi), (base_lo, base_hi) = extent(t), extent(base)
    if lo < hi and not base_lo <= lo < hi <= base_hi:
        return [f"{what}: bytes [{lo}, {hi}) outside its base tensor {k}'s [{base_lo}, {base_hi})"]
    return []


def dataflow_problems(tensors: Sequence[Any], nodes: Sequence[Any], given: Sequence[int],
                      where: str = "node") -> list[str]:
    """Run ``nodes`` in order on paper, ``given`` tensors written beforehand (graph or delegate
    inputs). A tensor a node writes is read only after that write, its bytes not overwritten
    in between; a view read without being written must lie in bytes its base's earlier writes
    left, not overwritten between its reads; a base no node writes is never read."""
    writes: dict[tuple[int, int], list[_Write]] = {}  # storage -> writes in step order
    written: dict[int, int] = {}  # tensor -> the step writing it
    reads: dict[int, list[int]] = {}  # tensor -> steps reading it
    for k in given:
        _record(writes, written, tensors, k, -1)
    for step, node in enumerate(nodes):
        outs = set(ints(node.outputs))
        for arg in node.args or []:
            for k in ints(arg.tensors):
                if arg.name in SCRATCH_ARGS:
                    _record(writes, written, tensors, k, step)
                elif k not in outs and tensors[k].storageKind != StorageKind.Constant:
                    reads.setdefault(k, []).append(step)
        for k in outs:
            _record(writes, written, tensors, k, step)
    problems = []
    for k, steps in reads.items():
        t = tensors[k]
        what = f"{where} {steps[0]} {nodes[steps[0]].op} reads tensor {k} ({t.name})"
        others = [w for w in writes.get((t.storageKind, t.storage), []) if w.tensor != k]
        if k in written:
            problem = _written_problem(what, t, written[k], steps, others)
        elif t.aliasOf < 0:
            problem = f"{what}, which no node writes"
        else:  # a view of a written base: read what its base's writes left
            problem = _view_problem(what, t, steps, others)
        problems += [problem] if problem else []
    return problems


@dataclass(frozen=True)
class _Write:
    step: int
    lo: int
    hi: int
    tensor: int
    base: int  # the tensor owning the bytes written (itself, or the base of a view)


def _record(writes: dict[tuple[int, int], list[_Write]], written: dict[int, int],
            tensors: Sequence[Any], k: int, step: int) -> None:
    t = tensors[k]
    written.setdefault(k, step)
    base = t.aliasOf if t.aliasOf >= 0 else k
    writes.setdefault((t.storageKind, t.storage), []).append(_Write(step, *extent(t), k, base))


def _overwritten(t: Any, start: int, end: int, others: list[_Write]) -> int | None:
    """The first step in [start, end) at which another tensor's write overlaps ``t``."""
    lo, hi = extent(t)
    return min((w.step for w in others if start <= w.step < end and w.lo < hi and lo < w.hi),
               default=None)


def _written_problem(what: str, t: Any, step: int, reads: list[int],
                     others: list[_Write]) -> str | None:
    if step >= reads[0]:
        return f"{what}, written only at step {step}"
    clobber = _overwritten(t, step, reads[-1], others)
    if clobber is not None:
        return f"{what} (written at step {step}), overwritten at step {clobber} before its " \
               f"last read at step {reads[-1]}"
    return None


def _view_problem(what: str, t: Any, reads: list[int], others: list[_Write]) -> str | None:
    lo, hi = extent(t)
    covered = lo
    for w in sorted((w for w in others if w.base == t.aliasOf and w.step < reads[0]
                     and w.lo < hi and lo < w.hi), key=lambda w: w.lo):
        if w.lo > covered:
            break
        covered = max(covered, w.hi)
    if covered < hi:
        return f"{what}, bytes [{covered}, {hi}) of which nothing wrote before"
    clobber = _overwritten(t, reads[0], reads[-1], others)
    if clobber is not None:
        return f"{what}, overwritten at step {clobber} before its last read at step {reads[-1]}"
    return None
