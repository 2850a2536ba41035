"""NEE's graph IR: what every pass reads and writes.

A `Graph` is a list of `Node`s in execution order over named `Tensor`s. Operator arguments are
kept by ATen schema name; a tensor argument is a `Ref`. Properties that passes establish are
recorded in `Graph.ensured` so the verifier can check them after every later pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_py.format import (  # noqa: F401  (SCRATCH_ARGS: re-exported for the passes)
    DELEGATE_CALL,
    FAST_SCRATCH_ARG,
    SCRATCH_ARG,
    SCRATCH_ARGS,
    contiguous_strides,
    dense_strides,
)


@dataclass(frozen=True)
class Ref:
    """A reference to a tensor by name inside an argument value."""

    name: str


@dataclass(frozen=True)
class Quant:
    """Affine quantization of an integer tensor: real = scale * (q - zero_point), one scale per
    tensor (``axis`` None) or one per index along ``axis``. Scales are float32 values."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None


@dataclass
class Tensor:
    """A value in the graph. Views share their base's storage (``view_of`` set)."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name
    kind: str  # "input", "const", "state", "activation" or "scratch"
    data: np.ndarray | None = None  # payload of a const (a state's initial value), C-contiguous
    view_of: str | None = None  # root storage tensor when this is a zero-copy view
    strides: tuple[int, ...] | None = None  # element strides of a view; None = contiguous
    offset: int = 0  # element offset of a view inside its root storage
    quant: Quant | None = None  # quantization parameters of an int8/int32 tensor
    tier: str | None = None  # a board tier the planner must place it in (None: its rule)

    @property
    def nbytes(self) -> int:
        """Bytes of a contiguous tensor of this shape and dtype."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def element_strides(self) -> tuple[int, ...]:
        """The strides this tensor is laid out with."""
        return self.strides if self.strides is not None else contiguous_strides(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """Row-major strides (a view may still start at an offset into its root)."""
        return self.element_strides() == contiguous_strides(self.shape)


@dataclass
class Node:
    """One operator call. ``outputs`` lists the tensors it produces, in schema order."""

    op: str  # canonical name, "aten::add.Tensor" before and "aten::add.out" after out-variant
    args: dict[str, Any]
    outputs: list[str]
    source: str = ""  # "file:line: code" of the model line that produced it
    call: str = ""  # the torch function the model called, when the op came from decomposing it
    out_names: list[str] = field(default_factory=list)  # schema names of the out args
    cpu_reason: str = ""  # on a board with an NPU: why this call stays on the CPU


@dataclass(frozen=True)
class Estimate:
    """A delegate compiler's estimate for one run of a partition."""

    cycles: int
    clock_hz: int  # the board's clock for the device: seconds = cycles / clock_hz
    macs: int
    sram_bytes: int
    flash_bytes: int
    op_cycles: tuple[tuple[str, int], ...] = ()  # (compiled op's output name, cycles)


@dataclass
class Delegate:
    """A partition compiled for a delegate backend, called by one ``nee::delegate_call`` node.

    ``nodes`` is its reference program on CPU kernels (what ``payload`` computes, bit-exact);
    its internal tensors live at ``workspace`` byte offsets in a memory of its own, its
    ``inputs`` and ``outputs`` in the arena. ``input_offsets``/``output_offsets`` place them
    inside the device's ``scratch``."""

    backend: str
    target: str
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    specs: dict[str, str] = field(default_factory=dict)
    payload: dict[str, np.ndarray] = field(default_factory=dict)  # name -> uint8 blob
    input_offsets: list[int] = field(default_factory=list)
    output_offsets: list[int] = field(default_factory=list)
    scratch: int = 0
    fast_scratch: int = 0
    workspace: dict[str, int] = field(default_factory=dict)  # internal root -> byte offset
    workspace_size: int = 0
    estimate: Estimate | None = None
    cpu_fallback: bool = True


@dataclass
class Graph:
    """A whole program: tensors, nodes in order, the IO tensor names and the names the model
    gives its outputs (one per ``outputs`` entry; an output tensor may appear twice). Until
    the ``write_state`` pass, the last ``len(state_updates)`` outputs are the new values of
    those ``state`` tensors (named ``<state>:updated``), which keeps them live through every
    pass."""

    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    output_names: list[str] = field(default_factory=list)
    ensured: set[str] = field(default_factory=set)
    scratch_budget: int | None = None  # max workspace bytes per kernel call (board recipe)
    # Values computed at run time even from constants alone (they follow a dynamic dim of a
    # symbolic export): fold_constants leaves the calls writing them in the program.
    run_time: frozenset[str] = frozenset()
    # False while a symbolic export traces its sample sizes: shapes then follow a dim, so no
    # layout is chosen for one size (fold_constants' row-blocked weights).
    static_shapes: bool = True
    int8_rounding: str = "double"  # int8 requantization (toolchain.quantize.options.ROUNDINGS)
    npu: Any = None  # the board's toolchain.boards.Npu: passes/delegate_npu.py partitions for it
    cpu_delegate: str | None = None  # the board's CPU delegate: passes/delegate_cpu.py
    delegates: list[Delegate] = field(default_factory=list)  # nee::delegate_call's "delegate"
    state_updates: list[str] = field(default_factory=list)  # see the class docstring

    def state_values(self) -> list[str]:
        """The tensors holding the pending state updates' new values (the trailing outputs)."""
        return self.outputs[len(self.outputs) - len(self.state_updates):] \
            if self.state_updates else []

    def storage_of(self, name: str) -> str:
        """The tensor owning the bytes of ``name`` (itself unless it is a view)."""
        return self.tensors[name].view_of or name

    def is_layout(self, name: str) -> bool:
        """Whether ``name`` is the one view of a root that holds just its elements in another
        dim order and that nothing names but through it (a channels-last feature map:
        ``passes/channels_last.py``; a permuting alias's root is written by name)."""
        t = self.tensors[name]
        root = self.tensors.get(t.view_of) if t.view_of else None
        if root is None or t.offset or t.nbytes != root.nbytes or t.is_contiguous \
                or not dense_strides(t.shape, t.element_strides()):
            return False
        named = {n for node in self.nodes for v in node.args.values() for n in refs(v)}
        named.update(n for node in self.nodes for n in node.outputs)
        return root.name not in named and root.name not in self.inputs + self.outputs and \
            not any(v.view_of == root.name for v in self.tensors.values() if v is not t)

    def rename(self, old: str, new: str) -> None:
        """Make every node argument, view and graph output naming ``old`` name ``new``."""
        for node in self.nodes:
            node.args = {k: _renamed(v, old, new) for k, v in node.args.items()}
        for t in self.tensors.values():
            if t.view_of == old:
                t.view_of = new
        self.outputs = [new if n == old else n for n in self.outputs]

    def all_nodes(self) -> list[Node]:
        """The program's nodes and, in place of each delegate call, its reference program."""
        return [n for node in self.nodes for n in (
            self.delegates[node.args["delegate"]].nodes if node.op == DELEGATE_CALL else [node])]

    def producers(self) -> dict[str, Node]:
        """The node writing each node output, by tensor name."""
        return {out: node for node in self.nodes for out in node.outputs}

    def readers(self) -> dict[str, list[Node]]:
        """The nodes reading each tensor name (out and scratch arguments excluded)."""
        found: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node_inputs(node):
                found.setdefault(name, []).append(node)
        return found

    def used_tensors(self) -> list[str]:
        """Tensors the program touches (I/O, node args) plus the roots of the views among them."""
        used = dict.fromkeys(self.inputs + self.outputs)
        for node in self.all_nodes() + self.nodes:
            used.update(dict.fromkeys(n for v in node.args.values() for n in refs(v)))
        return list(dict.fromkeys([*(self.storage_of(n) for n in used), *used]))

    def constant_roots(self, used: list[str] | None = None) -> list[str]:
        """The used constants owning their storage (one bundle segment each); ``used``: the
        program's ``used_tensors()`` if the caller has them."""
        return [n for n in (self.used_tensors() if used is None else used)
                if self.tensors[n].kind == "const" and not self.tensors[n].view_of]

    def weight_bytes(self) -> int:
        """Bytes of the constant segments a bundle stores: weights and delegate payloads."""
        return (sum(self.tensors[n].data.nbytes for n in self.constant_roots())
                + sum(b.nbytes for d in self.delegates for b in d.payload.values()))

    def is_const(self, name: str) -> bool:
        """Whether ``name`` is a constant or a view of one."""
        return self.tensors[self.storage_of(name)].kind == "const"

    def const_value(self, name: str) -> np.ndarray:
        """The value of a constant or of a view of one (a read-only numpy view, no copy)."""
        t = self.tensors[name]
        root = self.tensors[self.storage_of(name)].data
        if t.view_of is None:
            return root
        flat = root.reshape(-1)
        strides = tuple(s * flat.itemsize for s in t.element_strides())
        return np.lib.stride_tricks.as_strided(flat[t.offset:], t.shape, strides, writeable=False)


def _renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, Ref):
        return Ref(new) if value.name == old else value
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


def refs(value: Any) -> Iterator[str]:
    """Tensor names referenced by an argument value (a Ref or a list containing Refs)."""
    if isinstance(value, Ref):
        yield value.name
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from refs(item)




def node_inputs(node: Node) -> list[str]:
    """Names of the tensors a node reads, excluding its out arguments and its scratch."""
    return [n for key, v in node.args.items()
            if key not in node.out_names and key not in SCRATCH_ARGS for n in refs(v)]
