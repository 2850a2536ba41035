"""numpy out-variant kernels: the registry the runtime executes and the spec of every op.

Contract (every kernel follows it; tests in tests/kernels check each one against torch):

- Key: the canonical name of the ATen *out-variant* overload, ``"aten::<op>.<overload>"``, e.g.
  ``"aten::add.out"``, ``"aten::convolution.out"``, ``"aten::add.Scalar_out"``. NEE-specific fused
  ops use the ``"nee::"`` namespace.
- Call: ``fn(**args)`` with the argument names of that overload's schema (``self``, ``other``,
  ``alpha``, ``out`` ...). Tensor args are numpy arrays (possibly non-contiguous or 0-stride
  views); scalars are Python int/float/bool; int lists are tuples; optionals may be None; dtype
  args are numpy dtype names ("float32"); memory_format/layout/device args are absent or None.
  The out args (``out``, or ``out0``/``indices`` ... for multi-output ops) are pre-allocated,
  C-contiguous arrays of the right shape and dtype; the kernel writes them in place and returns
  nothing. It must not allocate an output-sized temporary where numpy's ``out=`` can avoid it.
- Workspace: a kernel needing temporaries declares ``Kernel.scratch`` and takes a keyword
  ``scratch=None``; it carves typed regions from it with ``_common.Workspace`` and allocates
  only when called without one (reference use, constant folding at export). ``Kernel.scratch``
  may receive ``budget=`` (bytes, from a board's ``scratch_limit``): a kernel that can work in
  pieces then asks for less and works out its tiling from the size it is given (convolution:
  im2col columns for as many output rows as fit beside its padded input, at least one row);
  ``budget=0`` gives the least it can work with, which the runtime checks at load.
- ``Kernel.dtypes``: the output dtypes the kernel supports, checked at bundle load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# numpy (>= 2.3) allocates ufunc iterator buffers of ``bufsize`` elements per operand on every
# broadcasting, strided or reducing call (~30 KB each at the default 8192) and frees them after:
# a run-time allocation per call, and slower for the broadcasts kernels do. 512-1024 is fastest
# on the example models (16 halves depthwise-conv speed) and keeps buffers ~6 KB. The runtime
# sets it for the duration of each run (runtime_py/program.py), leaving the caller's numpy as is.
UFUNC_BUFSIZE = 512


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: the function and the output dtypes it supports.

    ``inplace``: ``out`` may be the very array passed as one of its same-shaped tensor inputs
    (the toolchain then lets the output reuse a dying input's buffer). ``scratch``: called at
    export with the call's arguments (tensors as zero-stride placeholder arrays of the right
    shape/dtype, no out/scratch), returns the workspace bytes the kernel wants; the kernel then
    receives a planned uint8 ``scratch`` array of that size and must not allocate its own.
    """

    fn: Callable[..., None]
    dtypes: frozenset[str]
    inplace: bool = False
    scratch: Callable[..., int] | None = None


# Imported after Kernel: the kernel modules build their KERNELS dicts from it.
from runtime_py.kernels import (  # noqa: E402
    creation,
    elementwise,
    fused,
    linalg,
    nn,
    reduce,
    shape,
)

KERNELS: dict[str, Kernel] = {
    **elementwise.KERNELS,
    **reduce.KERNELS,
    **linalg.KERNELS,
    **nn.KERNELS,
    **shape.KERNELS,
    **creation.KERNELS,
    **fused.KERNELS,
}
