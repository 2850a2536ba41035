"""Symbolic methods: one program for every size of a dynamic dim in [min, max].

A symbolic method's tables are its program at the dim's max, planned there. Its dim's size
expressions (``SizeExpr``) give every integer that follows the size s (a tensor's shape, strides
or byte offset, a call's integer argument) as c0 + c1 s + c2 s^2. ``at_size`` evaluates them into
the program's tables at size s, which the loader validates like any program before the runtime
prepares its calls (on a size's first run, then kept).
"""

from __future__ import annotations

import copy
from typing import Any

from runtime_py.dataflow import ints
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.Bundle import BundleT
from runtime_py.fbs.SizeField import SizeField

MAX_COEFFS = 3  # c0 + c1 s + c2 s^2
MAX_COEFF = 2**40  # larger coefficients cannot describe a tensor of a loadable bundle
_TENSOR_FIELDS = {SizeField.Shape: "shape", SizeField.Stride: "strides"}


def is_symbolic(prog: Any) -> bool:
    """Whether a program (BundleT view of a method) is a symbolic method."""
    return bool(prog.dims) and bool(prog.dims[0].symbolic)


def value(expr: Any, size: int) -> int:
    """``expr``'s integer at ``size``."""
    return sum(int(c) * size**i for i, c in enumerate(ints(expr.coeffs)))


def expr_problems(prog: Any) -> list[str]:
    """Problems of a symbolic method's size expressions, all listed: each names an integer of
    the tables, once, with one to three bounded coefficients, and gives the stored value at the
    max; each input's dim axis has the expression s."""
    d = prog.dims[0]
    where = f"method {prog.methodName or 'forward'} dim {d.name}"
    if prog.delegates:
        return [f"{where}: {len(prog.delegates)} delegated partition(s) (a symbolic method runs "
                "on the CPU kernels)"]
    problems, seen = [], set()
    for j, e in enumerate(d.exprs or []):
        address = (e.field, e.index, e.arg, e.position)
        coeffs = ints(e.coeffs)
        stored = _stored(prog, e)
        if stored is None:
            problems.append(f"{where} expr {j}: no integer at field {e.field} index {e.index} "
                            f"arg {e.arg} position {e.position}")
        elif not 1 <= len(coeffs) <= MAX_COEFFS or max(map(abs, coeffs)) > MAX_COEFF:
            problems.append(f"{where} expr {j}: coefficients {coeffs[:4]} (1 to {MAX_COEFFS}, "
                            f"each within +-2^40)")
        elif value(e, d.max) != stored:
            problems.append(f"{where} expr {j}: {value(e, d.max)} at size {d.max}, the tables "
                            f"hold {stored}")
        elif address in seen:
            problems.append(f"{where} expr {j}: a second expression for the same integer")
        seen.add(address)
    if not problems:
        problems += _input_problems(prog, where, seen)
    return problems


def _input_problems(prog: Any, where: str, given: set[tuple]) -> list[str]:
    """Each input's dim axis is given by the expression s (checked by the caller's run)."""
    d = prog.dims[0]
    exprs = {(e.field, e.index, e.arg, e.position): ints(e.coeffs) for e in d.exprs or []}
    return [f"{where}: input {j} axis {axis} without the size expression s" for j, (k, axis)
            in enumerate(zip(ints(prog.inputs), ints(d.inputAxes), strict=False))
            if axis >= 0 and exprs.get((SizeField.Shape, k, 0, axis)) != [0, 1]]


def _stored(prog: Any, e: Any) -> int | None:
    """The integer of ``prog``'s tables that ``e`` names, or None if there is none."""
    if e.field in (*_TENSOR_FIELDS, SizeField.ByteOffset):
        tensors = prog.tensors or []
        if e.index >= len(tensors) or e.arg:
            return None
        t = tensors[e.index]
        if e.field == SizeField.ByteOffset:
            return t.byteOffset if e.position == 0 else None
        values = ints(getattr(t, _TENSOR_FIELDS[e.field]))
        return values[e.position] if e.position < len(values) else None
    nodes = prog.nodes or []
    if e.field != SizeField.ArgInt or e.index >= len(nodes):
        return None
    args = nodes[e.index].args or []
    arg = args[e.arg] if e.arg < len(args) else None
    values = ints(arg.ints) if arg is not None and arg.kind in (ArgKind.Int,
                                                                 ArgKind.IntList) else []
    return values[e.position] if e.position < len(values) else None


def at_size(prog: Any, size: int) -> BundleT:
    """A symbolic method's program at ``size``: its tables with every size expression's integer
    replaced (copies of the tensors and nodes they change), static (no dim, no test vectors)."""
    view = BundleT()
    view.__dict__.update(prog.__dict__)
    view.tensors, view.nodes = list(prog.tensors or []), list(prog.nodes or [])
    view.dims, view.testVectors = None, None
    copied: set[tuple[int, ...]] = set()
    for e in prog.dims[0].exprs or []:
        if e.field == SizeField.ArgInt:
            arg = _own_arg(view, copied, e.index, e.arg)
            arg.ints[e.position] = value(e, size)
        elif e.field == SizeField.ByteOffset:
            _own_tensor(view, copied, e.index).byteOffset = value(e, size)
        else:
            getattr(_own_tensor(view, copied, e.index),
                    _TENSOR_FIELDS[e.field])[e.position] = value(e, size)
    return view


def _own_tensor(view: BundleT, copied: set[tuple[int, ...]], k: int) -> Any:
    """Tensor ``k`` of ``view``, copied (with its shape and strides) on first change."""
    if (k,) not in copied:
        t = copy.copy(view.tensors[k])
        t.shape, t.strides = ints(t.shape), ints(t.strides)
        view.tensors[k] = t
        copied.add((k,))
    return view.tensors[k]


def _own_arg(view: BundleT, copied: set[tuple[int, ...]], k: int, a: int) -> Any:
    """Argument ``a`` of node ``k`` of ``view``, copied (with its node) on first change
    (keys: (tensor,) for tensors, (node, -1) and (node, arg) for nodes)."""
    if (k, -1) not in copied:
        node = copy.copy(view.nodes[k])
        node.args = list(node.args)
        view.nodes[k] = node
        copied.add((k, -1))
    if (k, a) not in copied:
        arg = copy.copy(view.nodes[k].args[a])
        arg.ints = ints(arg.ints)
        view.nodes[k].args[a] = arg
        copied.add((k, a))
    return view.nodes[k].args[a]
