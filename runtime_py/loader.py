"""Load a .nee bundle: memory-map it, decode it and validate everything once.

After ``load_bundle`` returns, the executor trusts the bundle and runs without checks.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import mmap
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime_py import build_info
from runtime_py.buckets import bucket_problems
from runtime_py.dataflow import dataflow_problems, extent, ints, layout_problems
from runtime_py.errors import BundleError, MissingKernelsError
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.Bundle import Bundle, BundleT
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import (
    DELEGATE_CALL,
    DTYPES,
    FILE_IDENTIFIER,
    FOOTER_BYTES,
    FOOTER_MAGIC,
    SCHEMA_VERSION,
    SCRATCH_ARGS,
    SEGMENT_ALIGNMENT,
    SIZE_PREFIX_BYTES,
    align,
    contiguous_strides,
    dense_strides,
    segment_base,
)
from runtime_py.kernels import KERNELS
from runtime_py.symbolic import at_size, expr_problems, is_symbolic

DEFAULT_METHOD = "forward"  # the root program's method name when the bundle gives none
MAX_THREADS = 256  # BLAS threads a bundle may ask for
# A method's own program fields, which a Method table holds under the Bundle's names.
_METHOD_FIELDS = ("methodName", "entry", "dims", "tensors", "inputs", "outputs", "nodes", "plan",
                  "outputNames", "delegates", "testVectors")
_DECODE_ERRORS = (IndexError, struct.error, ValueError, UnicodeDecodeError, TypeError,
                  AttributeError, OverflowError)


@dataclass(frozen=True)
class LoadedBundle:
    """A validated bundle: the decoded tables and the mapped file holding the constants."""

    path: str
    bundle: BundleT  # the whole bundle, or one method's view of it (see ``methods``)
    data: mmap.mmap
    segment_base: int
    max_arena_bytes: int | None = None  # the caller's memory limit (delegates' own too)

    @property
    def method_name(self) -> str:
        """The name of the method ``bundle`` holds (the root program's, for a whole bundle)."""
        return self.bundle.methodName or DEFAULT_METHOD

    def methods(self) -> list[LoadedBundle]:
        """One LoadedBundle per method, the root program's first: the bundle's shared tables
        (segments, state, kernels) with that method's program fields."""
        return [self] + [dataclasses.replace(self, path=f"{self.path}#{m.name}",
                                             bundle=_method_view(self.bundle, m))
                         for m in self.bundle.methods or []]

    def at_size(self, size: int) -> LoadedBundle:
        """A symbolic method's program at ``size`` of its dim (in range), validated like any
        program's tables: BundleError if they are not valid at that size."""
        view = dataclasses.replace(self, path=f"{self.path}[{self.bundle.dims[0].name}={size}]",
                                   bundle=at_size(self.bundle, size))
        _check_method(view)
        return view


def load_bundle(path: str | Path, *, check_kernels: bool = True,
                verify_segments: bool = True, max_arena_bytes: int | None = None
                ) -> LoadedBundle:
    """Map and fully validate ``path``; raise BundleError naming the first problem found.

    The flatbuffer's CRC-32 (the footer) is checked before it is decoded. ``check_kernels=False``
    skips only the check that this runtime has every kernel (inspection);
    ``verify_segments=False`` skips the segments' CRC-32s (the weights and payloads), for
    boot-time-critical loads of a file whose storage is trusted. ``max_arena_bytes`` bounds
    the arenas' total (each arena is also bounded by its buffers and its tier's capacity).
    """
    path = str(path)
    data = _map(path)
    size = _check_header(path, data)
    _check_footer(path, data, size)
    try:
        bundle = BundleT.InitFromObj(Bundle.GetRootAs(data, SIZE_PREFIX_BYTES))
        for program in [bundle, *(bundle.methods or [])]:
            _decode_strings(program)
    except _DECODE_ERRORS as e:
        raise BundleError(path, "a well-formed NEE flatbuffer", f"corrupt data ({e})",
                          "the file is damaged; export it again") from e
    loaded = LoadedBundle(path, bundle, data, segment_base(size), max_arena_bytes)
    _validate(loaded, check_kernels, verify_segments, max_arena_bytes)
    return loaded


def _method_view(bundle: BundleT, method: Any) -> BundleT:
    """A BundleT holding ``method``'s program and ``bundle``'s shared tables."""
    view = BundleT()
    view.__dict__.update(bundle.__dict__)
    view.methods = None
    for name in _METHOD_FIELDS:
        setattr(view, name, getattr(method, "name" if name == "methodName" else name))
    return view


def _decode_strings(program: Any) -> None:
    """flatc's object API leaves string vectors as bytes: decode a program's in place."""
    if program.outputNames is not None:
        program.outputNames = [n.decode("utf-8") for n in program.outputNames]
    for d in program.delegates or []:
        if d.estimate is not None and d.estimate.opNames is not None:
            d.estimate.opNames = [n.decode("utf-8") for n in d.estimate.opNames]


def _map(path: str) -> mmap.mmap:
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError as e:
        raise BundleError(path, "an existing .nee file", "no such file", "check the path") from e
    except (OSError, ValueError) as e:  # ValueError: empty file cannot be mapped
        raise BundleError(path, "a readable, non-empty .nee file", str(e) or "an empty file",
                          "export the model again with nee-export") from e


def _check_header(path: str, data: mmap.mmap) -> int:
    if len(data) < 12:
        raise BundleError(path, "a NEE bundle of at least 12 bytes", f"{len(data)} bytes",
                          "the file is truncated or not a NEE bundle")
    ident = bytes(data[8:12])
    if ident != FILE_IDENTIFIER:
        raise BundleError(path, f"file identifier {FILE_IDENTIFIER!r} at byte 8", repr(ident),
                          "this is not a NEE bundle; create one with nee-export")
    (size,) = struct.unpack_from("<I", data, 0)
    if SIZE_PREFIX_BYTES + size > len(data):
        raise BundleError(path, f"{SIZE_PREFIX_BYTES + size} bytes of flatbuffer",
                          f"a file of {len(data)} bytes", "the file is truncated; copy it again")
    return size


def _check_footer(path: str, data: mmap.mmap, size: int) -> None:
    """The file ends in the footer, whose CRC-32 matches the size prefix and flatbuffer."""
    end = SIZE_PREFIX_BYTES + size
    hint = ("the file is truncated or damaged, or was written by an older NEE (bundle schema "
            f"below {SCHEMA_VERSION}): copy or export it again")
    if len(data) < end + FOOTER_BYTES or data[-FOOTER_BYTES:-4] != FOOTER_MAGIC:
        raise BundleError(path, f"the {FOOTER_BYTES}-byte footer {FOOTER_MAGIC!r} + CRC-32 at the "
                          "end", repr(bytes(data[-FOOTER_BYTES:])), hint)
    (stored,) = struct.unpack_from("<I", data, len(data) - 4)
    found = zlib.crc32(memoryview(data)[:end])
    if found != stored:
        raise BundleError(path, f"flatbuffer CRC-32 {stored:#010x} (the footer's)",
                          f"{found:#010x}", hint)


def _validate(b: LoadedBundle, check_kernels: bool, verify_segments: bool,
              max_arena_bytes: int | None) -> None:
    bundle = b.bundle
    if bundle.schemaVersion != SCHEMA_VERSION:
        raise BundleError(b.path, f"schema version {SCHEMA_VERSION}",
                          f"version {bundle.schemaVersion}",
                          "export the model with a toolchain matching this runtime")
    if bundle.threads > MAX_THREADS:
        raise _fail(b, "threads", f"at most {MAX_THREADS} BLAS threads", str(bundle.threads))
    _check_segments(b)
    if verify_segments:
        _check_segment_crcs(b)
    _check_state(b)
    methods = b.methods()
    _check_method_names(b, methods)
    for m in methods:
        _check_method(m)
    problems = bucket_problems([m.bundle for m in methods])
    if problems:
        raise _fail(b, f"{len(problems)} bucket problem(s)", "bucketed methods of one entry "
                    "point with one dim in range and matching inputs and outputs",
                    "; ".join(problems[:8]))
    _check_symbolic(b, methods)
    _check_memory_limit(b, methods, max_arena_bytes)
    _check_kernel_list(b)
    if check_kernels:
        _check_kernels_present(b)


def _check_method(b: LoadedBundle) -> None:
    """Everything about one method's program (``b`` a method's view)."""
    _check_plan(b)
    _check_arena_sizes(b)
    _check_tensors(b)
    _check_layout(b)
    _check_quantization(b)
    _check_nodes(b)
    _check_delegates(b)
    _check_lifetimes(b)
    _check_dataflow(b)
    _check_scalars(b)
    _check_test_vectors(b)


def _check_symbolic(b: LoadedBundle, methods: list[LoadedBundle]) -> None:
    """Each symbolic method's size expressions, and its program at the dim's min validated like
    any program (at the max it is the tables themselves; other sizes on their first run)."""
    symbolic = [m for m in methods if is_symbolic(m.bundle)]
    problems = [p for m in symbolic for p in expr_problems(m.bundle)]
    if problems:
        raise _fail(b, f"{len(problems)} size expression problem(s)", "expressions naming "
                    "integers of the tables once, with 1-3 bounded coefficients, giving the "
                    "stored values at the max and s along each input's dim axis",
                    "; ".join(problems[:8]))
    for m in symbolic:
        m.at_size(m.bundle.dims[0].min)


def _check_method_names(b: LoadedBundle, methods: list[LoadedBundle]) -> None:
    names = [m.method_name for m in methods]
    entries = {m.bundle.entry for m in methods if m.bundle.entry}
    clash = entries & {m.method_name for m in methods if not m.bundle.dims}
    if len(set(names)) != len(names) or clash:
        raise _fail(b, "method names", "distinct method names, no entry point named like a "
                    "method of its own", f"methods {names}, entry points {sorted(entries)}")


def state_bytes(bundle: BundleT) -> int:
    """Bytes of the bundle's state memory (its state buffers' aligned end)."""
    return max((align(s.offset + s.size) for s in bundle.state or []), default=0)


def _check_state(b: LoadedBundle) -> None:
    """State buffers: distinct names, 64-aligned, disjoint, initial bytes of their size."""
    state, segments = b.bundle.state or [], b.bundle.segments or []
    problems = [f"buffer {i} ({s.name}): " + p for i, s in enumerate(state) for p in (
        "no name" if not s.name else "",
        f"offset {s.offset} not a multiple of {SEGMENT_ALIGNMENT}"
        if s.offset % SEGMENT_ALIGNMENT else "",
        f"initial segment {s.initial} of {_size(segments, s.initial)} bytes for {s.size}"
        if s.initial != -1 and _size(segments, s.initial) != s.size else "") if p]
    order = sorted(range(len(state)), key=lambda k: state[k].offset)
    problems += [f"buffers {j} and {k} share bytes" for j, k in itertools.pairwise(order)
                 if state[j].offset + state[j].size > state[k].offset]
    names = [s.name for s in state]
    if len(set(names)) != len(names):
        problems.append(f"names {names} not distinct")
    if problems:
        raise _fail(b, f"{len(problems)} state problem(s)", "named, 64-aligned, disjoint state "
                    "buffers with initial bytes of their size", "; ".join(problems[:8]))


def _fail(b: LoadedBundle, what: str, expected: str, found: str) -> BundleError:
    return BundleError(f"{b.path}: {what}", expected, found,
                       "the bundle is corrupt or from an incompatible toolchain; export again")


def _check_segments(b: LoadedBundle) -> None:
    """Each segment 64-aligned and inside the file, no two sharing bytes."""
    limit = len(b.data) - FOOTER_BYTES
    segments = b.bundle.segments or []
    for i, seg in enumerate(segments):
        end = b.segment_base + seg.offset + seg.size
        if seg.offset % SEGMENT_ALIGNMENT or end > limit:
            raise BundleError(f"{b.path}: segment {i}",
                              f"a 64-aligned blob ending within {limit} bytes (before the footer)",
                              f"offset {seg.offset}, end {end}",
                              "the file is truncated or damaged; export it again")
    order = sorted(range(len(segments)), key=lambda k: segments[k].offset)
    for j, k in itertools.pairwise(order):
        if segments[j].offset + segments[j].size > segments[k].offset:
            raise _fail(b, f"segments {j} and {k}", "disjoint byte ranges",
                        f"[{segments[j].offset}, {segments[j].offset + segments[j].size}) and "
                        f"[{segments[k].offset}, {segments[k].offset + segments[k].size})")


def _most_elements(b: LoadedBundle) -> int:
    """The bytes of the bundle's arenas, delegate workspaces and segments: no tensor of a
    well-formed bundle has more elements (its output-sized views live there)."""
    arenas = sum(a.size for a in (b.bundle.plan.arenas if b.bundle.plan else []) or [])
    return (arenas + sum(d.workspace for d in b.bundle.delegates or [])
            + sum(s.size for s in b.bundle.segments or []) + state_bytes(b.bundle))


def _check_segment_crcs(b: LoadedBundle) -> None:
    """Every segment's bytes against its CRC-32; all mismatches listed."""
    view = memoryview(b.data)
    found = [zlib.crc32(view[b.segment_base + seg.offset:][:seg.size])
             for seg in b.bundle.segments or []]
    view.release()
    bad = [f"segment {i} (CRC-32 {crc:#010x}, stored {seg.crc32:#010x})"
           for i, (seg, crc) in enumerate(zip(b.bundle.segments or [], found, strict=True))
           if crc != seg.crc32]
    if bad:
        raise BundleError(f"{b.path}: {len(bad)} segment(s)", "bytes matching their CRC-32",
                          "; ".join(bad), "the weights are damaged; copy or export the file "
                          "again")


def _check_plan(b: LoadedBundle) -> None:
    plan = b.bundle.plan
    if plan is None or not plan.arenas:
        if any(t.storageKind == StorageKind.Arena for t in b.bundle.tensors or []):
            raise _fail(b, "memory plan", "at least one arena", "none")
        return
    for i, buf in enumerate(plan.buffers or []):
        if buf.tier >= len(plan.arenas):
            raise _fail(b, f"buffer {i}", f"a tier below {len(plan.arenas)}", str(buf.tier))
        arena = plan.arenas[buf.tier]
        if buf.offset % SEGMENT_ALIGNMENT or buf.offset + buf.size > arena.size:
            raise _fail(b, f"buffer {i}", f"a 64-aligned slot inside arena {arena.tier} "
                        f"of {arena.size} bytes", f"[{buf.offset}, {buf.offset + buf.size})")
    _check_overlaps(b)


def _check_arena_sizes(b: LoadedBundle) -> None:
    """Each arena exactly as large as its buffers need, within its tier's capacity: a bundle
    cannot ask for memory it does not use."""
    plan = b.bundle.plan
    if plan is None:
        return
    need = [0] * len(plan.arenas or [])
    for buf in plan.buffers or []:
        need[buf.tier] = max(need[buf.tier], buf.offset + align(buf.size))
    bad = [f"{a.tier}: {a.size} B for buffers needing {n} B" + (
        f", capacity {a.capacity} B" if a.capacity else "")
        for a, n in zip(plan.arenas or [], need, strict=True)
        if a.size != n or (a.capacity and a.size > a.capacity)]
    if bad:
        raise _fail(b, "arena sizes", "each the size its buffers need, within its capacity",
                    "; ".join(bad))


def shared_arenas(methods: list[LoadedBundle]) -> dict[str, int]:
    """Bytes per tier of the arenas all methods share: the largest any method plans."""
    sizes: dict[str, int] = {}
    for m in methods:
        for a in (m.bundle.plan.arenas if m.bundle.plan else None) or []:
            sizes[a.tier] = max(sizes.get(a.tier, 0), a.size)
    return sizes


def _check_memory_limit(b: LoadedBundle, methods: list[LoadedBundle], limit: int | None) -> None:
    """The shared arenas, the state and every delegate workspace within the caller's limit."""
    total = (sum(shared_arenas(methods).values()) + state_bytes(b.bundle)
             + sum(d.workspace for m in methods for d in m.bundle.delegates or []))
    if limit is not None and total > limit:
        raise BundleError(f"{b.path}: arenas, state and delegate workspaces",
                          f"at most {limit} bytes (the caller's limit)", f"{total} bytes",
                          "raise max_arena_bytes or use a smaller model")


def _check_overlaps(b: LoadedBundle) -> None:
    """No two buffers of one arena share bytes while both are live (sweep over first steps)."""
    buffers = b.bundle.plan.buffers or []
    live: list[int] = []
    for i in sorted(range(len(buffers)), key=lambda k: buffers[k].firstStep):
        new = buffers[i]
        if new.firstStep >= new.endStep:
            raise _fail(b, f"buffer {i}", "a lifetime first_step < end_step",
                        f"[{new.firstStep}, {new.endStep})")
        live = [j for j in live if buffers[j].endStep > new.firstStep]
        for j in live:
            old = buffers[j]
            if (old.tier == new.tier and old.offset < new.offset + new.size
                    and new.offset < old.offset + old.size):
                raise _fail(b, f"buffers {j} and {i}", "disjoint bytes while both are live",
                            f"[{old.offset}, {old.offset + old.size}) and "
                            f"[{new.offset}, {new.offset + new.size}) in tier {new.tier}")
        live.append(i)


def storage_size(b: LoadedBundle, kind: int, index: int) -> int | None:
    """Bytes of an arena buffer, constant segment or delegate workspace, or None if the index
    is out of range."""
    if kind == StorageKind.Delegate:
        delegates = b.bundle.delegates or []
        return delegates[index].workspace if index < len(delegates) else None
    if kind == StorageKind.State:
        state = b.bundle.state or []
        return state[index].size if index < len(state) else None
    pool = b.bundle.segments if kind == StorageKind.Constant else (
        b.bundle.plan.buffers if b.bundle.plan else None)
    if kind not in (StorageKind.Constant, StorageKind.Arena) or not pool or index >= len(pool):
        return None
    return pool[index].size


def _check_tensors(b: LoadedBundle) -> None:
    most = _most_elements(b)
    for i, t in enumerate(b.bundle.tensors or []):
        what = f"tensor {i} ({t.name})"
        if not 0 <= t.dtype < len(DTYPES):
            raise _fail(b, what, f"a dtype code below {len(DTYPES)}", str(t.dtype))
        shape, strides = list(ints(t.shape)), list(ints(t.strides))
        if len(shape) != len(strides) or min(shape + strides, default=0) < 0:
            raise _fail(b, what, "non-negative shape and strides of one rank",
                        f"shape {shape}, strides {strides}")
        if math.prod(shape) > most:
            raise _fail(b, what, f"at most {most} elements (the bytes of the bundle's arenas "
                        "and segments: a broadcast view feeds a node whose output is in them)",
                        f"shape {shape} ({math.prod(shape)} elements)")
        size = storage_size(b, t.storageKind, t.storage)
        if size is None:
            raise _fail(b, what, "a valid storage", f"kind {t.storageKind} index {t.storage}")
        end = extent(t)[1]
        if end > size:
            raise _fail(b, what, f"bytes within its storage of {size}", f"end at {end}")
        if t.storageKind == StorageKind.State and t.aliasOf < 0 and end != size:
            raise _fail(b, what, f"all {size} bytes of state buffer {t.storage}",
                        f"{end} bytes")
    n = len(b.bundle.tensors or [])
    for role, ids in (("input", b.bundle.inputs), ("output", b.bundle.outputs)):
        for k in ints(ids):
            if k >= n:
                raise _fail(b, f"{role} tensor index", f"below {n}", str(k))
    for k in ints(b.bundle.inputs):
        if b.bundle.tensors[k].storageKind != StorageKind.Arena:
            raise _fail(b, f"input {b.bundle.tensors[k].name}", "an arena tensor",
                        f"storage kind {b.bundle.tensors[k].storageKind}")
    for k in ints(b.bundle.outputs):
        if b.bundle.tensors[k].storageKind == StorageKind.Delegate:
            raise _fail(b, f"output {b.bundle.tensors[k].name}", "an arena tensor or a constant",
                        "a tensor in a delegate's workspace")
    names = b.bundle.outputNames
    count = len(ints(b.bundle.outputs))
    if names is not None and (len(names) != count or not all(names)
                              or len(set(names)) != len(names)):
        raise _fail(b, "output names", f"{count} distinct non-empty names", repr(names))
    bad = [a.output for a in b.bundle.accuracy or []
           if a.output not in output_names(b.bundle) or not a.samples
           or np.isnan(a.sqnrDb) or not a.maxAbsError >= 0]
    if bad:
        raise _fail(b, "accuracy records", "one per named output, with samples, an SQNR and a "
                    "non-negative error", f"bad records for {bad}")


def _check_layout(b: LoadedBundle) -> None:
    problems = layout_problems(b.bundle.tensors or [])
    if problems:
        raise _fail(b, f"{len(problems)} tensor layout problem(s)", "base tensors owning their "
                    "storage from byte 0, C-contiguous; views inside their base",
                    "; ".join(problems[:8]))


def _check_dataflow(b: LoadedBundle) -> None:
    """Every arena byte a node (or a delegate's reference node) reads, written before it and
    not overwritten since its first read."""
    tensors = b.bundle.tensors or []
    state = [k for k, t in enumerate(tensors)
             if t.storageKind == StorageKind.State and t.aliasOf < 0]  # written by earlier runs
    problems = dataflow_problems(tensors, b.bundle.nodes or [], ints(b.bundle.inputs) + state)
    for i, d in enumerate(b.bundle.delegates or []):
        problems += dataflow_problems(tensors, d.nodes or [], ints(d.inputs),
                                      f"delegate {i} node")
    if problems:
        raise _fail(b, f"{len(problems)} dataflow problem(s)", "every tensor read after the "
                    "nodes writing it, and not overwritten before its last read",
                    "; ".join(problems[:8]))


def _check_quantization(b: LoadedBundle) -> None:
    """Every quantized tensor's parameters, all problems listed at once."""
    problems = [f"tensor {i} ({t.name}): {problem}" for i, t in enumerate(b.bundle.tensors or [])
                if t.quantization is not None
                for problem in [_quantization_problem(t, t.quantization)] if problem]
    if problems:
        raise _fail(b, "quantization parameters", "integer tensors with one positive finite "
                    "scale (or one per index along axis) and one zero point per scale (or one "
                    "for all) in the dtype's range",
                    "; ".join(problems))


def _quantization_problem(t: Any, q: Any) -> str:
    dtype = np.dtype(DTYPES[t.dtype])
    scales, zeros = list(q.scale if q.scale is not None else []), list(ints(q.zeroPoint))
    shape = list(ints(t.shape))
    count = 1 if q.axis == -1 else shape[q.axis] if 0 <= q.axis < len(shape) else None
    if dtype.kind not in "iu":
        return f"dtype {dtype.name}"
    if count is None:
        return f"axis {q.axis} of a rank-{len(shape)} tensor"
    if len(scales) != count or len(zeros) not in (1, count):
        return f"{len(scales)} scales and {len(zeros)} zero points for {count}"
    if not all(np.isfinite(scales)) or min(scales, default=1) <= 0:
        return f"scales {scales[:4]}"
    info = np.iinfo(dtype)
    if min(zeros, default=0) < info.min or max(zeros, default=0) > info.max:
        return f"zero points {zeros[:4]} outside [{info.min}, {info.max}]"
    return ""


def layout_views(bundle: BundleT) -> frozenset[int]:
    """The tensors that are the one way to a root holding just their elements in another dim
    order (a channels-last feature map, ``toolchain/passes/channels_last.py``): whole views of
    an arena root that no node, partition or program I/O names and nothing else views. The
    runtime may bind such a tensor in either order: its bytes are its alone."""
    tensors = bundle.tensors or []
    named = set(ints(bundle.inputs)) | set(ints(bundle.outputs))
    for node in itertools.chain(bundle.nodes or [], *(d.nodes or [] for d in
                                                      bundle.delegates or [])):
        named.update(k for arg in node.args or [] for k in ints(arg.tensors))
        named.update(ints(node.outputs))
    for d in bundle.delegates or []:
        named.update(ints(d.inputs))
        named.update(ints(d.outputs))
    views = collections.Counter(t.aliasOf for t in tensors if t.aliasOf >= 0)
    return frozenset(i for i, t in enumerate(tensors) if 0 <= t.aliasOf < len(tensors)
                     and views[t.aliasOf] == 1 and t.aliasOf not in named
                     and _relaid(t, tensors[t.aliasOf]))


def _relaid(t: Any, root: Any) -> bool:
    """``t`` covers ``root``'s elements in another dense order, from its first byte."""
    shape, strides = ints(t.shape), ints(t.strides)
    return (t.storageKind == root.storageKind == StorageKind.Arena and t.dtype == root.dtype
            and t.storage == root.storage and t.byteOffset == root.byteOffset
            and math.prod(shape) == math.prod(ints(root.shape))
            and dense_strides(shape, strides) and strides != list(contiguous_strides(shape)))


def output_names(bundle: BundleT) -> list[str]:
    """The names the model gives its outputs (tensor names in bundles that store none)."""
    if bundle.outputNames is not None:
        return list(bundle.outputNames)
    return [bundle.tensors[k].name for k in ints(bundle.outputs)]


# Which Arg field each kind reads, and how many values it needs at least.
_ARG_FIELDS = {ArgKind.None_: (None, 0), ArgKind.Tensor: ("tensors", 1),
               ArgKind.TensorList: ("tensors", 0), ArgKind.Int: ("ints", 1),
               ArgKind.Float: ("floats", 1), ArgKind.Bool: ("ints", 1),
               ArgKind.IntList: ("ints", 0), ArgKind.FloatList: ("floats", 0),
               ArgKind.BoolList: ("ints", 0), ArgKind.String: ("str", 1),
               ArgKind.OptionalTensorList: ("tensors", 0)}


def _check_arg(b: LoadedBundle, where: str, arg: Any) -> None:
    if arg.kind not in _ARG_FIELDS or not arg.name:
        raise _fail(b, where, "a named argument of a known kind", f"kind {arg.kind}")
    field, least = _ARG_FIELDS[arg.kind]
    value = getattr(arg, field) if field else None
    count = 0 if value is None else 1 if isinstance(value, str) else len(value)
    if count < least:
        raise _fail(b, f"{where} arg {arg.name}", f"{least} value(s) in field {field}",
                    f"{count}")
    if arg.kind == ArgKind.OptionalTensorList:
        flags = ints(arg.ints)
        if set(flags) - {0, 1} or sum(flags) != count:
            raise _fail(b, f"{where} arg {arg.name}",
                        f"0/1 flags, one per entry, as many 1s as the {count} tensor(s)",
                        f"flags {flags}")


def _check_nodes(b: LoadedBundle) -> None:
    for i, node in enumerate(b.bundle.nodes or []):
        _check_node(b, f"node {i}", node, (StorageKind.State, None))


_OUT_ARG = re.compile(r"out\d*")  # the out arguments of out-variant kernels: out, out0, out1...


def _check_node(b: LoadedBundle, where: str, node: Any, writable: tuple[int, int | None]) -> None:
    """Op name, arguments and tensor indices of one node; its outputs in the arena or in
    ``writable`` = (storage kind, index or None for any): (State, None) for the program's
    nodes, (Delegate, k) for delegate k's reference program."""
    tensors = b.bundle.tensors or []
    if not node.op:
        raise _fail(b, where, "an operator name", "none")
    for arg in node.args or []:
        _check_arg(b, f"{where} {node.op}", arg)
        for k in ints(arg.tensors):
            if k >= len(tensors):
                raise _fail(b, f"{where} {node.op} arg {arg.name}", f"tensor < {len(tensors)}",
                            str(k))
    outs = set(ints(node.outputs))
    written = [k for arg in node.args or [] if _OUT_ARG.fullmatch(arg.name or "")
               for k in ints(arg.tensors)]
    if not set(written) <= outs:
        raise _fail(b, f"{where} {node.op} out arguments", f"tensors among its outputs "
                    f"{sorted(outs)}", str(written))
    kind, index = writable
    for k in ints(node.outputs):
        t = tensors[k] if k < len(tensors) else None
        if t is None or not (t.storageKind == StorageKind.Arena or (
                t.storageKind == kind and index in (None, t.storage))):
            raise _fail(b, f"{where} {node.op} output", "a tensor in the arena" + (
                f" or in delegate {index}'s workspace" if index is not None
                else " or in the state"), str(k))
        if not dense_strides(ints(t.shape), ints(t.strides)):
            raise _fail(b, f"{where} {node.op} output {t.name}",
                        f"the strides of its shape {ints(t.shape)} row-major in some order of "
                        f"its dims, e.g. {list(contiguous_strides(ints(t.shape)))} (kernels "
                        "write whole outputs)", str(ints(t.strides)))


def _check_delegates(b: LoadedBundle) -> None:
    """Each delegate: named backend and target, payload in segments, arena I/O with one offset
    each, a reference program writing its outputs, called once by a matching call node."""
    calls = [n for n in b.bundle.nodes or [] if n.op == DELEGATE_CALL]
    delegates = b.bundle.delegates or []
    called = [_int_arg(n, "delegate") for n in calls]
    if called != list(range(len(delegates))):
        raise _fail(b, "delegate calls", f"one {DELEGATE_CALL} per delegate, in order "
                    f"{list(range(len(delegates)))}", f"calls of {called}")
    for i, (d, call) in enumerate(zip(delegates, calls, strict=True)):
        problems = _delegate_problems(b, i, d, call)
        if problems:
            raise _fail(b, f"delegate {i} ({d.backend or '?'})", "a well-formed partition",
                        "; ".join(problems))
        for j, node in enumerate(d.nodes or []):
            if node.op == DELEGATE_CALL:
                raise _fail(b, f"delegate {i} node {j}", "a kernel call", DELEGATE_CALL)
            _check_node(b, f"delegate {i} node {j}", node, (StorageKind.Delegate, i))
    _check_workspace_reads(b)


def _check_workspace_reads(b: LoadedBundle) -> None:
    """A delegate's workspace tensors are used by its own reference program only (a runtime
    allocates a workspace only for the backend that asks for it): all misuses listed."""
    tensors = b.bundle.tensors or []
    owners = [(None, f"node {j}", n) for j, n in enumerate(b.bundle.nodes or [])]
    owners += [(i, f"delegate {i} node {j}", n) for i, d in enumerate(b.bundle.delegates or [])
               for j, n in enumerate(d.nodes or [])]
    problems = [f"{where} {node.op} uses tensor {k} of delegate {tensors[k].storage}"
                for owner, where, node in owners for arg in node.args or []
                for k in ints(arg.tensors) if tensors[k].storageKind == StorageKind.Delegate
                and tensors[k].storage != owner]
    if problems:
        raise _fail(b, "delegate workspaces", "each used by its own delegate's nodes only",
                    "; ".join(problems))


def _delegate_problems(b: LoadedBundle, i: int, d: Any, call: Any) -> list[str]:
    tensors, segments = b.bundle.tensors or [], b.bundle.segments or []
    ins, outs = ints(d.inputs), ints(d.outputs)
    payload = [(p.name, p.segment) for p in d.payload or []]
    e = d.estimate
    checks = [
        (bool(d.backend and d.target), f"backend {d.backend!r}, target {d.target!r}"),
        (all(name for name, _ in payload) and len({n for n, _ in payload}) == len(payload)
         and all(k < len(segments) for _, k in payload), f"payload {payload}"),
        (all(k < len(tensors) and tensors[k].storageKind == StorageKind.Arena
             for k in ins + outs), f"inputs {ins}, outputs {outs} (arena tensors)"),
        ((len(ints(d.inputOffsets)), len(ints(d.outputOffsets))) in ((len(ins), len(outs)),
                                                                     (0, 0)),
         "one scratch offset per input and output, or none (a backend reading the arena)"),
        (_tensor_args(call, "inputs") == ins and ints(call.outputs) == outs,
         "the call's inputs and outputs equal the delegate's"),
        (bool(d.nodes) and set(outs) <= {k for n in d.nodes for k in ints(n.outputs)},
         "a reference program writing every output"),
        (e is None or (e.clockHz > 0 and len(e.opNames or []) == len(ints(e.opCycles))),
         "an estimate with a clock and one cycle count per named op"),
        ([_bytes(tensors, _tensor_args(call, key)) for key in SCRATCH_ARGS]
         == [d.scratch, d.fastScratch], f"workspaces of {d.scratch} and {d.fastScratch} bytes"),
        (all(k < len(tensors) and offset + extent(tensors[k])[1] <= d.scratch
             for k, offset in zip(ins + outs, ints(d.inputOffsets) + ints(d.outputOffsets),
                                  strict=False)),
         f"input and output offsets {ints(d.inputOffsets)}, {ints(d.outputOffsets)} inside the "
         f"{d.scratch} B scratch"),
        (d.workspace == max((align(extent(t)[1]) for t in tensors if t.aliasOf < 0 and (
            t.storageKind, t.storage) == (StorageKind.Delegate, i)), default=0),
         f"a workspace of {d.workspace} B, as large as its tensors need"),
    ]
    return [problem for ok, problem in checks if not ok]


def _bytes(tensors: list, indices: list[int]) -> int:
    """Bytes of the uint8 workspace tensor ``indices`` names (0 for none)."""
    return sum(int(np.prod(ints(tensors[k].shape))) for k in indices if k < len(tensors))


def _int_arg(node: Any, name: str) -> int | None:
    arg = next((a for a in node.args or [] if a.name == name and a.kind == ArgKind.Int), None)
    return None if arg is None else int(arg.ints[0])


def _tensor_args(node: Any, name: str) -> list[int]:
    return next((ints(a.tensors) for a in node.args or [] if a.name == name), [])


def _check_lifetimes(b: LoadedBundle) -> None:
    """Every arena tensor a node reads or writes is in a buffer live at that node's step, and
    every buffer but an input's starts at a node writing it: reordered, deleted or
    inserted nodes, and lifetimes that do not match them, are refused (all listed)."""
    tensors, plan = b.bundle.tensors or [], b.bundle.plan
    nodes = b.bundle.nodes or []
    inputs = {tensors[k].storage for k in ints(b.bundle.inputs)}
    written: dict[int, set[int]] = {}
    problems = []
    for i, node in enumerate(nodes):
        outs = set(ints(node.outputs))
        for k in {k for arg in node.args or [] for k in ints(arg.tensors)} | outs:
            t = tensors[k]
            if t.storageKind != StorageKind.Arena:
                continue
            buf = plan.buffers[t.storage]
            if not buf.firstStep <= i < buf.endStep:
                problems.append(f"node {i} {node.op} uses {t.name} outside its buffer's steps "
                                f"[{buf.firstStep}, {buf.endStep})")
            if k in outs or buf.kind == "scratch":
                written.setdefault(t.storage, set()).add(i)
    for k in ints(b.bundle.outputs):
        buf = plan.buffers[tensors[k].storage] if tensors[k].storageKind == StorageKind.Arena \
            else None
        if buf is not None and buf.endStep != len(nodes):
            problems.append(f"output {tensors[k].name} dies at step {buf.endStep}, not at the "
                            f"end ({len(nodes)})")
    for j, buf in enumerate((plan.buffers or []) if plan else []):
        if j not in inputs and buf.firstStep not in written.get(j, ()):
            problems.append(f"buffer {j} starts at step {buf.firstStep}, where nothing writes it")
    if problems:
        raise _fail(b, f"{len(problems)} lifetime problem(s)", "buffers live from the node "
                    "writing them through every use", "; ".join(problems[:8]))


# Integer arguments every kernel taking them needs in range (the op's geometry): name -> least.
_LEAST = {"stride": 1, "dilation": 1, "groups": 1, "kernel_size": 1, "padding": 0,
          "output_padding": 0}


def _check_scalars(b: LoadedBundle) -> None:
    """Geometry arguments in range (a zero stride or groups divides by zero; a negative
    padding or a zero stride can make a huge or endless loop of a small file): all listed."""
    nodes = [*(b.bundle.nodes or []), *(n for d in b.bundle.delegates or [] for n in d.nodes or [])]
    bad = [f"{node.op} {arg.name}={ints(arg.ints)}" for node in nodes for arg in node.args or []
           if arg.name in _LEAST and arg.kind in (ArgKind.Int, ArgKind.IntList)
           and min(ints(arg.ints), default=_LEAST[arg.name]) < _LEAST[arg.name]]
    if bad:
        raise _fail(b, "operator arguments", "strides, dilations, groups and kernel sizes >= 1 "
                    "and paddings >= 0", "; ".join(bad[:8]))


def _check_test_vectors(b: LoadedBundle) -> None:
    """Each bundled test vector: one segment per program input and output, holding exactly that
    tensor's bytes, and a finite non-negative tolerance (all problems listed)."""
    tensors, segments = b.bundle.tensors or [], b.bundle.segments or []
    problems = []
    for i, v in enumerate(b.bundle.testVectors or []):
        for role, io, found in (("input", ints(b.bundle.inputs), ints(v.inputs)),
                                ("output", ints(b.bundle.outputs), ints(v.outputs))):
            if len(found) != len(io):
                problems.append(f"vector {i}: {len(found)} {role} segment(s) for {len(io)} "
                                f"{role}(s)")
                continue
            problems += [f"vector {i} {role} {j}: segment {k} of {_size(segments, k)} bytes "
                         f"for {_nbytes(tensors[t])}" for j, (t, k) in enumerate(zip(
                             io, found, strict=True)) if _size(segments, k) != _nbytes(tensors[t])]
        if not (math.isfinite(v.rtol) and math.isfinite(v.atol) and v.rtol >= 0 <= v.atol):
            problems.append(f"vector {i}: tolerance rtol {v.rtol}, atol {v.atol}")
    if problems:
        raise _fail(b, f"{len(problems)} test vector problem(s)", "one segment of the tensor's "
                    "bytes per program input and output, finite tolerances >= 0",
                    "; ".join(problems[:8]))


def _size(segments: list, k: int) -> int | None:
    return segments[k].size if 0 <= k < len(segments) else None


def _nbytes(t: Any) -> int:
    return math.prod(ints(t.shape)) * np.dtype(DTYPES[t.dtype]).itemsize


def kernel_list(b: LoadedBundle) -> list[tuple[str, str]]:
    """The bundle's declared (op, dtype) pairs."""
    return [(k.op, DTYPES[k.dtype]) for k in b.bundle.kernels or [] if 0 <= k.dtype < len(DTYPES)]


def _kernel_nodes(b: LoadedBundle) -> list[tuple[Any, list]]:
    """(node, its method's tensors) for every kernel call of every method, delegates' included."""
    return [(n, m.bundle.tensors or []) for m in b.methods()
            for n in [*(m.bundle.nodes or []),
                      *(n for d in m.bundle.delegates or [] for n in d.nodes or [])]
            if n.op != DELEGATE_CALL]


def needed_kernels(b: LoadedBundle) -> list[tuple[str, str]]:
    """The kernels a runtime needs for the bundle: its declared ones and the activations its
    fused calls (``nee::*_act.out``) run in place on their outputs."""
    fused = {(a.str, DTYPES[tensors[int(n.outputs[0])].dtype]) for n, tensors in _kernel_nodes(b)
             for a in n.args or [] if a.name == "activation" and a.kind == ArgKind.String}
    return sorted(set(kernel_list(b)) | fused)


def _check_kernel_list(b: LoadedBundle) -> None:
    """The declared kernels are exactly the (op, dtype) pairs of all methods' calls."""
    needed = {(n.op, DTYPES[tensors[n.outputs[0]].dtype] if n.outputs is not None
               and len(n.outputs) else "?") for n, tensors in _kernel_nodes(b)}
    if needed != set(kernel_list(b)):
        raise _fail(b, "kernel list", f"the {len(needed)} (op, dtype) pairs the nodes use",
                    f"{len(set(kernel_list(b)) ^ needed)} pairs differing")


def _check_kernels_present(b: LoadedBundle) -> None:
    """Collect every missing (op, dtype) kernel before failing."""
    missing = sorted(
        f"{op} ({dtype})" for op, dtype in needed_kernels(b)
        if op not in KERNELS or dtype not in KERNELS[op].dtypes
    )
    if missing:
        hint = ("build the board's runtime with nee-build for this bundle too"
                if build_info.KERNELS is not None else
                "add them to runtime_py/kernels or export with a runtime-supported op set")
        raise MissingKernelsError(
            f"{b.path}: {len(missing)} kernel(s)",
            f"kernels present in this runtime ({build_info.BUILD})",
            "missing: " + ", ".join(missing), hint)


