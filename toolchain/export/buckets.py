"""Bucketed export: one entry point specialised at several sizes of a dynamic dim, and named
methods, in one bundle sharing weights and state.

A dynamic dim comes from torch.export's ``Dim`` (a model module's ``dynamic_shapes()``) or from
``nee-export --dynamic INPUT:AXIS=MIN..MAX``. Each bucket is an ordinary static export at that
size; the runtime pads a smaller input with zeros along the dim and cuts the outputs back (see
``runtime_py.buckets``). That is exact only for models whose outputs at a position do not depend
on later positions (causal models): ``export_buckets`` checks it in eager mode at the smallest
size each bucket serves and refuses the model otherwise.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree

from runtime_py.buckets import Bucket
from toolchain.errors import ExportError, UnsupportedModelError
from toolchain.export.result import ExportResult

Exporter = Callable[..., ExportResult]


@dataclasses.dataclass(frozen=True)
class DynamicDim:
    """A dynamic dim: its name, range and the (input index, axis) places that have it."""

    name: str
    min: int
    max: int
    places: tuple[tuple[int, int], ...]

    def axis(self, index: int) -> int:
        """The axis of input ``index`` along the dim, or -1."""
        return next((axis for i, axis in self.places if i == index), -1)


def module_dim(model: torch.nn.Module, spec: Any) -> DynamicDim:
    """The dynamic dim of a torch.export ``dynamic_shapes`` spec (a dict by forward()'s argument
    names, or a tuple by position, of {axis: Dim}); one Dim is supported."""
    names = list(inspect.signature(model.forward).parameters)
    items = spec.items() if isinstance(spec, dict) else enumerate(spec)
    places, dims = [], {}
    for key, axes in items:
        index = names.index(key) if isinstance(key, str) and key in names else key
        if not isinstance(index, int) or not 0 <= index < len(names):
            raise ExportError(f"dynamic_shapes() key {key!r}", f"one of {names}", repr(key),
                              "key the spec by forward()'s argument names")
        for axis, dim in (axes or {}).items():
            dims[dim.__name__] = dim
            places.append((index, axis))
    if len(dims) != 1:
        raise UnsupportedModelError("dynamic_shapes()", "one dynamic Dim", f"{sorted(dims)}",
                                    "NEE buckets one dim per model for now")
    (name, dim), = dims.items()
    high = dim.max if dim.max is not None and dim.max < 2**31 else None
    if high is None:
        raise ExportError(f"Dim {name}", "a max (the largest size the board runs)",
                          "no max", f'Dim("{name}", min=..., max=...)')
    return DynamicDim(name, max(int(dim.min or 1), 1), int(high), tuple(places))


def parse_dynamic(text: str, input_names: Sequence[str]) -> DynamicDim:
    """``INPUT:AXIS=MIN..MAX`` (INPUT an input name or index), several places joined by ``,``
    before the ``=``: the dim named after the first place."""
    match = re.fullmatch(r"\s*([\w:,]+)\s*=\s*(\d+)\s*\.\.\s*(\d+)\s*", text)
    places = []
    for place in (match.group(1).split(",") if match else []):
        name, _, axis = place.partition(":")
        index = int(name) if name.isdigit() else (
            input_names.index(name) if name in input_names else None)
        if index is None or not axis.isdigit():
            match = None
            break
        places.append((index, int(axis)))
    if not match or not 1 <= int(match.group(2)) <= int(match.group(3)):
        raise ExportError(f"--dynamic {text}", "INPUT:AXIS=MIN..MAX with 1 <= MIN <= MAX and "
                          f"INPUT one of {list(input_names)}", text, "e.g. tokens:1=1..256")
    return DynamicDim(match.group(1).split(",")[0], int(match.group(2)), int(match.group(3)),
                      tuple(places))


def default_buckets(dim: DynamicDim) -> list[int]:
    """Powers of two from the dim's min up to its max, and the max."""
    sizes, size = [], 1
    while size < dim.max:
        if size >= dim.min:
            sizes.append(size)
        size *= 2
    return [*sizes, dim.max]


def export_buckets(export: Exporter, model: torch.nn.Module, example_inputs: tuple[Any, ...],
                   dim: DynamicDim, sizes: Sequence[int], entry: str = "forward",
                   **options: Any) -> ExportResult:
    """Export ``model`` at each bucket size with ``export`` (toolchain.export.export and its
    options): the first bucket's result holds the others as methods ``entry[dim=size]``."""
    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < dim.min or sizes[-1] > dim.max:
        raise ExportError(f"buckets {sizes} of dim {dim.name}", f"sizes in [{dim.min}, "
                          f"{dim.max}]", str(sizes), "choose bucket sizes the dim allows")
    state = snapshot_buffers(model)
    axes = _output_axes(model, example_inputs, dim, [dim.min, *sizes], state)
    results, served = [], dim.min
    for size in sizes:
        if served < size:
            _check_padding(model, example_inputs, dim, served, size, axes, state)
        restore_buffers(model, state)
        result = export(model, resized(example_inputs, dim, size), **options)
        bucket = Bucket(dim.name, dim.min, sizes[-1], size,
                           tuple(dim.axis(i) for i in range(len(example_inputs))), axes)
        results.append(dataclasses.replace(result, method=f"{entry}[{dim.name}={size}]",
                                           entry=entry, dim=bucket))
        served = size + 1
    restore_buffers(model, state)
    return dataclasses.replace(results[0], methods=tuple(results[1:]))


