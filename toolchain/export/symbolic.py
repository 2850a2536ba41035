"""Symbolic export: one program for every size of a dynamic dim in [min, max].

The model goes through the whole static pipeline at a few sample sizes. Those programs must be
one program but for integers: tensor shapes, strides and offsets, and integer arguments of
calls. Each integer that differs must be a polynomial of degree <= 2 in the size, fitted on some
samples and checked on the others (a ``SizeExpr``). A constant that differs between the first two
sizes (a folded ``arange(L)`` or causal mask) is computed at run time instead (the samples are
exported again with those calls unfolded). The bundle keeps the program at the max, planned
there, with the expressions (``runtime_py.symbolic`` evaluates them). The written program is then
run at sizes no sample covered and compared with the model in eager mode.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime_py.buckets import Bucket
from toolchain.errors import UnsupportedModelError
from toolchain.export.buckets import (
    DynamicDim,
    Exporter,
    eager_outputs,
    resized,
    restore_buffers,
    snapshot_buffers,
)
from toolchain.export.result import ExportResult
from toolchain.ir import Graph

DEGREE = 2  # the largest polynomial degree fitted (attention scores are [.., L, L])
HINT = "export with --buckets instead (a static program per bucket size)"


@dataclasses.dataclass(frozen=True)
class SizeExpr:
    """An integer of the program that follows the dim's size s: sum(coeffs[i] * s**i).
    ``field`` is "shape", "stride" or "offset" (bytes) of tensor ``target`` or "arg" of node
    ``target`` (its index), ``arg`` the argument's name, ``position`` the list element."""

    field: str
    target: str | int
    arg: str
    position: int
    coeffs: tuple[int, ...]


