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
- ``Kernel.check``: the kernel's shape and dtype rule (``rules``): it takes the same arguments
  as ``fn`` and raises ValueError unless the outs have exactly the shapes and dtypes torch's
  functional op returns for these inputs and scalar arguments (TypeError for an argument of the
  wrong kind, NotImplementedError for a call torch accepts that the kernel does not implement).
  ``Kernel.bind`` checks it, so a bundle's shapes are checked at load; a bound call never raises
  on shapes or dtypes at run (only on tensor values, e.g. indices out of range: IndexError).
- ``Kernel.prepare`` (optional): takes the same arguments as ``fn`` and returns a no-argument
  closure doing the work, with views, scalars and geometry made once. The runtime prepares every
  call at load (TFLite Micro's Prepare/Invoke split), so a run creates no Python objects beyond
  numpy's own per-call iterator. It may look at shapes, strides and constants, never at the
  values of other tensors. Such kernels are built with ``Kernel.prepared``. Constants (the
  bundle's weights) are read-only arrays, activations writable. Hot calls pass ``out``
  positionally and, where they can, are a ``functools.partial`` of the numpy function itself:
  numpy parses keywords at ~0.06 us a call, a partial with keywords ~0.16 us, and a
  Python frame costs ~0.07 us, against 0.15-0.3 us for a whole small ufunc call.
- numpy mode: kernels run with numpy's floating-point errors ignored (torch yields inf/nan
  silently) and ufunc buffers of ``UFUNC_BUFSIZE`` elements. They do not set that themselves
  (it costs an allocation per call): the runtime configures it once per program
  (``configure_numpy`` in the program's own context), other callers use ``numpy_mode()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_py import build_info

Bound = Callable[[], None]  # a kernel call with its arguments bound

# numpy (>= 2.3) allocates ufunc iterator buffers of up to ``bufsize`` elements per operand on
# broadcasting, strided or reducing calls whose inner loop is shorter than ``bufsize`` (~30 KB
# each at the default 8192), and splits longer loops into ``bufsize`` pieces. At 32 a broadcast
# over rows of 32+ elements allocates only its ~1.1 KB iterator; kernels whose loops are long and
# whose calls can afford the buffers (convolution) run with ``LONG_LOOP_BUFSIZE`` instead.
UFUNC_BUFSIZE = 32
LONG_LOOP_BUFSIZE = 512


def configure_numpy() -> None:
    """Set the numpy mode kernels run in, in the current context (see the module docstring)."""
    np.seterr(all="ignore")
    np.setbufsize(UFUNC_BUFSIZE)


@contextlib.contextmanager
def numpy_mode() -> Iterator[None]:
    """Run the enclosed kernel calls in the kernels' numpy mode; the caller's is restored."""
    with np.errstate():
        configure_numpy()
        yield


def then(first: Bound, second: Bound) -> Bound:
    """One call running ``first``, then ``second``."""

    def run() -> None:
        first()
        second()

    return run


def run_all(*calls: Bound) -> Bound:
    """One call running ``calls`` in order."""

    def run() -> None:
        for call in calls:
            call()

    return run


def long_loops(run: Bound) -> Bound:
    """``run`` in a numpy context of its own with ``LONG_LOOP_BUFSIZE`` buffers; switching to it
    allocates nothing."""
    context = contextvars.copy_context()
    context.run(np.setbufsize, LONG_LOOP_BUFSIZE)
    return functools.partial(context.run, run)


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: the function and the output dtypes it supports.

    ``inplace``: ``out`` may be the very array passed as one of its same-shaped tensor inputs
    (the toolchain then lets the output reuse a dying input's buffer). ``scratch``: called at
    export with the call's arguments (tensors, out included, as zero-stride placeholder arrays
    of the right shape/dtype, but maps stored in another dim order as strided views in that
    order; no scratch), returns the workspace bytes the kernel wants; the kernel then receives
    a planned uint8 ``scratch`` array of that size and must not allocate its own.
    ``check``: the shape and dtype rule (module docstring), run by ``bind``; ``fn`` does not
    check.
    """

    fn: Callable[..., None]
    dtypes: frozenset[str]
    inplace: bool = False
    scratch: Callable[..., int] | None = None
    prepare: Callable[..., Bound] | None = None
    check: Callable[..., None] | None = None

    @classmethod
    def prepared(cls, prepare: Callable[..., Bound], dtypes: frozenset[str],
                 **options: Any) -> Kernel:
        """A kernel written as ``prepare``; its ``fn`` prepares and runs in one go."""

        @functools.wraps(prepare)
        def fn(**args: Any) -> None:
            prepare(**args)()

        return cls(fn, dtypes, prepare=prepare, **options)

    def bind(self, args: dict[str, Any], *, check: bool = True) -> Bound:
        """The call on ``args`` (by argument name), ready to run with no arguments, its rule
        checked first (``check=False``: by a caller that checked it, e.g. a fused kernel)."""
        if check and self.check is not None:
            self.check(**args)
        return self.prepare(**args) if self.prepare else functools.partial(self.fn, **args)


# The kernel modules, each with its KERNELS dict; a pruned runtime ships some of them
# (runtime_py/build_info.py, written by nee-build).
MODULES = ("elementwise", "reduce", "linalg", "nn", "shape", "creation", "fused", "attention",
           "indexing", "quantized", "recurrent")


def _registry() -> dict[str, Kernel]:
    """Every kernel of the shipped modules; in a pruned runtime, only the (op, dtype) pairs
    it was built with."""
    found: dict[str, Kernel] = {}
    for name in build_info.KERNEL_MODULES or MODULES:
        found.update(importlib.import_module(f"runtime_py.kernels.{name}").KERNELS)
    if build_info.KERNELS is None:
        return found
    return {op: dataclasses.replace(found[op], dtypes=found[op].dtypes & dtypes)
            for op, dtypes in build_info.KERNELS.items()}


KERNELS: dict[str, Kernel] = _registry()
