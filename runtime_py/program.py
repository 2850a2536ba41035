"""Execute a loaded bundle: arenas allocated once, every tensor a fixed numpy view, kernels bound
to their arguments at load. ``run`` copies the inputs in and calls the kernels; nothing else."""

from __future__ import annotations

import contextvars
import functools
import gc
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime_py.backends import BACKENDS, Backend, Estimate, Partition
from runtime_py.buckets import Bucket
from runtime_py.errors import (
    BundleError,
    InputError,
    MissingBackendError,
    ProgramBusyError,
    ProgramClosedError,
)
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import (
    DELEGATE_CALL,
    DTYPES,
    SCRATCH_ARGS,
    SEGMENT_ALIGNMENT,
    contiguous_strides,
)
from runtime_py.kernels import KERNELS, Bound, configure_numpy
from runtime_py.loader import (
    LoadedBundle,
    ints,
    layout_views,
    load_bundle,
    output_names,
    shared_arenas,
    state_bytes,
)
from runtime_py.threads import Fixed, Governor, policy, set_blas_threads


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of a program input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Call:
    """A kernel call prepared at load; ``op``, ``source`` and ``shapes`` (its tensor arguments'
    shapes, e.g. ``"input 1x16x8x8, weight 32x16x1x1 -> 1x32x8x8"``) are kept for profiling."""

    op: str
    run: Bound
    source: str
    shapes: str = ""


# Feature maps a bundle stores channels-last (the export's ``channels_last`` pass) are bound so
# where numpy's BLAS lacks OpenBLAS's small-matrix kernel (``linalg.small_kernel``), else
# row-major (the same bytes: such a map is the one view of its storage, ``loader.layout_views``):
# with the SkylakeX kernels the 1x1 convolutions' products in the orientations channels-last
# maps need took 1.3-1.6x their time (2.2x over 9 positions) and mobilenet_v2 1.15x, with the
# Haswell kernels it gains (docs/cpu-speed.md, "Channels-last feature maps"). None: ask the BLAS.
CHANNELS_LAST: bool | None = None


def channels_last_maps() -> bool:
    """Whether to bind maps stored channels-last as such (CHANNELS_LAST, or the BLAS)."""
    from runtime_py.kernels import linalg  # shipped wherever convolutions are (nn uses it)

    return not linalg.small_kernel() if CHANNELS_LAST is None else CHANNELS_LAST


class _Shared:
    """What all methods of one loaded bundle share: one arena per tier (as large as the largest
    method's), the state memory with its initial bytes, the run lock and the methods."""

    def __init__(self, loaded: LoadedBundle, methods: list[LoadedBundle]) -> None:
        self.arenas = {tier: _aligned_zeros(size) for tier, size in
                       shared_arenas(methods).items()}
        self.state = _aligned_zeros(state_bytes(loaded.bundle))
        self.init = [(self.state[s.offset:s.offset + s.size],
                      None if s.initial == -1 else _segment(loaded, s.initial))
                     for s in loaded.bundle.state or []]
        self.busy = threading.Lock()  # one run at a time: a second one fails at once
        self.programs: dict[str, Program] = {}
        self.entries: dict[str, list[Program]] = {}  # entry point -> its buckets, smallest first

    def add(self, program: Program) -> None:
        """Register a method (a bucket also under its entry point, smallest first)."""
        self.programs[program.name] = program
        if program.dim is not None and not program.dim.symbolic:
            group = self.entries.setdefault(program.loaded.bundle.entry, [])
            group.append(program)
            group.sort(key=lambda p: p.dim.size)

    def reset(self) -> None:
        """Every state buffer back to its initial bytes."""
        for view, init in self.init:
            if init is None:
                view.fill(0)
            else:
                np.copyto(view, init)