def resized(inputs: tuple[Any, ...], dim: DynamicDim, size: int) -> tuple[Any, ...]:
    """``inputs`` with each dynamic axis brought to ``size`` (its values repeated cyclically)."""
    out = list(inputs)
    for index, axis in dim.places:
        x = inputs[index]
        out[index] = x.index_select(axis, torch.arange(size) % x.shape[axis])
    return tuple(out)


def _padded(inputs: tuple[Any, ...], dim: DynamicDim, size: int) -> tuple[Any, ...]:
    """``inputs`` zero-padded along the dim to ``size``, as the runtime pads them."""
    out = list(inputs)
    for index, axis in dim.places:
        x = inputs[index]
        shape = list(x.shape)
        shape[axis] = size - x.shape[axis]
        out[index] = torch.cat([x, torch.zeros(shape, dtype=x.dtype)], dim=axis)
    return tuple(out)


def snapshot_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the model's buffers (its state before an export runs it)."""
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def restore_buffers(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put the buffers back as ``snapshot_buffers`` found them."""
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(state[name])


def eager_outputs(model: torch.nn.Module, inputs: tuple[Any, ...],
                  state: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The model's tensor outputs on ``inputs``, from its initial buffers."""
    restore_buffers(model, state)
    with torch.no_grad():
        return [x for x in _pytree.tree_leaves(model(*inputs)) if isinstance(x, torch.Tensor)]


def _output_axes(model: torch.nn.Module, example_inputs: tuple[Any, ...], dim: DynamicDim,
                 sizes: list[int], state: dict[str, torch.Tensor]) -> tuple[int, ...]:
    """Per output, the axis whose size follows the dim (-1: none), from eager runs at two
    sizes; with a single size, no output is ever cut."""
    a, b = sorted(set(sizes))[:2] if len(set(sizes)) > 1 else (sizes[0], None)
    small = eager_outputs(model, resized(example_inputs, dim, a), state)
    if b is None:
        return tuple(-1 for _ in small)
    large = eager_outputs(model, resized(example_inputs, dim, b), state)
    return tuple(_axis(k, x.shape, y.shape, a, b) for k, (x, y) in enumerate(zip(
        small, large, strict=True)))


def _axis(k: int, small: torch.Size, large: torch.Size, a: int, b: int) -> int:
    if small == large:
        return -1
    axes = [ax for ax in range(len(small)) if len(small) == len(large)
            and (small[ax], large[ax]) == (a, b)
            and small[:ax] + small[ax + 1:] == large[:ax] + large[ax + 1:]]
    if not axes:
        raise UnsupportedModelError(f"output {k}", "a shape that follows the dim along one "
                                    "axis", f"{list(small)} at size {a}, {list(large)} at {b}",
                                    "buckets need outputs whose size grows with the dim")
    return axes[0]


def _check_padding(model: torch.nn.Module, example_inputs: tuple[Any, ...], dim: DynamicDim,
                   size: int, bucket: int, axes: tuple[int, ...],
                   state: dict[str, torch.Tensor]) -> None:
    """The outputs at ``size`` equal those of the inputs zero-padded to ``bucket``, cut."""
    inputs = resized(example_inputs, dim, size)
    want = eager_outputs(model, inputs, state)
    got = eager_outputs(model, _padded(inputs, dim, bucket), state)
    for k, (w, g, axis) in enumerate(zip(want, got, axes, strict=True)):
        cut = g.narrow(axis, 0, size) if axis >= 0 else g
        scale = float(w.abs().max()) if w.numel() and w.is_floating_point() else 1.0
        if cut.shape != w.shape or not torch.allclose(cut.double(), w.double(), rtol=1e-4,
                                                      atol=1e-5 * max(scale, 1.0)):
            raise UnsupportedModelError(
                f"bucket {bucket} of dim {dim.name}", f"output {k} at size {size} unchanged by "
                f"zero padding to {bucket} (a causal model)",
                "other values" if cut.shape == w.shape else f"shape {list(cut.shape)}",
                "buckets pad the input: mask the padding in the model (e.g. a length input), "
                "or export static sizes")


def export_methods(export: Exporter, model: torch.nn.Module,
                   methods: dict[str, tuple[Any, ...]], **options: Any) -> ExportResult:
    """Export ``model``'s forward once per named method with that method's example inputs
    (e.g. ``{"prefill": (tokens_64, pos), "decode": (token, pos)}``), from the same initial
    buffers: the first method's result holds the others."""
    if not methods:
        raise ExportError("methods", "at least one name -> example inputs", "none", "")
    state = snapshot_buffers(model)
    results = []
    for name, inputs in methods.items():
        restore_buffers(model, state)
        results.append(dataclasses.replace(export(model, inputs, **options), method=name))
    restore_buffers(model, state)
    return dataclasses.replace(results[0], methods=tuple(results[1:]))
