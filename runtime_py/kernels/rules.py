"""Shape and dtype rules (``Kernel.check``): the shapes and dtypes torch's functional op returns
for a call's inputs and scalar arguments, checked when the call is bound (at load).

A rule takes the kernel's arguments by name (ignoring those it does not need) and raises
ValueError, naming the inputs' and the out's shapes and dtypes, unless each out has exactly the
shape and dtype torch gives; TypeError for an argument of the wrong kind; NotImplementedError
for a call torch accepts that the kernel does not implement. Rules read shapes, dtypes and
scalar arguments, never tensor values.

Type promotion (``result_type``) is torch's: the highest category (bool < integer < floating)
among the operands wins; within it, the dimensioned tensors' dtypes promote if any is in it, else
the 0-d tensors', else the Python scalars' (an int is int64, a float float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

Rule = Callable[..., None]
Shape = tuple[int, ...]
Result = Callable[[np.dtype], np.dtype]  # the promoted inputs' dtype -> the out dtype

BOOL, INT8, INT32, INT64, FLOAT32 = map(np.dtype, ("bool", "int8", "int32", "int64", "float32"))
INDEX = frozenset({INT64, INT32})  # index tensors torch takes
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}  # bool < integer < floating


def describe(value: Any) -> str:
    """``float32[3, 4]`` for a tensor, a list of those, or the value's repr."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, list):
        return f"[{', '.join(map(describe, value))}]"
    return repr(value)


def _named(inputs: dict[str, Any]) -> str:
    return ", ".join(f"{name} {describe(value)}" for name, value in inputs.items())


def refuse(inputs: dict[str, Any], why: str) -> NoReturn:
    """Raise ValueError: ``inputs`` (named) and what is wrong with them."""
    raise ValueError(f"{_named(inputs)}: {why}")


def expect(out: Any, shape: Sequence[int], dtype: np.dtype | str, inputs: dict[str, Any],
           name: str = "out") -> None:
    """ValueError unless the out ``name`` has ``shape`` and ``dtype`` (torch's for ``inputs``)."""
    tensor(out, name)
    if out.shape != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"{_named(inputs)} give {name} {np.dtype(dtype)}{list(shape)}, "
                         f"not {describe(out)}")


def tensor(value: Any, name: str, dtypes: frozenset[np.dtype] | None = None) -> np.ndarray:
    """``value``, which must be a tensor (TypeError) of one of ``dtypes`` if given (ValueError)."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} is {describe(value)}, not a tensor")
    if dtypes is not None and value.dtype not in dtypes:
        raise ValueError(f"{name} {describe(value)}: a tensor of "
                         f"{' or '.join(sorted(d.name for d in dtypes))} expected")
    return value


def integer(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """``value``, which must be an int (TypeError) in [low, high] (ValueError)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} is {value!r}, not an int")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} {value} outside [{low}, {high}]")
    return value


def number(value: Any, name: str) -> int | float | bool:
    """``value``, which must be a Python number (TypeError)."""
    if not isinstance(value, int | float):
        raise TypeError(f"{name} is {value!r}, not a number")
    return value


def ints(value: Any, name: str, low: int | None = None) -> tuple[int, ...]:
    """An int list (or one int) as a tuple, each at least ``low``."""
    values = (value,) if isinstance(value, int) else value
    if not isinstance(values, tuple | list):
        raise TypeError(f"{name} is {value!r}, not an int list")
    return tuple(integer(v, name, low) for v in values)


def axis(dim: Any, ndim: int) -> int:
    """``dim`` in [0, ndim) from torch's range [-ndim, ndim) (a 0-d tensor's is [-1, 0])."""
    n = max(ndim, 1)
    return integer(dim, "dim", -n, n - 1) % n


def axes(dim: Sequence[int] | int | None, ndim: int, empty_all: bool = True) -> tuple[int, ...]:
    """The distinct dims a reduction over ``dim`` reduces: None means all, so does an empty list
    (none if not ``empty_all``). NotImplementedError for dims of a 0-d tensor."""
    if dim is None:
        return tuple(range(ndim))
    dims = ints(dim, "dim")
    if not dims:
        return tuple(range(ndim)) if empty_all else ()
    if ndim == 0:
        raise NotImplementedError(f"dim {list(dims)} of a 0-d tensor")
    found = tuple(axis(d, ndim) for d in dims)
    if len(set(found)) < len(found):
        raise ValueError(f"dim {list(dims)} names a dim twice")
    return found


def broadcast(inputs: dict[str, Any]) -> Shape:
    """The broadcast shape of the tensors (and scalars) ``inputs``; ValueError if none."""
    try:
        return np.broadcast_shapes(*(np.shape(v) for v in inputs.values()))
    except ValueError:
        refuse(inputs, "shapes that do not broadcast")


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (without enlarging it)."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def _category(dtype: np.dtype) -> int:
    if dtype.kind not in _CATEGORY:
        raise TypeError(f"{dtype} tensors are not supported")
    return _CATEGORY[dtype.kind]


