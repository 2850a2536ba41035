"""Factory kernels: full, scalar_tensor, arange (out implies dtype/device: no such args)."""

from __future__ import annotations

import math

import numpy as np

from runtime_py.kernels import Kernel, rules
from runtime_py.kernels._common import ALL, NUMERIC

Scalar = int | float | bool


def full(size: tuple[int, ...], fill_value: Scalar, *, out: np.ndarray) -> None:
    del size  # out already has it
    out.fill(fill_value)


def scalar_tensor(s: Scalar, *, out: np.ndarray) -> None:
    out.fill(s)


def arange(start: Scalar = 0, end: Scalar | None = None, step: Scalar = 1, *,
           out: np.ndarray) -> None:
    """out[i] = start + i * step (length from out; ``arange.out`` passes only ``end``); an
    integer out takes start and step truncated, as torch."""
    del end
    if out.dtype.kind != "f":
        start, step = int(start), int(step)
    ramp = np.arange(out.shape[0], dtype=np.float64 if out.dtype.kind == "f" else np.int64)
    np.multiply(ramp, step, out=ramp, casting="unsafe")
    np.add(ramp, start, out=ramp, casting="unsafe")
    np.copyto(out, ramp, casting="unsafe")


def _check_full(size: tuple[int, ...], fill_value: Scalar, *, out: np.ndarray,
                **_: object) -> None:
    """out has shape ``size`` (any dtype: the out fixes it) and takes ``fill_value``."""
    inputs = {"size": size, "fill_value": fill_value}
    rules.fill_value(fill_value, out.dtype, inputs)
    rules.expect(out, rules.ints(size, "size", 0), out.dtype, inputs)


def _check_scalar_tensor(s: Scalar, *, out: np.ndarray, **_: object) -> None:
    rules.fill_value(s, out.dtype, {"s": s})
    rules.expect(out, (), out.dtype, {"s": s})


def arange_length(start: Scalar, end: Scalar, step: Scalar, dtype: np.dtype) -> int:
    """torch's arange length (compute_arange_size): in integers truncated from the arguments
    for an integer dtype, else ceil((end - start) / step) in double. ValueError for a zero
    step, a step of the wrong sign or an infinite argument."""
    start, end, step = (rules.number(v, name) for v, name in ((start, "start"), (end, "end"),
                                                               (step, "step")))
    if not all(map(math.isfinite, (start, end, step))):
        raise ValueError(f"arange({start}, {end}, {step}): an unbounded range")
    if dtype.kind != "f":
        start, end, step = (math.trunc(v) for v in (start, end, step))
    if not step or (end - start) * step < 0:
        raise ValueError(f"arange({start}, {end}, {step}): a zero step, or one of the wrong sign")
    if dtype.kind != "f":
        return (end - start + step - (1 if step > 0 else -1)) // step
    return math.ceil((end - start) / step)


def _check_arange(start: Scalar = 0, end: Scalar | None = None, step: Scalar = 1, *,
                  out: np.ndarray, **_: object) -> None:
    """A 1-d out of torch's length (``arange_length``), in any dtype (the out fixes it)."""
    length = arange_length(start, end, step, out.dtype)
    rules.expect(out, (length,), out.dtype, {"start": start, "end": end, "step": step})


KERNELS: dict[str, Kernel] = {
    "aten::full.out": Kernel(full, ALL, check=_check_full),
    "aten::scalar_tensor.out": Kernel(scalar_tensor, ALL, check=_check_scalar_tensor),
    "aten::arange.out": Kernel(arange, NUMERIC, check=_check_arange),
    "aten::arange.start_out": Kernel(arange, NUMERIC, check=_check_arange),
}
