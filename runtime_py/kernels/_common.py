"""Helpers shared by the kernel modules: dtype sets and call wrappers."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from runtime_py.format import SCRATCH_ARGS, align

FLOAT = frozenset({"float32"})
NUMERIC = frozenset({"float32", "int64"})
ALL = frozenset({"float32", "int64", "bool"})
BOOL = frozenset({"bool"})
INT8 = frozenset({"int8"})  # quantized tensors (kernels in quantized.py; copies, max, cat)

KernelFn = Callable[..., None]


def f32(value: float) -> np.ndarray:
    """``value`` as a read-only float32 0-d array, for a float kernel's constant operands:
    numpy converts a Python or numpy scalar on every call, about 0.5 us a call (a GRU's
    sigmoids: 8% of the model's time); a 0-d array computes the same in float32."""
    constant = np.array(value, np.float32)
    constant.flags.writeable = False
    return constant


ONE = f32(1)

# numpy's clip ufunc: ``np.clip`` is a Python wrapper around it that costs ~1 us a call (a
# ReLU6 on 64 floats: 1.2 us against 0.18); same values, nan and -0 included.
CLIP: np.ufunc = np._core.umath.clip


# A constant operand that broadcasts to an out of at most this many elements is tiled to out's
# shape at load (``out_shaped``): numpy's broadcast path costs 2-4x its same-shape path there
# ((2, 96) + (96,): 0.57 vs 0.15 us; (16, 256): 1.19 vs 0.37 us; (16, 3072): 3.3 vs 2.0 us).
TILED_ELEMENTS = 4096


def copier(out: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    """The call copying ``src`` into ``out`` (broadcast; a cast as ``casting="unsafe"``): an item
    assignment, ~0.07 us a call less than ``np.copyto``'s argument parsing."""
    return functools.partial(operator.setitem, out, Ellipsis, src)


# A copy whose source steps two 4-byte elements along its last axis (a stride-2 window's
# columns) is a cast of 8-byte pairs, each element and its right neighbour, to their first
# halves (``gather_copier``): numpy runs a contiguous cast loop where the copy would run a
# strided one. 1 thread, the copies alone: 2x2 deinterleaves of 96 x 48 x 48 0.5x, a stride-2
# stem's im2col columns over 96 x 96 0.62-0.63x; whole layers (alternated): the stems 0.81-0.90x,
# mobilenet_v2's 96 x 48 x 48 depthwise 0.92-0.95x; whole models (bench/choices.py, both load
# orders) mobilenet_v2 and mobilenet_v3_small 0.99, resnet18 0.993, cnn 1.00. Over runs of fewer
# than PAIR_RUN elements it can lose (cnn's 16 -> 32 columns over 8 x 8 outputs: 1.06-1.12x).
PAIR_CASTS = True
PAIR_RUN = 16


def gather_copier(out: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    """``copier(out, src)``; where ``src`` (of out's 4-byte dtype) steps two elements along its
    last axis, at least PAIR_RUN long, and each element's right neighbour is inside the array
    ``src`` views, the copy runs as a cast of those pairs (PAIR_CASTS). Little-endian pairs:
    the same bytes on any host."""
    pairs = _pairs(src) if PAIR_CASTS and out.dtype == src.dtype else None
    if pairs is None:
        return copier(out, src)
    return copier(out.view("<u4"), pairs)


def _pairs(src: np.ndarray) -> np.ndarray | None:
    """``src`` as '<u8' pairs (each element, its right neighbour), or None (see above)."""
    if src.dtype.itemsize != 4 or src.ndim == 0 or src.shape[-1] < PAIR_RUN or \
            src.size == 0 or src.strides[-1] != 8:
        return None
    root = _owner(src)
    if not root.flags.c_contiguous:
        return None
    start, end = np.lib.array_utils.byte_bounds(root)
    low, high = np.lib.array_utils.byte_bounds(src)
    if high + 4 > end or any(s < 0 for s in src.strides):  # past the memory; low not first
        return None
    return np.ndarray(src.shape, "<u8", buffer=root, offset=low - start, strides=src.strides)


def _owner(a: np.ndarray) -> np.ndarray:
    """The array whose memory ``a`` views (through ``as_strided``'s wrapper too)."""
    while True:
        base = a.base if isinstance(a.base, np.ndarray) else getattr(a.base, "base", None)
        if not isinstance(base, np.ndarray):
            return a
        a = base


def storage_order(a: np.ndarray) -> list[int] | None:
    """The permutation of ``a``'s dims into the order its memory holds them (largest stride
    first) where that makes it C-contiguous and ``a`` is not (a channels-last feature map:
    (0, 2, 3, 1)); else None."""
    order = sorted(range(a.ndim), key=lambda d: -a.strides[d])
    fits = not a.flags.c_contiguous and a.transpose(order).flags.c_contiguous
    return order if fits else None


def storage_ordered(args: dict[str, Any]) -> dict[str, Any]:
    """An elementwise call's arguments with every tensor (not its workspace) permuted alike
    into ``out``'s memory order (``storage_order``; the first tensor's without an out),
    tensors of fewer dims first given leading 1s so that they broadcast as before; the
    arguments as they are where that order is row-major (or a tensor has more dims than the
    reference). The call then computes the same elements over contiguous views."""
    tensors = {k: v for k, v in args.items() if isinstance(v, np.ndarray)
               and k not in SCRATCH_ARGS}
    ref = tensors.get("out", next(iter(tensors.values()), None))
    order = None if ref is None else storage_order(ref)
    if order is None or any(v.ndim > ref.ndim for v in tensors.values()):
        return args
    return {**args, **{k: v.reshape((1,) * (ref.ndim - v.ndim) + v.shape).transpose(order)
                       for k, v in tensors.items() if v.ndim}}


def view_as(a: np.ndarray, shape: Sequence[int]) -> np.ndarray | None:
    """``a`` reshaped to ``shape`` as a view of its memory, or None where its strides cannot
    express that (a permuted or sliced layout): a reshape would copy, and a kernel that kept
    that copy from prepare would read the first run's values at every run."""
    try:
        return a.reshape(shape, copy=False)
    except ValueError:
        return None


def out_shaped(a: object, out: np.ndarray) -> object:
    """``a`` in ``out``'s shape where that is free or cheap, so numpy takes its no-broadcast
    path: viewed so if it is an array with as many elements that allows the view without a
    copy (it then differs by size-1 dims only); tiled to it once, here, if it is a constant
    (read-only, as the bundle's are) of at least one dim broadcasting to an ``out`` of at
    most TILED_ELEMENTS; else ``a`` itself."""
    if not isinstance(a, np.ndarray) or a.shape == out.shape:
        return a
    view = view_as(a, out.shape) if a.size == out.size else None
    if view is not None:
        return view
    if a.flags.writeable or not a.ndim or out.size > TILED_ELEMENTS:
        return a
    try:
        tiled = np.broadcast_to(a, out.shape).copy()
    except ValueError:  # it does not broadcast to out: the ufunc says so
        return a
    tiled.flags.writeable = False
    return tiled


def reduce_axes(dim: Sequence[int] | int | None) -> tuple[int, ...] | None:
    """ATen reduction dims -> numpy axis: None or empty means all dims."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return dims or None


def expand_param(value: Sequence[int] | int, n: int) -> tuple[int, ...]:
    """Broadcast an ATen int-list param (``[k]`` or ``k``) to ``n`` spatial dims."""
    vals = (value,) if isinstance(value, int) else tuple(value)
    return vals * n if len(vals) == 1 else vals


WORKSPACE_ALIGN = 64  # bytes; every workspace region starts on a cache line


def workspace_bytes(*regions: tuple[Sequence[int], str | np.dtype]) -> int:
    """Scratch bytes for ``Workspace.take`` of these (shape, dtype) regions."""
    return sum(align(math.prod(shape) * np.dtype(dtype).itemsize, WORKSPACE_ALIGN)
               for shape, dtype in regions)


class Workspace:
    """Typed arrays carved in order out of a planned uint8 ``scratch`` (fresh ones without it)."""

    __slots__ = ("_buf", "_offset")

    def __init__(self, scratch: np.ndarray | None) -> None:
        self._buf, self._offset = scratch, 0

    def room(self) -> int | None:
        """Bytes left to take (None: fresh arrays, as many as asked)."""
        return None if self._buf is None else self._buf.nbytes - self._offset

    def take(self, shape: Sequence[int], dtype: str | np.dtype) -> np.ndarray:
        if self._buf is None:
            return np.empty(shape, dtype)
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        region = self._buf[self._offset:self._offset + nbytes]
        self._offset += align(nbytes, WORKSPACE_ALIGN)
        return region.view(dtype).reshape(shape)


def like_self(regions: int, dtype: str = "float32") -> Callable[..., int]:
    """Scratch function: ``regions`` buffers of ``self``'s shape in ``dtype``."""

    def scratch(self: np.ndarray, **_: object) -> int:
        return regions * workspace_bytes((np.shape(self), dtype))

    return scratch