def promote(a: np.dtype | None, b: np.dtype | None) -> np.dtype | None:
    """torch.promote_types (None: no dtype yet): the higher category's, within one category
    numpy's (which agrees with torch there)."""
    if a is None or b is None:
        return b if a is None else a
    ca, cb = _category(a), _category(b)
    return a if ca > cb else b if cb > ca else np.promote_types(a, b)


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """torch's combine_categories: ``lower`` (a later tier) counts only in a higher category."""
    if higher is None or lower is None:
        return promote(higher, lower)
    if _category(higher) == 2:
        return higher
    if higher == BOOL or _category(lower) == 2:
        return promote(higher, lower)
    return higher


def _scalar_dtype(value: Any) -> np.dtype:
    if isinstance(value, bool):
        return BOOL
    return INT64 if isinstance(number(value, "operand"), int) else FLOAT32


def result_type(*operands: Any) -> np.dtype:
    """torch.result_type of tensors (numpy arrays) and Python scalars (module docstring)."""
    tiers: list[np.dtype | None] = [None, None, None]  # dimensioned, 0-d, Python scalars
    for x in operands:
        tier, dtype = ((0 if x.ndim else 1), x.dtype) if isinstance(x, np.ndarray) else (
            2, _scalar_dtype(x))
        tiers[tier] = promote(tiers[tier], dtype)
    return _combine(tiers[0], _combine(tiers[1], tiers[2]))


def same(dtype: np.dtype) -> np.dtype:
    """Out dtype = the promoted inputs' (arithmetic, rounding, copies)."""
    return dtype


def to_float(dtype: np.dtype) -> np.dtype:
    """Out dtype of ops that always give floats (exp, true division): ints and bools give
    float32."""
    return dtype if dtype.kind == "f" else FLOAT32


def to_bool(dtype: np.dtype) -> np.dtype:
    """Out dtype of comparisons and logical ops."""
    del dtype
    return BOOL


def elementwise(*operands: str, result: Result = same, typed: tuple[str, ...] | None = None,
                optional: tuple[str, ...] = ()) -> Rule:
    """The rule of an elementwise op on ``operands`` (argument names; ``optional`` ones may be
    absent or None): out has their broadcast shape and ``result`` of the promoted dtype of
    ``typed`` (default: all of them)."""

    def check(*, out: np.ndarray, **args: Any) -> None:
        inputs = {name: args[name] for name in operands
                  if name not in optional or args.get(name) is not None}
        shape = broadcast(inputs)
        promoted = result_type(*(v for k, v in inputs.items() if k in (typed or operands)))
        expect(out, shape, result(promoted), inputs)

    return check


def numbers(*names: str, optional: bool = False) -> Rule:
    """The rule that the named scalar arguments, where given, are numbers (or None if
    ``optional``); TypeError otherwise."""

    def check(**args: Any) -> None:
        for name in names:
            if name in args and not (optional and args[name] is None):
                number(args[name], name)

    return check


def all_of(*rules: Rule) -> Rule:
    """A rule checking each of ``rules`` in turn."""

    def check(**args: Any) -> None:
        for rule in rules:
            rule(**args)

    return check


DtypeOf = Callable[[np.dtype, Any], np.dtype | None]  # (self's dtype, dtype arg) -> out dtype


def reduction(*outs: tuple[str, DtypeOf],
              dim_types: tuple[type, ...] = (int, tuple, list, type(None)),
              empty_all: bool = True, identity: bool = True) -> Rule:
    """The rule of a reduction of ``self`` over ``dim`` (of one of ``dim_types``; see
    ``axes``), ``keepdim`` keeping the reduced dims as 1s: each out (name, dtype function) has
    the reduced shape. Without an ``identity`` (max, argmax) the reduced dims must not be
    empty."""

    def check(self: np.ndarray, dim: Any = None, keepdim: bool = False, *,
              dtype: str | None = None, **args: Any) -> None:
        tensor(self, "self")
        if not isinstance(keepdim, bool):
            raise TypeError(f"keepdim {keepdim!r} is not a bool")
        if not isinstance(dim, dim_types):
            raise TypeError(f"dim {dim!r}: {' or '.join(t.__name__ for t in dim_types)} "
                            "expected")
        reduced = axes(dim, self.ndim, empty_all)
        inputs = {"self": self, "dim": dim, "keepdim": keepdim}
        if not identity and any(self.shape[a] == 0 for a in reduced):
            refuse(inputs, "an empty reduction of an op without identity")
        shape = [1 if a in reduced else n for a, n in enumerate(self.shape)
                 if keepdim or a not in reduced]
        for name, dtype_of in outs:
            out_dtype = dtype_of(self.dtype, dtype)
            if out_dtype is None:
                refuse({**inputs, "dtype": dtype}, f"no {self.dtype} input")
            expect(args[name], shape, out_dtype, inputs, name)

    return check


def fill_value(value: Any, dtype: np.dtype, inputs: dict[str, Any]) -> None:
    """ValueError unless the number ``value`` converts to ``dtype`` as torch converts it (a
    float into an integer dtype must be finite and in its range once truncated)."""
    number(value, "value")
    if dtype.kind in "iu" and isinstance(value, float):
        info = np.iinfo(dtype)
        if not (math.isfinite(value) and info.min <= math.trunc(value) <= info.max):
            refuse(inputs, f"{value} cannot be converted to {dtype}")