class Program:
    """A runnable bundle (its first method; the others through ``method(name)``). Create with
    ``Program.load(path)``."""

    def __init__(self, loaded: LoadedBundle, backends: dict[str, Backend] | None = None, *,
                 shared: _Shared | None = None, threads: int | None = None) -> None:
        self.loaded: LoadedBundle | None = loaded  # None once closed
        self.path = loaded.path
        bundle = loaded.bundle
        self.name = loaded.method_name
        self.backends = {**BACKENDS, **(backends or {})}
        _check_backends(loaded, self.backends)
        methods = loaded.methods() if shared is None else []  # the first builds the others
        self._shared = shared = shared or _Shared(loaded, methods)
        self.arenas = [shared.arenas[a.tier][:a.size] for a in (bundle.plan.arenas or [])]
        self.workspaces: dict[int, np.ndarray] = {}  # delegate -> its reference's workspace
        relaid = layout_views(bundle)
        row_major = relaid if relaid and not channels_last_maps() else frozenset()
        self.tensors: list[np.ndarray | None] = [  # delegate workspaces: on first reference()
            None if t.storageKind == StorageKind.Delegate else
            self._checked_view(i, t, i in row_major) for i, t in enumerate(bundle.tensors or [])]
        self.partitions: list[Partition] = []
        self.inputs = [self._spec(i) for i in ints(bundle.inputs)]
        self.outputs = [self._spec(i, name) for i, name in zip(ints(bundle.outputs),
                                                               output_names(bundle), strict=True)]
        self._input_views = [self.tensors[i] for i in ints(bundle.inputs)]
        self._output_views = [self.tensors[i] for i in ints(bundle.outputs)]
        self._places = list(zip(self.inputs, self._input_views, strict=True))
        # The kernels' numpy mode, set once in a context of the program's own: a run neither
        # pays for switching numpy settings nor changes the caller's.
        self._numpy = contextvars.copy_context()
        self._numpy.run(configure_numpy)
        # BLAS threads (and a delegate's): the caller's, else the board recipe's, else 1
        self.thread_policy: Fixed | Governor = policy(threads or bundle.threads or 1)
        # What a backend times at load (``Fastest``'s race) runs at the program's count, not at
        # whatever count the process's last program left.
        set_blas_threads(self.thread_policy.most)
        self.calls = self._numpy.run(lambda: [self._bind(node) for node in bundle.nodes or []])
        self._execute_all = functools.partial(self._numpy.run, self._execute)
        self._busy = shared.busy
        self.closed = False
        self.dim = Bucket.of(bundle)  # the bucket's (or symbolic method's) dynamic dim, if any
        # Per caller size other than the dim's size: a bucket's cut views (_Sized), a symbolic
        # method's program at that size.
        self._sized: dict[int, _Sized | Program] = {}
        if methods:
            for program in [self, *(Program(m, backends, shared=shared, threads=threads)
                                    for m in methods[1:])]:
                shared.add(program)
            shared.reset()

    @classmethod
    def load(cls, path: str | Path, backends: dict[str, Backend] | None = None, *,
             verify_segments: bool = True, max_arena_bytes: int | None = None,
             threads: int | None = None) -> Program:
        """Map, validate and prepare a bundle for running; ``backends`` add to or replace
        ``runtime_py.backends.BACKENDS`` by name (e.g. an Ethos-U with a device driver);
        ``verify_segments=False`` skips the weights' CRC-32s and ``max_arena_bytes`` bounds
        the arenas (see ``load_bundle``) and what a delegate backend allocates per partition
        (LiteRT's tensors); ``threads`` caps the threads of a run, BLAS's and the XNNPACK
        delegate's engine's (default: the board recipe's, else 1; with more than 1 the runtime
        falls back to 1 while that runs faster, see ``runtime_py.threads``)."""
        if threads is not None and threads < 1:
            raise InputError("threads", "at least 1", str(threads), "pass threads=1 or more")
        return cls(load_bundle(path, verify_segments=verify_segments,
                               max_arena_bytes=max_arena_bytes), backends, threads=threads)

    @property
    def arena_bytes(self) -> int:
        """Total bytes of all arenas (shared by all methods)."""
        return sum(a.nbytes for a in self._shared.arenas.values())

    @property
    def state_bytes(self) -> int:
        """Bytes of the persistent state (shared by all methods)."""
        return self._shared.state.nbytes

    @property
    def methods(self) -> list[str]:
        """The names of the bundle's methods (a bucketed entry point's buckets among them)."""
        return list(self._shared.programs)

    @property
    def entries(self) -> list[str]:
        """The bucketed entry points (``method(name)`` runs the bucket fitting the inputs)."""
        return list(self._shared.entries)

    def method(self, name: str) -> Program:
        """The method ``name``, or an entry point's smallest bucket (whose ``run`` picks the
        bucket for the inputs' size). Methods share arenas, state and the run lock."""
        found = self._shared.programs.get(name) or (self._shared.entries.get(name) or [None])[0]
        if found is None:
            raise InputError(f"method {name!r}", f"one of {self.methods + self.entries}",
                             "no such method",
                             "list them with nee-inspect")
        return found

    def reset(self) -> None:
        """Set the state (e.g. a KV cache) back to its initial bytes, as after loading."""
        self._start()
        try:
            self._shared.reset()
        finally:
            self._busy.release()

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run once. Returns views of the output tensors, valid until the next run of any
        method. A bucketed method runs the entry point's smallest bucket that fits the inputs.

        One run at a time per program: it owns one arena. A run started while another is in
        progress (another thread) raises ProgramBusyError at once; load one program per
        thread, and copy outputs that must outlive the next run."""
        if self.dim is not None:
            return self._symbolic_run(inputs) if self.dim.symbolic else self._bucket_run(inputs)
        return self._run(inputs, self.set_inputs, self._output_views)

    def _run(self, inputs: Sequence[np.ndarray], set_inputs: Callable[[Sequence[np.ndarray]], None],
             outputs: list[np.ndarray]) -> list[np.ndarray]:
        self._start()
        try:  # no context manager here: it would allocate on every run
            set_inputs(inputs)
            self._run_all()
        except InputError:
            raise
        except _INPUT_ERRORS as e:  # a kernel refusing the input values (e.g. token ids)
            raise self._value_error(e) from e
        finally:
            self._busy.release()
        return outputs

    def bucket(self, *inputs: np.ndarray) -> Program:
        """The bucket of this method's entry point that runs ``inputs`` (itself if not
        bucketed, a symbolic method included): the smallest at least as large as their size
        along the dim."""
        if self.dim is None or self.dim.symbolic:
            return self
        return self._bucket_for(_dim_size(self, inputs))

    def _bucket_for(self, size: int) -> Program:
        return next(p for p in self._shared.entries[self.loaded.bundle.entry]
                    if p.dim.size >= size)

    def _bucket_run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        size = _dim_size(self, inputs)
        target = self._bucket_for(size)
        if size == target.dim.size:
            return target._run(inputs, target.set_inputs, target._output_views)
        sized = target._sized.get(size) or target._sized.setdefault(size, _Sized(target, size))
        return target._run(inputs, sized.set_inputs, sized.outputs)

    def _symbolic_run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        target = self._at_inputs(inputs)
        return target._run(inputs, target.set_inputs, target._output_views)

    def _at_inputs(self, inputs: Sequence[np.ndarray]) -> Program:
        """The symbolic method's program at the inputs' size."""
        size = _dim_size(self, inputs)
        return self if size == self.dim.size else self._sized.get(size) or self._at(size)

    def prepare(self, *sizes: int) -> None:
        """Validate and prepare a symbolic method's calls at ``sizes`` of its dim now (all sizes
        of its range if none are given) rather than on each size's first run."""
        d = self.dim
        if d is None or not d.symbolic:
            return
        wrong = [s for s in sizes if not d.min <= s <= d.max]
        if wrong:
            raise InputError(f"sizes of dim {d.name}", f"sizes in [{d.min}, {d.max}]", str(wrong),
                             "prepare sizes the method accepts")
        for size in sizes or range(d.min, d.max + 1):
            if size != d.size and size not in self._sized:
                self._at(size)

    def _at(self, size: int) -> Program:
        """The symbolic method's program at ``size``: validated, prepared, kept."""
        program = Program(self.loaded.at_size(size), self.backends, shared=self._shared,
                          threads=self.thread_policy.most)
        return self._sized.setdefault(size, program)

    def _value_error(self, error: Exception) -> InputError:
        """The error a kernel raised on the input values, naming its call: found by running
        the calls again up to the one that raises (the inputs are still in the arena)."""
        where = "a kernel"
        for call in self.calls:
            try:
                self._numpy.run(call.run)
            except _INPUT_ERRORS:
                where = f"{call.op} at {call.source or '<unknown source>'}"
                break
        return InputError(f"program {self.path}: {where}", "input values its kernels accept "
                          "(e.g. token ids within the embedding table)",
                          f"{type(error).__name__}: {error}", "check the input values")

    def profile(self, *inputs: np.ndarray) -> list[tuple[Call, float]]:
        """Run once, timing each kernel call; returns (call, seconds) in execution order."""
        if self.dim is not None and self.dim.symbolic:
            target = self._at_inputs(inputs)
            if target is not self:
                return target.profile(*inputs)
        timings: list[tuple[Call, float]] = []
        self._start()
        try:
            set_blas_threads(self.thread_policy.most)
            self.set_inputs(inputs)
            self._numpy.run(self._execute, timings)
        finally:
            self._busy.release()
        return timings

    def _start(self) -> None:
        """Take the run lock, or raise if already running (another thread) or closed."""
        if not self._busy.acquire(False):  # positional: 0.05 us less
            raise ProgramBusyError(f"program {self.path}", "one run at a time",
                                   "a run in progress on another thread",
                                   "load one Program per thread")
        if self.closed:
            self._busy.release()
            raise ProgramClosedError(f"program {self.path}", "an open program",
                                     "it was closed", "load the bundle again")

    def close(self) -> None:
        """Release the arenas and the bundle's memory map (and file) now, not when garbage
        collected; the program cannot run afterwards. Waits for a run in progress."""
        with self._busy:
            if self.closed:
                return
            data = self.loaded.data
            for program in self._shared.programs.values():
                program._release()
            self._shared.init, self._shared.arenas = [], {}
            try:
                data.close()
            except BufferError:  # views of the map still held in reference cycles
                gc.collect()
                data.close()

    def _release(self) -> None:
        """Drop everything viewing the map: tensors, prepared calls, payloads, tables."""
        for sized in self._sized.values():
            if isinstance(sized, Program):
                sized._release()
        self.closed = True
        self.calls, self.tensors, self.partitions, self.workspaces = [], [], [], {}
        self._input_views, self._output_views, self.arenas, self._sized = [], [], [], {}
        self._places = []
        self.loaded = None

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run_all(self) -> None:
        """Every kernel, with the BLAS threads the thread policy picks (and times for)."""
        self.thread_policy.run(self._execute_all)

    def _execute(self, timings: list[tuple[Call, float]] | None = None) -> None:
        """Call every kernel in order; with ``timings``, append each call's duration to it."""
        if timings is None:
            for call in self.calls:
                call.run()
            return
        for call in self.calls:
            start = time.perf_counter()
            call.run()
            timings.append((call, time.perf_counter() - start))

    def set_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        """Check count, shapes and dtypes of ``inputs``, then copy them into the arena."""
        if len(inputs) != len(self.inputs):
            raise InputError("program inputs", f"{len(self.inputs)} ({_specs(self.inputs)})",
                             f"{len(inputs)}", "pass one array per input, in order")
        for (spec, view), value in zip(self._places, inputs):  # noqa: B905 (length checked)
            _check_input(spec, value)
            view[...] = value  # an item copy: 0.25 us less a call than np.copyto

    def _checked_view(self, index: int, t: Any, row_major: bool = False) -> np.ndarray:
        try:
            return self._view(t, row_major)
        except ValueError as e:  # numpy's own check of shape, strides and buffer
            raise BundleError(f"{self.path}: tensor {index} ({t.name})",
                              "a view inside its storage", str(e),
                              "the bundle is corrupt; export it again") from e

    def _view(self, t: Any, row_major: bool = False) -> np.ndarray:
        """Tensor ``t``'s array; ``row_major``: with row-major strides in place of its own (a
        map in another dim order, ``layout_views``, that this runtime binds row-major)."""
        dtype = np.dtype(DTYPES[t.dtype])
        shape = tuple(ints(t.shape))
        strides = tuple(s * dtype.itemsize for s in (contiguous_strides(shape) if row_major
                                                     else ints(t.strides)))
        if t.storageKind == StorageKind.Delegate:
            buffer, offset = self.workspaces[t.storage], 0
        elif t.storageKind == StorageKind.State:
            buffer, offset = self._shared.state, self.loaded.bundle.state[t.storage].offset
        elif t.storageKind == StorageKind.Constant:
            seg = self.loaded.bundle.segments[t.storage]
            buffer, offset = self.loaded.data, self.loaded.segment_base + seg.offset
        else:
            buf = self.loaded.bundle.plan.buffers[t.storage]
            buffer, offset = self.arenas[buf.tier], buf.offset
        return np.ndarray(shape, dtype, buffer=buffer, offset=offset + t.byteOffset,
                          strides=strides)

    def _spec(self, index: int, name: str = "") -> TensorSpec:
        t = self.loaded.bundle.tensors[index]
        return TensorSpec(name or t.name, tuple(ints(t.shape)), DTYPES[t.dtype])

    def _bind(self, node: Any) -> Call:
        if node.op == DELEGATE_CALL:
            return self._delegate_call(node)
        what = f"{self.loaded.path}: node {node.op} ({node.source or 'no source'})"
        try:
            return self._prepare(node, what)
        except _BIND_ERRORS as e:  # the kernel's own checks at prepare: arguments it cannot use
            raise BundleError(what, "arguments its kernel can prepare",
                              f"{type(e).__name__}: {e}",
                              "the bundle is corrupt or from another toolchain; export again"
                              ) from e

    def _prepare(self, node: Any, what: str) -> Call:
        kwargs = {arg.name: self._arg_value(arg) for arg in node.args or []}
        kernel = KERNELS[node.op]
        hint = "export with a toolchain matching this runtime"
        try:
            inspect.signature(kernel.fn).bind(**kwargs)
        except TypeError as e:
            raise BundleError(what, "arguments the runtime's kernel takes", str(e), hint) from e
        if kernel.check is not None:  # the rule before anything else looks at the arguments
            kernel.check(**kwargs)
        scratch = kwargs.get("scratch")
        if kernel.scratch is not None and scratch is not None:
            shapes = {k: v for k, v in kwargs.items() if k != "scratch"}
            least = kernel.scratch(**shapes, budget=0)  # the smallest workspace it can use
            if scratch.nbytes < least:
                raise BundleError(what, f"a scratch of at least {least} bytes",
                                  f"{scratch.nbytes} bytes", hint)
        return Call(node.op, kernel.bind(kwargs, check=False), node.source or "",
                    _kernel_shapes(kwargs))

    def _delegate_call(self, node: Any) -> Call:
        """Hand the partition to its backend (the CPU one for a fallback) to prepare."""
        index = next(int(a.ints[0]) for a in node.args if a.name == "delegate")
        d = self.loaded.bundle.delegates[index]
        scratch, fast = (next((self.tensors[int(a.tensors[0])] for a in node.args
                               if a.name == key), None) for key in SCRATCH_ARGS)
        partition = Partition(
            index, d.backend, d.target, {kv.key: kv.value for kv in d.compileSpecs or []},
            {p.name: self.segment(p.segment) for p in d.payload or []},
            [self.tensors[k] for k in ints(d.inputs)], [self.tensors[k] for k in ints(d.outputs)],
            ints(d.inputOffsets), ints(d.outputOffsets), scratch, fast,
            _estimate(d.estimate), functools.partial(self._reference, index),
            self.thread_policy.most, self.loaded.max_arena_bytes)
        self.partitions.append(partition)
        backend = self.backends.get(d.backend, self.backends["cpu"])
        return Call(f"{DELEGATE_CALL}[{index}]", backend.prepare(partition),
                    f"partition {index}: {len(d.nodes or [])} calls for {d.backend} "
                    f"{d.target}", _shapes([("", v) for v in partition.inputs], partition.outputs))

    def _reference(self, index: int) -> list[Bound]:
        """Bind delegate ``index``'s reference program, its workspace allocated once."""
        d = self.loaded.bundle.delegates[index]
        if index not in self.workspaces:
            self.workspaces[index] = _aligned_zeros(d.workspace)
            for k, t in enumerate(self.loaded.bundle.tensors):
                if t.storageKind == StorageKind.Delegate and t.storage == index:
                    self.tensors[k] = self._view(t)
        return [self._bind(node).run for node in d.nodes or []]

    def segment(self, index: int) -> np.ndarray:
        """Constant segment ``index``: a read-only uint8 view of the mapped file."""
        return _segment(self.loaded, index)

    def _arg_value(self, arg: Any) -> Any:
        kind = arg.kind
        if kind == ArgKind.Tensor:
            return self.tensors[int(arg.tensors[0])]
        if kind == ArgKind.TensorList:
            return [self.tensors[int(i)] for i in arg.tensors]
        if kind == ArgKind.OptionalTensorList:
            present = iter(ints(arg.tensors))
            return [self.tensors[next(present)] if flag else None for flag in ints(arg.ints)]
        return _SCALARS[kind](arg)


