"""Factory kernels: full, scalar_tensor, arange (out implies dtype/device: no such args)."""

from __future__ import annotations

import numpy as np

from runtime_py.kernels import Kernel
from runtime_py.kernels._common import ALL, NUMERIC

Scalar = int | float | bool


def full(size: tuple[int, ...], fill_value: Scalar, *, out: np.ndarray) -> None:
    del size  # out already has it
    out.fill(fill_value)


def scalar_tensor(s: Scalar, *, out: np.ndarray) -> None:
    out.fill(s)


def arange(start: Scalar = 0, end: Scalar | None = None, step: Scalar = 1, *,
           out: np.ndarray) -> None:
    """out[i] = start + i * step (length from out; ``arange.out`` passes only ``end``)."""
    del end
    ramp = np.arange(out.shape[0], dtype=np.float64 if out.dtype.kind == "f" else np.int64)
    np.multiply(ramp, step, out=ramp, casting="unsafe")
    np.add(ramp, start, out=ramp, casting="unsafe")
    np.copyto(out, ramp, casting="unsafe")


KERNELS: dict[str, Kernel] = {
    "aten::full.out": Kernel(full, ALL),
    "aten::scalar_tensor.out": Kernel(scalar_tensor, ALL),
    "aten::arange.out": Kernel(arange, NUMERIC),
    "aten::arange.start_out": Kernel(arange, NUMERIC),
}