def sample_sizes(dim: DynamicDim) -> list[int]:
    """The sizes exported to fit the expressions, the max first: from 2 up (torch.export
    specialises size 1, e.g. a transpose of one row is a view there), at least five."""
    low = max(dim.min, 2)
    sizes = sorted({dim.max, dim.max - 1, (low + dim.max) // 2, low, low + 1}, reverse=True)
    sizes = [s for s in sizes if low <= s <= dim.max]
    if len(sizes) < 5:
        raise UnsupportedModelError(f"dim {dim.name} in [{dim.min}, {dim.max}]",
                                    "at least five sizes from 2 to fit a symbolic program",
                                    f"{len(sizes)}", HINT)
    return sizes


def export_symbolic(export: Exporter, model: torch.nn.Module, example_inputs: tuple[Any, ...],
                    dim: DynamicDim, **options: Any) -> ExportResult:
    """Export ``model`` once for every size of ``dim`` (see the module docstring) with
    ``export`` (toolchain.export.export and its options)."""
    state = snapshot_buffers(model)
    sizes = sample_sizes(dim)

    def at(size: int, run_time: frozenset[str] = frozenset()) -> ExportResult:
        restore_buffers(model, state)
        return export(model, resized(example_inputs, dim, size), run_time=run_time,
                      static_shapes=False, **options)

    results = {size: at(size) for size in sizes[:2]}
    run_time = _size_dependent([r.graph for r in results.values()])
    if run_time:
        results = {}
    results.update({size: at(size, run_time) for size in sizes if size not in results})
    restore_buffers(model, state)
    exprs = size_exprs({size: r.graph for size, r in results.items()})
    graph = results[dim.max].graph
    follows = {(e.target, e.position) for e in exprs if e.field == "shape" and e.coeffs == (0, 1)}
    axes = tuple(next((a for a in range(len(graph.tensors[name].shape)) if (name, a) in follows),
                      -1) for name in graph.outputs)
    bucket = Bucket(dim.name, dim.min, dim.max, dim.max,
                    tuple(dim.axis(i) for i in range(len(example_inputs))), axes, symbolic=True)
    result = dataclasses.replace(results[dim.max], dim=bucket, exprs=exprs)
    _check_unsampled(model, example_inputs, dim, result, [*results], state)
    return result


def size_exprs(graphs: dict[int, Graph]) -> tuple[SizeExpr, ...]:
    """The expressions of the integers that differ between the programs exported at each size
    (the max first); UnsupportedModelError if they are not one program."""
    sizes = list(graphs)
    first = graphs[sizes[0]]
    if first.delegates:
        raise UnsupportedModelError("a symbolic program", "CPU calls only",
                                    f"{len(first.delegates)} NPU partition(s)",
                                    "export with --buckets or for a board without an NPU")
    skeletons = {size: list(_skeleton(g)) for size, g in graphs.items()}
    for size in sizes[1:]:
        _same_program(skeletons[sizes[0]], skeletons[size], sizes[0], size)
    _check_constants(graphs)
    values = {size: dict(_integers(g)) for size, g in graphs.items()}
    exprs = []
    for address, top in values[sizes[0]].items():
        found = [values[size][address] for size in sizes]
        if found.count(top) == len(found):
            continue
        coeffs = fit(sizes, found)
        if coeffs is None:
            raise UnsupportedModelError(
                _describe(first, address), f"a polynomial of degree <= {DEGREE} in the size",
                ", ".join(f"{v} at {s}" for s, v in zip(sizes, found, strict=True)), HINT)
        exprs.append(SizeExpr(*address, coeffs))
    return tuple(exprs)


def fit(xs: list[int], ys: list[int]) -> tuple[int, ...] | None:
    """Integer coefficients of the lowest-degree polynomial (<= DEGREE) through every (x, y),
    from its first points, or None."""
    for degree in range(DEGREE + 1):
        coeffs = _solve([[Fraction(x) ** i for i in range(degree + 1)] for x in xs[:degree + 1]],
                        [Fraction(y) for y in ys[:degree + 1]])
        if all(c.denominator == 1 for c in coeffs) and all(
                sum(c * x**i for i, c in enumerate(coeffs)) == y for x, y in zip(xs, ys,
                                                                                  strict=True)):
            while len(coeffs) > 1 and coeffs[-1] == 0:
                coeffs.pop()
            return tuple(int(c) for c in coeffs)
    return None


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction]:
    """Solve the square (Vandermonde, distinct points) system exactly by elimination."""
    n = len(rows)
    a = [[*row, v] for row, v in zip(rows, rhs, strict=True)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if a[r][col] != 0)
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col and a[r][col] != 0:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def _skeleton(g: Graph) -> Iterator[tuple[Any, ...]]:
    """Everything of a program but its integers, in order: what every size must share."""
    yield "io", tuple(g.inputs), tuple(g.outputs), tuple(g.output_names)
    for t in g.tensors.values():
        yield "tensor", t.name, t.dtype, t.kind, t.view_of, len(t.shape), t.quant, t.tier
    for k, node in enumerate(g.nodes):
        yield ("node", k, node.op, tuple(node.outputs), node.source,
               tuple((name, _shape_of(v)) for name, v in node.args.items()))


def _shape_of(value: Any) -> Any:
    """An argument with its integers (not bools) replaced by one marker."""
    if isinstance(value, (list, tuple)):
        return tuple(_shape_of(v) for v in value)
    return "<int>" if isinstance(value, int) and not isinstance(value, bool) else value


def _integers(g: Graph) -> Iterator[tuple[tuple[str, str | int, str, int], int]]:
    """(address, value) of every integer that may follow the size, as the bundle stores it;
    a scratch workspace keeps its largest size (a kernel may use more scratch than it needs)."""
    for t in g.tensors.values():
        if t.kind == "scratch":
            continue
        yield from ((("shape", t.name, "", i), n) for i, n in enumerate(t.shape))
        yield from ((("stride", t.name, "", i), n) for i, n in enumerate(t.element_strides()))
        yield ("offset", t.name, "", 0), t.offset * np.dtype(t.dtype).itemsize
    for k, node in enumerate(g.nodes):
        for name, value in node.args.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            yield from ((("arg", k, name, i), v) for i, v in enumerate(values)
                        if isinstance(v, int) and not isinstance(v, bool))


def _same_program(want: list[tuple], got: list[tuple], top: int, size: int) -> None:
    """The programs at two sizes agree but for integers; else name the first difference."""
    for a, b in zip(want, got, strict=False):
        if a != b:
            raise UnsupportedModelError(
                f"{a[0]} {a[1]}" + (f" ({a[2]} at {a[4] or '?'})" if a[0] == "node" else ""),
                "the same program at every size but for integers", _difference(a, b, top, size),
                HINT)
    if len(want) != len(got):
        raise UnsupportedModelError("the program", f"{len(want)} tensors and nodes (at {top})",
                                    f"{len(got)} at size {size}", HINT)


def _size_dependent(graphs: list[Graph]) -> frozenset[str]:
    """The constants (and views of them) whose values differ between the graphs."""
    first, *others = graphs
    differ = {name for name, t in first.tensors.items() if t.data is not None and any(
        not _same_data(t, g.tensors.get(name)) for g in others)}
    return frozenset(name for name, t in first.tensors.items()
                     if name in differ or t.view_of in differ)


def _same_data(t: Any, other: Any) -> bool:
    return other is not None and other.data is not None and other.data.shape == t.data.shape \
        and np.array_equal(other.data, t.data)


def _difference(a: tuple, b: tuple, top: int, size: int) -> str:
    """What differs between two skeleton items (a node's first differing argument)."""
    if a[0] == b[0] == "node" and a[:5] == b[:5]:
        name, value, other = next((x[0], x[1], y[1]) for x, y in zip(a[5], b[5], strict=False)
                                  if x != y)
        return f"argument {name} = {other!r} at size {size}, {value!r} at {top}"
    return f"{b[:3]} at size {size}, {a[:3]} at {top}"


def _check_constants(graphs: dict[int, Graph]) -> None:
    """Each constant (and initial state) the same at every size."""
    sizes = list(graphs)
    top = graphs[sizes[0]]
    for name, t in top.tensors.items():
        size = next((s for s in sizes[1:] if t.data is not None
                     and not _same_data(t, graphs[s].tensors[name])), None)
        if size is not None:
            data = graphs[size].tensors[name].data
            raise UnsupportedModelError(
                f"constant {name}", "the same values at every size (a value computed from the "
                f"size is computed at run time when it differs between sizes {sizes[:2]})",
                f"{data.dtype}{list(data.shape)} at size {size} unlike "
                f"{t.data.dtype}{list(t.data.shape)} at {sizes[0]}", HINT)


def _describe(g: Graph, address: tuple[str, str | int, str, int]) -> str:
    field, target, arg, position = address
    if field == "arg":
        node = g.nodes[target]
        return f"argument {arg}[{position}] of {node.op} at {node.source or '?'}"
    producer = next((n for n in g.nodes if target in n.outputs), None)
    where = f" (from {producer.op} at {producer.source or '?'})" if producer else ""
    return f"{field} {position} of tensor {target}{where}"


def _check_unsampled(model: torch.nn.Module, example_inputs: tuple[Any, ...], dim: DynamicDim,
                     result: ExportResult, sampled: list[int],
                     state: dict[str, torch.Tensor]) -> None:
    """Run the written program at sizes no sample covered (the min and others between the
    samples) and compare with the model in eager mode."""
    from runtime_py.program import Program
    from toolchain.serialize.bundle import write_bundle

    low = max(dim.min, 2)
    sizes = sorted({dim.min, dim.min + 1, low + 2, (low + dim.max) // 2 + 1, dim.max - 2}
                   - set(sampled))
    with tempfile.TemporaryDirectory() as folder:
        write_bundle(result, Path(folder) / "symbolic.nee")
        with Program.load(Path(folder) / "symbolic.nee") as program:
            for size in (s for s in sizes if dim.min <= s <= dim.max):
                inputs = resized(example_inputs, dim, size)
                want = eager_outputs(model, inputs, state)
                program.reset()
                got = program.run(*(x.numpy() for x in inputs))
                _compare(dim, size, want, got)
    restore_buffers(model, state)


def _compare(dim: DynamicDim, size: int, want: list[torch.Tensor], got: list[np.ndarray]) -> None:
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        w = w.numpy()
        scale = float(np.abs(w).max()) if w.size and w.dtype.kind == "f" else 1.0
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-4, atol=1e-5 * max(scale, 1.0)):
            raise UnsupportedModelError(
                f"symbolic program of dim {dim.name}", f"output {k} at size {size} as the model "
                "computes it", f"shape {list(g.shape)} (model {list(w.shape)})" if
                g.shape != w.shape else "other values", HINT)