# What a kernel raises at run on input values it cannot take (an index out of range, an
# integer power with a negative exponent).
_INPUT_ERRORS = (IndexError, ZeroDivisionError, ValueError)
# What preparing a kernel raises on arguments it cannot use (shapes, kinds, values).
_BIND_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError,
                OverflowError, NotImplementedError)

_SCALARS: dict[int, Callable[[Any], Any]] = {
    ArgKind.None_: lambda a: None,
    ArgKind.Int: lambda a: int(a.ints[0]),
    ArgKind.Float: lambda a: float(a.floats[0]),
    ArgKind.Bool: lambda a: bool(a.ints[0]),
    ArgKind.IntList: lambda a: tuple(ints(a.ints)),
    ArgKind.FloatList: lambda a: tuple(float(f) for f in a.floats),
    ArgKind.BoolList: lambda a: tuple(bool(i) for i in a.ints),
    ArgKind.String: lambda a: a.str,
}


def _segment(loaded: LoadedBundle, index: int) -> np.ndarray:
    seg = loaded.bundle.segments[index]
    return np.frombuffer(loaded.data, np.uint8, seg.size, loaded.segment_base + seg.offset)


class _Sized:
    """A bucket run at a smaller size: the inputs' first ``size`` positions along the dim and
    the padding after them, and the outputs cut to ``size``; made on a size's first run."""

    def __init__(self, program: Program, size: int) -> None:
        d = program.dim
        self.specs = [_resized(spec, axis, size) for spec, axis in
                      zip(program.inputs, d.input_axes, strict=True)]
        self.places = [_split(view, axis, size) for view, axis in
                       zip(program._input_views, d.input_axes, strict=True)]
        self.outputs = [_split(view, axis, size)[0] for view, axis in
                        zip(program._output_views, d.output_axes, strict=True)]

    def set_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        for spec, value, (view, padding) in zip(self.specs, inputs, self.places, strict=True):
            _check_input(spec, value)
            view[...] = value
            if padding is not None:
                padding.fill(0)


