"""Fused kernels: a convolution, addmm or mm, then an in-place activation on its output.

``nee::<base>_act.out`` takes the base kernel's arguments plus ``activation`` (the activation
kernel's key, e.g. ``"aten::relu.out"``) and the activation's own non-tensor arguments prefixed
``act_`` (e.g. ``act_min_val``). ``out`` may have another shape with as many elements as the
base's output (a linear layer's 2-D result viewed as 3-D): the base writes it reshaped. The
activation runs over out in its memory order (a channels-last out as (N, H, W, C), as every
elementwise kernel does). The scratch is the larger of the base's and the activation's; the
activation reuses it once the base kernel is done with it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime_py import kernels
from runtime_py.kernels import Bound, Kernel, linalg, nn, then
from runtime_py.kernels._common import FLOAT, NUMERIC

_PREFIX = "act_"


def _split(args: dict[str, Any]) -> dict[str, Any]:
    """Pop the ``act_``-prefixed args from ``args``: the activation's, prefix stripped."""
    return {key[len(_PREFIX):]: args.pop(key) for key in [k for k in args if k.startswith(_PREFIX)]}


def _activation(activation: Any) -> Kernel:
    """The activation's kernel: an in-place safe kernel (ValueError otherwise)."""
    act = kernels.KERNELS.get(activation) if isinstance(activation, str) else None
    if act is None or not act.inplace:
        raise ValueError(f"activation {activation!r}: not an in-place kernel's name")
    return act


def _fused(base: Kernel, dtypes: frozenset[str],
           out_shape: Callable[..., tuple[int, ...]]) -> Kernel:
    """``base`` into out, then ``KERNELS[activation]`` in place on out."""
    base_scratch = base.scratch is not None

    def check(*, activation: str, out: np.ndarray, **args: Any) -> None:
        """The base kernel's rule on out viewed in the base's output shape, the activation's
        arguments bound to its signature (TypeError) and its rule on out in place."""
        act, act_args = _activation(activation), _split(args)
        inspect.signature(act.fn).bind(self=out, out=out, **act_args)
        act.check(self=out, out=out, **act_args)
        base.check(**args, out=out.reshape(out_shape(**args)))

    def prepare(*, activation: str, out: np.ndarray, scratch: np.ndarray | None = None,
                **args: Any) -> Bound:
        act_args = _split(args)
        if base_scratch:
            args["scratch"] = scratch
        act = _activation(activation)
        if act.scratch is not None:
            act_args["scratch"] = scratch
        base_out = out.reshape(out_shape(**args), copy=False)  # out may be X reshaped
        return then(base.bind({**args, "out": base_out}, check=False),
                    act.bind({"self": out, "out": out, **act_args}, check=False))

    def scratch(*, activation: str, **args: Any) -> int:
        act_args = _split(args)
        act = _activation(activation)
        out = args.get("out")  # the toolchain passes it, in its layout
        dtype = next(v.dtype for v in args.values() if isinstance(v, np.ndarray))
        placeholder = out if isinstance(out, np.ndarray) else np.broadcast_to(
            np.zeros((), dtype), out_shape(**args))
        return max(base.scratch(**args) if base_scratch else 0,
                   act.scratch(self=placeholder, **act_args) if act.scratch else 0)

    return Kernel.prepared(prepare, dtypes, scratch=scratch, check=check)


def _matmul_out_shape(mat1: np.ndarray | None = None, mat2: np.ndarray | None = None,
                      self: np.ndarray | None = None, **_: object) -> tuple[int, ...]:
    """addmm(self, mat1, mat2) and mm(self, mat2) give (rows of the left, columns of mat2)."""
    return linalg.matmul_shape(mat1 if mat1 is not None else self, mat2, 2)


KERNELS: dict[str, Kernel] = {
    "nee::convolution_act.out": _fused(nn.KERNELS["aten::convolution.out"], FLOAT,
                                       nn.conv_shape),
    "nee::addmm_act.out": _fused(linalg.KERNELS["aten::addmm.out"], NUMERIC, _matmul_out_shape),
    "nee::mm_act.out": _fused(linalg.KERNELS["aten::mm.out"], NUMERIC, _matmul_out_shape),
}
