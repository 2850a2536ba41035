"""Check a numpy kernel against its torch functional op on identical inputs, and its shape and
dtype rule (``Kernel.check``) against torch on wrong outs and relabelled inputs."""

from __future__ import annotations

import tracemalloc
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch

from runtime_py import kernels
from runtime_py.kernels import KERNELS, Kernel, rules
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
    """What ``Kernel.scratch`` may rely on of a tensor argument, as the add_scratch pass passes
    it (constants as their values, others as zero-stride tensors): its shape, dtype and memory
    layout, here with NaN or arbitrary values instead of its own."""
    if isinstance(value, np.ndarray):
        blank = np.empty_like(value)  # order "K": a transposed value stays transposed
        if blank.dtype.kind == "f":
            blank.fill(np.nan)
        return blank
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
        kernel.bind({**args, **outs})()
        return
    extra = planned_scratch(kernel, args)
    with mock.patch.object(kernels, "LONG_LOOP_BUFSIZE", 64):
        call = kernel.bind({**args, **outs, **extra})
    with np.errstate():
        np.setbufsize(64)
        peak = peak_bytes(call)
    limit = max(4096, sum(o.nbytes for o in outs.values()) // 4)
    assert not extra or not _contiguous(args) or peak < limit, f"allocated {peak} bytes"
    rereads_its_input(kernel, call, args, outs)


def rereads_its_input(kernel: Kernel, call: Callable[[], None], args: dict[str, Any],
                      outs: dict[str, np.ndarray]) -> None:
    """Assert that the bound ``call``, run again after its first tensor argument's values are
    permuted in place, gives what a call prepared afresh gives: it reads that input at each
    run, as the runtime needs (a reshape of a permuted view copies; done at prepare, it would
    keep the first run's values). ``call``'s outs hold its original results afterwards."""
    x = next((v for v in args.values() if isinstance(v, np.ndarray)), None)
    if (x is None or x.size < 2 or not x.flags.writeable
            or any(np.shares_memory(x, out) for out in outs.values())):
        return
    saved = x.copy()
    x[...] = np.random.default_rng(0).permutation(saved.reshape(-1)).reshape(x.shape)
    try:
        call()
        fresh = {name: np.empty_like(out) for name, out in outs.items()}
        kernel.bind({**args, **fresh})()
        for name, out in outs.items():
            np.testing.assert_allclose(out, fresh[name], rtol=RTOL, atol=ATOL, equal_nan=True,
                                       err_msg=f"{name} after new input values: a stale copy?")
    finally:
        x[...] = saved
        call()


def check_op(op: torch._ops.OpOverload, *, rtol: float = RTOL, atol: float = ATOL,
             **kwargs: Any) -> None:
    """Run ``op(**kwargs)`` in torch and its out-variant kernel in numpy, with and without a
    planned scratch; compare every output; check the kernel's rule (``check_rules``)."""
    out_op = out_variant(op)
    key = canonical_name(out_op)
    kernel = KERNELS[key]
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
    check_rules(key, args, outs, reference=op, kwargs=kwargs,
                to_args=lambda relabelled: kernel_args(out_op, relabelled),
                free_dtype=_out_fixes_dtype(op, out_op), rtol=rtol, atol=atol)


EXERCISED: set[str] = set()  # the kernels ``check_rules`` has checked in this session
# An out dtype torch's op would not give: the other of float32/int64, int8 -> int32.
WRONG_DTYPE = {"float32": "int64", "int64": "float32", "bool": "float32", "int8": "int32"}


def _out_fixes_dtype(op: torch._ops.OpOverload, out_op: torch._ops.OpOverload) -> bool:
    """Whether the out variant drops the op's ``dtype`` argument (factories, _to_copy): the
    out's dtype is then the call's."""
    return ("dtype" in {a.name for a in op._schema.arguments}
            and "dtype" not in {a.name for a in out_op._schema.arguments})


def wrong_outs(out: np.ndarray, free_dtype: bool = False) -> list[np.ndarray]:
    """Outs torch would not give where it gives ``out``: a leading dim of 2 more, the last dim
    one longer (unless 0-d) and (unless ``free_dtype``) another dtype."""
    shapes = [(2, *out.shape)] + ([(*out.shape[:-1], out.shape[-1] + 1)] if out.ndim else [])
    wrong = [np.zeros(shape, out.dtype) for shape in shapes]
    return wrong if free_dtype else [*wrong, np.zeros(out.shape, WRONG_DTYPE[out.dtype.name])]


def _relabelled(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` with a leading dim of 3 more, and with its last dim one longer unless it is 0 or
    a broadcastable 1 (values repeated: indices stay in range)."""
    variants = [t.expand(3, *t.shape).clone()]
    if t.ndim and t.shape[-1] > 1:
        variants.append(torch.cat([t, t[..., :1]], -1))
    return variants


def relabellings(kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``kwargs`` with one tensor (an argument or an item of a list argument) relabelled."""
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            for t in _relabelled(value):
                yield {**kwargs, key: t}
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    for t in _relabelled(item):
                        yield {**kwargs, key: [*value[:i], t, *value[i + 1:]]}


def _tensor_count(kwargs: dict[str, Any]) -> int:
    items = [v for value in kwargs.values()
             for v in (value if isinstance(value, list | tuple) else [value])]
    return sum(isinstance(v, torch.Tensor) for v in items)


def _torch_outs(reference: Callable[..., Any], kwargs: dict[str, Any]
                ) -> tuple[np.ndarray, ...] | None:
    """The reference's results on ``kwargs``, or None if torch refuses the call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = reference(**kwargs)
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    return tuple(t.numpy() for t in (got if isinstance(got, tuple) else (got,)))


ALL_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
ODD_SCALARS = (None, 2.5, -1, 0, 10**6, float("nan"), "x", True, (), (1,), (-1,), (0, 0),
               (1, 2, 3, 4, 5))


def _odd_tensors(x: np.ndarray) -> Iterator[np.ndarray]:
    """``x`` in every other dtype, with a leading dim more, its last dim one longer or empty,
    its first dim dropped."""
    with np.errstate(all="ignore"):
        yield from (x.astype(d) for d in ALL_DTYPES if d != x.dtype.name)
    yield np.broadcast_to(x, (2, *x.shape)).copy()
    if x.ndim:
        yield np.zeros((*x.shape[:-1], x.shape[-1] + 1), x.dtype)
        yield x[..., :0].copy()
        yield np.zeros(x.shape[1:], x.dtype)


def _odd_calls(args: dict[str, Any], outs: dict[str, np.ndarray]
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """The call with one argument changed (``_odd_tensors``, ``ODD_SCALARS``, an item of a
    tensor list) or one out in another dtype."""
    for key, value in args.items():
        if isinstance(value, np.ndarray):
            odd = [{key: v} for v in _odd_tensors(value)]
        elif isinstance(value, list):
            odd = [{key: [*value[:i], v, *value[i + 1:]]} for i, item in enumerate(value)
                   if isinstance(item, np.ndarray) for v in _odd_tensors(item)]
        else:
            odd = [{key: v} for v in ODD_SCALARS]
        yield from ((key, {**args, **outs, **change}) for change in odd)
    for key, out in outs.items():
        yield from ((key, {**args, **outs, key: np.zeros(out.shape, d)})
                    for d in ALL_DTYPES if d != out.dtype.name)


def assert_refused_or_runs(kernel: Kernel, args: dict[str, Any],
                           outs: dict[str, np.ndarray]) -> None:
    """Each of ``_odd_calls`` is refused at bind as the runtime expects (ValueError,
    TypeError, NotImplementedError; ZeroDivisionError for a constant divisor), or runs raising
    at most the run-time errors of input values (IndexError, ZeroDivisionError)."""
    args = {k: v for k, v in args.items() if k != "scratch"}
    for key, call_args in _odd_calls(args, outs):
        fresh = {k: np.zeros_like(v) for k, v in call_args.items() if k in outs}
        try:
            call = kernel.bind({**call_args, **fresh})
        except (ValueError, TypeError, NotImplementedError, ZeroDivisionError):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy's mean of an empty slice
                call()
        except (IndexError, ZeroDivisionError):
            pass
        except Exception as e:  # the kernel's rule let this call through
            raise AssertionError(f"{key} {rules.describe(call_args[key])}: bound, then "
                                 f"{type(e).__name__}: {e}") from e


def check_rules(name: str, args: dict[str, Any], outs: dict[str, np.ndarray], *,
                reference: Callable[..., Any] | None = None,
                kwargs: dict[str, Any] | None = None,
                to_args: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                free_dtype: bool = False, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Kernel ``name``'s rule, bound as the runtime binds calls: it takes ``args`` with
    ``outs`` (torch's), and refuses (ValueError) each out replaced by a ``wrong_outs`` one;
    the first time per session, odd arguments are refused or run (``assert_refused_or_runs``).
    With a torch ``reference`` of two or more tensors ``kwargs`` (``to_args`` converting them
    to kernel args), each relabelled input (``relabellings``): the call is refused unless torch
    gives outs of the same shapes and dtypes, else it gives torch's values."""
    kernel = KERNELS[name]
    if name not in EXERCISED:
        EXERCISED.add(name)
        assert_refused_or_runs(kernel, args, outs)
    kernel.bind({**args, **outs})
    for out_name, out in outs.items():
        for wrong in wrong_outs(out, free_dtype):
            with pytest.raises(ValueError):
                kernel.bind({**args, **outs, out_name: wrong})
    if reference is None or kwargs is None or to_args is None or _tensor_count(kwargs) < 2:
        return
    for relabelled in relabellings(kwargs):
        want = _torch_outs(reference, relabelled)
        fresh = {k: np.empty_like(o) for k, o in outs.items()}
        call_args = {**to_args(relabelled), **fresh}
        if want is None or any(w.shape != o.shape or w.dtype != o.dtype
                               for w, o in zip(want, outs.values(), strict=True)):
            with pytest.raises(ValueError):
                kernel.bind(call_args)
            continue
        kernel.bind(call_args)()
        for (out_name, got), w in zip(fresh.items(), want, strict=True):
            np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{name} {out_name} on relabelled inputs")


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
