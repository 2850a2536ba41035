"""Check a numpy kernel against its torch functional op on identical inputs."""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from typing import Any
from unittest import mock

import numpy as np
import torch

from runtime_py import kernels
from runtime_py.kernels import KERNELS, Kernel
from toolchain.export.capture import numpy_dtype
from toolchain.export.out_variant import canonical_name, find_out_variant, out_arg_names

# Default tolerances for float32 elementwise results.
RTOL, ATOL = 1e-5, 1e-6
LAYOUTS = ("contiguous", "transposed", "strided")


def to_kernel_arg(value: Any) -> Any:
    """As the runtime passes it: tensor -> numpy view (strides kept), dtype -> name, tensor
    list -> list, other list -> tuple."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, torch.dtype):
        return numpy_dtype(value, "kernel arg")
    if isinstance(value, list | tuple):
        values = [to_kernel_arg(v) for v in value]
        return values if any(isinstance(v, np.ndarray) for v in values) else tuple(values)
    return value


def out_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The out-variant overload whose kernel implements ``op``."""
    out_op = find_out_variant(op)
    assert out_op is not None, f"{op} has no out variant"
    return out_op


def kernel_args(out_op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``op(**kwargs)``'s args as ``out_op``'s kernel gets them: converted, and only those its
    schema takes (to_out_variant drops the dtype/layout/device options out implies)."""
    taken = {a.name for a in out_op._schema.arguments}
    return {k: to_kernel_arg(v) for k, v in kwargs.items() if k in taken}


def with_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as ``t`` in a contiguous, transposed or strided (sliced) layout."""
    if layout == "contiguous" or t.ndim == 0:
        return t.clone()
    if layout == "transposed":
        dims = tuple(reversed(range(t.ndim)))
        return t.permute(dims).contiguous().permute(dims)
    base = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    view = base[..., ::2]
    view.copy_(t)
    return view


def random(shape: Sequence[int], dtype: torch.dtype = torch.float32,
           scale: float = 1.0) -> torch.Tensor:
    """Random values: normal floats times ``scale``, small ints in [-5, 5], or bools."""
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape)).bool()
    if dtype.is_floating_point:
        return torch.randn(tuple(shape), dtype=dtype) * scale
    return torch.randint(-5, 6, tuple(shape), dtype=dtype)


def _sentinel(expected: torch.Tensor) -> np.ndarray:
    """An out buffer pre-filled with values the kernel must overwrite to pass."""
    ref = expected.numpy()
    if ref.dtype == np.bool_:
        return np.array(np.logical_not(ref))  # np.array: keep 0-d outs arrays
    fill = 1e30 if ref.dtype.kind == "f" else np.iinfo(ref.dtype).min
    return np.full(ref.shape, fill, dtype=ref.dtype)


def placeholder(value: Any) -> Any:
    """As the add_scratch pass passes args to ``Kernel.scratch``: zero-stride tensors."""
    if isinstance(value, np.ndarray):
        return np.broadcast_to(np.zeros((), value.dtype), value.shape)
    if isinstance(value, list):
        return [placeholder(v) for v in value]
    return value


def planned_scratch(kernel: Kernel, args: dict[str, Any]) -> dict[str, np.ndarray]:
    """``{"scratch": nan-filled uint8 array}`` sized by ``kernel.scratch``, or ``{}``."""
    if kernel.scratch is None:
        return {}
    nbytes = kernel.scratch(**{k: placeholder(v) for k, v in args.items()})
    return {"scratch": np.full(nbytes, 0xFF, np.uint8)}  # 0xFF bytes: float nan, never zeros


def _contiguous(args: dict[str, Any]) -> bool:
    return all(v.flags.c_contiguous for v in args.values() if isinstance(v, np.ndarray))


def run_kernel(kernel: Kernel, args: dict[str, Any], outs: dict[str, np.ndarray],
               scratch: bool) -> None:
    """Call ``kernel``; with ``scratch``, bind it to a planned scratch as the runtime does and
    (for contiguous inputs) assert the bound call allocates nothing output-sized. (numpy's ufunc
    iterator buffers, up to the buffer size in elements per operand, are shrunk so they cannot
    hide a temporary.)"""
    if not scratch:
        kernel.fn(**args, **outs)
        return
    extra = planned_scratch(kernel, args)
    with mock.patch.object(kernels, "LONG_LOOP_BUFSIZE", 64):
        call = kernel.bind({**args, **outs, **extra})
    with np.errstate():
        np.setbufsize(64)
        peak = peak_bytes(call)
    limit = max(4096, sum(o.nbytes for o in outs.values()) // 4)
    assert not extra or not _contiguous(args) or peak < limit, f"allocated {peak} bytes"


def check_op(op: torch._ops.OpOverload, *, rtol: float = RTOL, atol: float = ATOL,
             **kwargs: Any) -> None:
    """Run ``op(**kwargs)`` in torch and its out-variant kernel in numpy, with and without a
    planned scratch; compare every output."""
    out_op = out_variant(op)
    kernel = KERNELS[canonical_name(out_op)]
    expected = op(**kwargs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert numpy_dtype(expected[0].dtype, str(op)) in kernel.dtypes
    args = kernel_args(out_op, kwargs)
    for scratch in (False, True) if kernel.scratch else (False,):
        outs = {name: _sentinel(e) for name, e in zip(out_arg_names(out_op._schema), expected,
                                                       strict=True)}
        run_kernel(kernel, args, outs, scratch)
        for (name, got), want in zip(outs.items(), expected, strict=True):
            assert got.dtype == want.numpy().dtype, name
            np.testing.assert_allclose(got, want.numpy(), rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{name} (scratch={scratch})")


def coarse(shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values in {-3..3} (or random bools): many ties, for comparisons and arg-max."""
    if dtype == torch.bool:
        return random(shape, dtype)
    return torch.randint(-3, 4, tuple(shape)).to(dtype)


def peak_bytes(call: Any) -> int:
    """Peak bytes Python-level allocations reach during ``call()`` (tracemalloc)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