def _resized(spec: TensorSpec, axis: int, size: int) -> TensorSpec:
    shape = list(spec.shape)
    if axis >= 0:
        shape[axis] = size
    return TensorSpec(spec.name, tuple(shape), spec.dtype)


def _split(view: np.ndarray, axis: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``view``'s first ``size`` positions along ``axis`` and the rest (None: no axis)."""
    if axis < 0:
        return view, None
    head = (slice(None),) * axis
    return view[(*head, slice(None, size))], view[(*head, slice(size, None))]


def _dim_size(program: Program, inputs: Sequence[np.ndarray]) -> int:
    """The inputs' size along the program's dynamic dim, checked against its range."""
    d = program.dim
    if len(inputs) != len(program.inputs):
        raise InputError("program inputs", f"{len(program.inputs)} ({_specs(program.inputs)})",
                         f"{len(inputs)}", "pass one array per input, in order")
    sizes = {spec.name: np.shape(value)[axis] if np.ndim(value) > axis else None
             for spec, value, axis in zip(program.inputs, inputs, d.input_axes, strict=True)
             if axis >= 0}
    found = set(sizes.values())
    if len(found) != 1 or None in found or not d.min <= next(iter(found)) <= d.max:
        sizes_of = ", ".join(f"{name}: {size}" for name, size in sizes.items())
        served = "a symbolic program" if d.symbolic else "buckets " + str(
            [p.dim.size for p in program._shared.entries[program.loaded.bundle.entry]])
        raise InputError(f"dynamic dim {d.name} of method "
                         f"{program.loaded.bundle.entry or program.name}",
                         f"one size in [{d.min}, {d.max}] ({served})",
                         sizes_of, "cut or split the input to the allowed range")
    return next(iter(found))


def _check_backends(loaded: LoadedBundle, backends: dict[str, Backend]) -> None:
    """Every delegate's backend is present, or the delegate has a CPU fallback (all listed)."""
    missing = sorted({f"{d.backend} (partition {i}, {d.target})"
                      for i, d in enumerate(loaded.bundle.delegates or [])
                      if d.backend not in backends and not d.cpuFallback})
    if missing:
        raise MissingBackendError(
            f"{loaded.path}: {len(missing)} delegated partition(s)",
            f"backends this runtime has ({', '.join(sorted(backends))})",
            "missing: " + ", ".join(missing),
            "use a runtime built with that backend, or export with a CPU fallback")


def _estimate(e: Any) -> Estimate | None:
    if e is None:
        return None
    return Estimate(e.cycles, e.clockHz, e.macs, e.sramBytes, e.flashBytes,
                    tuple(zip(e.opNames or [], ints(e.opCycles), strict=True)))


def _aligned_zeros(size: int) -> np.ndarray:
    raw = np.zeros(size + SEGMENT_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % SEGMENT_ALIGNMENT
    return raw[start : start + size]


def _check_input(spec: TensorSpec, value: Any) -> None:
    if isinstance(value, np.ndarray) and value.shape == spec.shape and value.dtype == spec.dtype:
        return
    if not isinstance(value, np.ndarray):
        raise InputError(f"input {spec.name}", f"a numpy array {spec.dtype}{list(spec.shape)}",
                         type(value).__name__, "convert it with np.asarray(..., dtype=...)")
    raise InputError(f"input {spec.name}", f"{spec.dtype}{list(spec.shape)}",
                     f"{value.dtype}{list(value.shape)}",
                     "bundles have fixed shapes and dtypes; cast the array or re-export "
                     "with example inputs of this shape")


def _specs(specs: list[TensorSpec]) -> str:
    return ", ".join(str(s) for s in specs)


def _shapes(inputs: Sequence[tuple[str, np.ndarray]], outputs: Sequence[np.ndarray]) -> str:
    """A call's tensors as ``"name AxB, ... -> CxD, ..."`` (unnamed where the name is empty)."""
    def size(a: np.ndarray) -> str:
        return "x".join(map(str, a.shape)) or "scalar"

    ins = ", ".join(f"{name} {size(a)}" if name else size(a) for name, a in inputs)
    return f"{ins} -> {', '.join(map(size, outputs))}"


def _kernel_shapes(args: dict[str, Any]) -> str:
    """``_shapes`` of a kernel call's tensor arguments: ``out`` the output, workspaces left
    out."""
    tensors = {k: v for k, v in args.items() if isinstance(v, np.ndarray)}
    return _shapes([(k, v) for k, v in tensors.items() if k != "out" and k not in SCRATCH_ARGS],
                   [tensors["out"]] if "out" in tensors else [])
