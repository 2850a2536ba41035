"""Bucketed methods: one entry point exported at several sizes of one dynamic dim.

A bucketed method (``Method.dims``) is the program specialised at one size of the dim. The
runtime runs the smallest bucket at least as large as the caller's size: the inputs are copied
into the first positions along their axis and the rest is zero (the padding), the outputs are
returned cut back to the caller's size. This is exact for models whose outputs at a position do
not depend on later positions (causal models, or models masking by a length input); the toolchain
checks that at export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime_py.dataflow import ints
from runtime_py.format import DTYPES


@dataclass(frozen=True)
class Bucket:
    """A bucketed method's dim: its name and range, this bucket's size, and the axis of each
    input and output that has that size (-1: none). Plain values, no views of a bundle's memory
    map; the exporter fills one per bucket too."""

    name: str
    min: int
    max: int
    size: int
    input_axes: tuple[int, ...]
    output_axes: tuple[int, ...]
    symbolic: bool = False  # one program for the range (runtime_py.symbolic), size == max

    @classmethod
    def of(cls, prog: Any) -> Bucket | None:
        """The bucket of a (validated) program, None if it has no dynamic dim."""
        if not prog.dims:
            return None
        d = prog.dims[0]
        return cls(d.name, d.min, d.max, d.size, tuple(ints(d.inputAxes)),
                   tuple(ints(d.outputAxes)), bool(d.symbolic))


def bucket_problems(programs: Sequence[Any]) -> list[str]:
    """Problems of the bundle's bucketed programs (BundleT views, one per method), all listed:
    each with one dim in range along existing axes of its size; the buckets of one entry point
    alike but for their size, the largest at the dim's max."""
    problems = [p for prog in programs if prog.dims for p in _own_problems(prog)]
    if problems:
        return problems
    groups: dict[str, list[Any]] = {}
    for prog in programs:
        if prog.dims and not prog.dims[0].symbolic:
            groups.setdefault(prog.entry, []).append(prog)
    for entry, group in groups.items():
        problems += _group_problems(entry, group)
    return problems


def signature(prog: Any) -> tuple:
    """What every bucket of an entry shares: the dim's name and range, the input and output
    dtypes, axes and sizes off the axis."""
    d = prog.dims[0]
    return (d.name, d.min, d.max,
            [_io(prog, k, axis) for k, axis in zip(ints(prog.inputs), ints(d.inputAxes),
                                                    strict=True)],
            [_io(prog, k, axis) for k, axis in zip(ints(prog.outputs), ints(d.outputAxes),
                                                    strict=True)])


def _io(prog: Any, k: int, axis: int) -> tuple:
    t = prog.tensors[k]
    shape = ints(t.shape)
    return DTYPES[t.dtype], axis, shape[:axis] + shape[axis + 1:] if axis >= 0 else shape


def _own_problems(prog: Any) -> list[str]:
    where = f"method {prog.methodName}"
    if len(prog.dims) != 1 or bool(prog.entry) == bool(prog.dims[0].symbolic):
        return [f"{where}: {len(prog.dims)} dynamic dims, entry {prog.entry!r} (one dim; an "
                "entry point for a bucket, none for a symbolic method)"]
    d = prog.dims[0]
    if not (d.name and 1 <= d.min <= d.size <= d.max) or (d.symbolic and d.size != d.max):
        return [f"{where}: dim {d.name!r} of size {d.size} in [{d.min}, {d.max}]"
                + (" (a symbolic method's size is the max)" if d.symbolic else "")]
    if d.exprs and not d.symbolic:
        return [f"{where}: size expressions on a bucket's dim"]
    problems = []
    for role, io, axes in (("input", ints(prog.inputs), ints(d.inputAxes)),
                           ("output", ints(prog.outputs), ints(d.outputAxes))):
        if len(axes) != len(io):
            problems.append(f"{where}: {len(axes)} {role} axes for {len(io)} {role}s")
            continue
        tensors = prog.tensors or []
        problems += [f"{where} {role} {j}: axis {axis} of size {d.size}" for j, (k, axis) in
                     enumerate(zip(io, axes, strict=True)) if axis != -1 and not (
                         k < len(tensors) and 0 <= axis < len(ints(tensors[k].shape))
                         and ints(tensors[k].shape)[axis] == d.size)]
    if not problems and max(ints(d.inputAxes), default=-1) < 0:
        problems.append(f"{where}: no input along dim {d.name}")
    return problems


def _group_problems(entry: str, group: list[Any]) -> list[str]:
    sizes = [p.dims[0].size for p in group]
    problems = []
    if len(set(sizes)) != len(sizes) or max(sizes) != group[0].dims[0].max:
        problems.append(f"entry {entry}: buckets {sizes}, distinct, the largest the dim's max "
                        f"{group[0].dims[0].max}")
    first = signature(group[0])
    problems += [f"entry {entry}: method {p.methodName} differs from {group[0].methodName} in "
                 "its dim or its inputs/outputs off the dim" for p in group[1:]
                 if signature(p) != first]
    return problems
