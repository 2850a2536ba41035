"""Write an exported program as a .nee bundle (layout documented in schemas/nee.fbs)."""

from __future__ import annotations

import hashlib
import struct
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import flatbuffers
import numpy as np

from runtime_py.fbs.Accuracy import AccuracyT
from runtime_py.fbs.Arena import ArenaT
from runtime_py.fbs.Arg import ArgT
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.Buffer import BufferT
from runtime_py.fbs.Bundle import BundleT
from runtime_py.fbs.Delegate import DelegateT
from runtime_py.fbs.DelegateEstimate import DelegateEstimateT
from runtime_py.fbs.DynamicDim import DynamicDimT
from runtime_py.fbs.KernelEntry import KernelEntryT
from runtime_py.fbs.KeyValue import KeyValueT
from runtime_py.fbs.MemoryPlan import MemoryPlanT
from runtime_py.fbs.Method import MethodT
from runtime_py.fbs.Node import NodeT
from runtime_py.fbs.Payload import PayloadT
from runtime_py.fbs.Quantization import QuantizationT
from runtime_py.fbs.Segment import SegmentT
from runtime_py.fbs.SizeExpr import SizeExprT
from runtime_py.fbs.SizeField import SizeField
from runtime_py.fbs.StateBuffer import StateBufferT
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.fbs.Tensor import TensorT
from runtime_py.fbs.TestVector import TestVectorT
from runtime_py.format import (
    DTYPE_CODES,
    FILE_IDENTIFIER,
    FOOTER_MAGIC,
    SCHEMA_VERSION,
    SIZE_PREFIX_BYTES,
    align,
    segment_base,
)
from runtime_py.program import Program
from toolchain.errors import ExportError
from toolchain.export.result import BundledVector, ExportResult
from toolchain.ir import Delegate, Graph, Quant, Ref, Tensor


def write_bundle(result: ExportResult, path: str | Path) -> int:
    """Write ``result`` to ``path`` atomically (a temp file renamed into place); returns bytes.
    Weights stream from the graph's arrays to the file without being copied in memory."""
    path = output_path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as file:
        size = write_to(file, *_layout(result))
    tmp.replace(path)
    return size


def host_outputs(result: ExportResult, samples: Sequence[Sequence[np.ndarray]]
                 ) -> tuple[list[str], list[list[np.ndarray]]]:
    """Write ``result`` to a temporary bundle and run it with the runtime on each sample: the
    output names and each sample's outputs (copies)."""
    with tempfile.TemporaryDirectory() as folder:
        write_bundle(result, Path(folder) / "host.nee")
        with Program.load(Path(folder) / "host.nee") as program:
            outs = [[o.copy() for o in program.run(*sample)] for sample in samples]
            return [s.name for s in program.outputs], outs


def output_path(path: str | Path) -> Path:
    """``path`` as a Path, checked to be in an existing directory."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ExportError(f"output {path}", "an existing directory", f"no {path.parent}",
                          "create the directory first")
    return path


class _Segments:
    """The bundle's constant blobs: a method reuses another's identical blob (weights shared by
    methods); within one method each constant owns a segment (the loader requires it)."""

    def __init__(self) -> None:
        self.blobs: list[memoryview] = []
        self.known: dict[tuple[int, bytes], int] = {}  # (size, sha256) -> segment index

    def add(self, array: np.ndarray, taken: set[int] | None = None) -> int:
        """The segment index holding ``array``'s bytes (a new one unless another method's)."""
        blob = memoryview(np.ascontiguousarray(array)).cast("B")
        key = (blob.nbytes, hashlib.sha256(blob).digest())
        k = self.known.get(key)
        if k is None or taken is None or k in taken:
            k = len(self.blobs)
            self.blobs.append(blob)
            self.known.setdefault(key, k)
        if taken is not None:
            taken.add(k)
        return k

    def table(self) -> list[SegmentT]:
        segments, offset = [], 0
        for blob in self.blobs:
            segments.append(SegmentT(offset=offset, size=blob.nbytes, crc32=zlib.crc32(blob)))
            offset = align(offset + blob.nbytes)
        return segments


def _layout(result: ExportResult) -> tuple[BundleT, list[memoryview]]:
    """The bundle tables and the bytes of each constant segment (views of the weights)."""
    methods = [result, *result.methods]
    segments = _Segments()
    state, state_index = _state(methods, segments)
    programs = [_program(r, segments, state_index) for r in methods]
    bundle = BundleT(
        schemaVersion=SCHEMA_VERSION,
        producer=result.producer,
        model=result.model_name,
        board=result.board,
        threads=result.threads,
        kernels=[KernelEntryT(op=op, dtype=DTYPE_CODES[dt])
                 for op, dt in sorted({k for r in methods for k in r.kernels})],
        accuracy=[AccuracyT(output=a.output, sqnrDb=a.sqnr_db, maxAbsError=a.max_abs_error,
                            samples=a.samples, heldOut=a.held_out)
                  for a in result.accuracy] or None,
        methods=[_method(fields) for fields in programs[1:]] or None,
        state=state or None,
    )
    bundle.__dict__.update(programs[0])
    bundle.segments = segments.table()
    return bundle, segments.blobs


def _method(fields: dict[str, Any]) -> MethodT:
    """A Method table of a program's fields (its name is the Bundle's method_name)."""
    method = MethodT()
    method.__dict__.update(fields)
    method.name = method.__dict__.pop("methodName")
    return method


def _state(methods: list[ExportResult], segments: _Segments
           ) -> tuple[list[StateBufferT], dict[str, int]]:
    """The state table (one buffer per state tensor name, all methods sharing it) and the
    index of each name in it."""
    found: dict[str, Tensor] = {}
    for r in methods:
        for t in r.graph.tensors.values():
            if t.kind != "state":
                continue
            other = found.setdefault(t.name, t)
            if (other.shape, other.dtype) != (t.shape, t.dtype):
                raise ExportError(f"state {t.name} of method {r.method}",
                                  f"the same shape and dtype in every method ({other.dtype}"
                                  f"{list(other.shape)})", f"{t.dtype}{list(t.shape)}",
                                  "methods share their state: export them from one model")
    table, offset = [], 0
    for t in found.values():
        init = segments.add(t.data) if t.data is not None and t.data.any() else -1
        table.append(StateBufferT(name=t.name, offset=offset, size=t.nbytes, initial=init))
        offset = align(offset + t.nbytes)
    return table, {t.name: i for i, t in enumerate(found.values())}


def _program(result: ExportResult, segments: _Segments, state: dict[str, int]
             ) -> dict[str, Any]:
    """The fields of one method's program (named as in Bundle and Method)."""
    graph = result.graph
    names = graph.used_tensors()
    index = {name: i for i, name in enumerate(names)}
    taken: set[int] = set()
    consts = {n: segments.add(graph.tensors[n].data, taken) for n in graph.constant_roots(names)}
    storage = _Storage(result, consts, state)
    payloads = [{name: segments.add(b, taken) for name, b in d.payload.items()}
                for d in graph.delegates]
    vectors = [_vector(v, [segments.add(a, taken) for a in (*v.inputs, *v.outputs)])
               for v in result.vectors]
    return {
        "methodName": result.method, "entry": result.entry or None,
        "dims": [_dim(result, index)] if result.dim else None,
        "tensors": [_tensor(graph, graph.tensors[n], storage, index) for n in names],
        "inputs": [index[n] for n in graph.inputs],
        "outputs": [index[n] for n in graph.outputs],
        "nodes": [_node(node, index) for node in graph.nodes],
        "delegates": [_delegate(d, index, where) for d, where in zip(graph.delegates, payloads,
                                                                     strict=True)] or None,
        "plan": _plan(result),
        "outputNames": graph.output_names or None,  # None: readers use the tensor names
        "testVectors": vectors or None,
    }


@dataclass(frozen=True)
class _Storage:
    """Where a method's root tensors live: its plan, its constants' segments, the state."""

    result: ExportResult
    consts: dict[str, int]  # const root -> segment index
    state: dict[str, int]  # state tensor -> state buffer index


def _dim(result: ExportResult, index: dict[str, int]) -> DynamicDimT:
    dim = result.dim
    return DynamicDimT(name=dim.name, min=dim.min, max=dim.max, size=dim.size,
                       inputAxes=list(dim.input_axes), outputAxes=list(dim.output_axes),
                       symbolic=dim.symbolic,
                       exprs=[_size_expr(result.graph, e, index) for e in result.exprs
                              if e.field == "arg" or e.target in index] or None)


_SIZE_FIELDS = {"shape": SizeField.Shape, "stride": SizeField.Stride,
                "offset": SizeField.ByteOffset, "arg": SizeField.ArgInt}


def _size_expr(graph: Graph, e: Any, index: dict[str, int]) -> SizeExprT:
    """A SizeExpr table of a toolchain.export.symbolic.SizeExpr (tensors and args by index)."""
    tensor = e.field != "arg"
    return SizeExprT(field=_SIZE_FIELDS[e.field], index=index[e.target] if tensor else e.target,
                     arg=0 if tensor else list(graph.nodes[e.target].args).index(e.arg),
                     position=e.position, coeffs=list(e.coeffs))


def _vector(v: BundledVector, segments: list[int]) -> TestVectorT:
    split = len(v.inputs)
    return TestVectorT(inputs=segments[:split], outputs=segments[split:], rtol=v.rtol,
                       atol=v.atol)


class _SharedStrings(flatbuffers.Builder):
    """A builder that writes each distinct string once (the generated ``Pack`` calls
    ``CreateString``): argument names, ops and source lines repeat in every call."""

    def CreateString(self, s: str | bytes, encoding: str = "utf-8",
                     errors: str = "strict") -> int:
        shared = self.sharedStrings = self.sharedStrings or {}
        if s not in shared:
            shared[s] = super().CreateString(s, encoding, errors)
        return shared[s]


def write_to(file: BinaryIO, bundle: BundleT, blobs: Sequence[bytes | memoryview]) -> int:
    """Write the size-prefixed flatbuffer of ``bundle``, then each blob at its segment's aligned
    offset, then the footer (the flatbuffer's CRC-32); returns the bytes written."""
    builder = _SharedStrings(1 << 16)
    builder.FinishSizePrefixed(bundle.Pack(builder), FILE_IDENTIFIER)
    head = builder.Output()
    base = segment_base(len(head) - SIZE_PREFIX_BYTES)
    written = file.write(head) + file.write(b"\0" * (base - len(head)))
    for seg, blob in zip(bundle.segments or [], blobs, strict=True):
        written += file.write(b"\0" * (base + seg.offset - written))
        written += file.write(blob)
    return written + file.write(FOOTER_MAGIC + struct.pack("<I", zlib.crc32(head)))


def _tensor(graph: Graph, t: Tensor, where: _Storage, index: dict[str, int]) -> Any:
    root = graph.tensors[graph.storage_of(t.name)]
    itemsize = np.dtype(t.dtype).itemsize
    base = 0
    owner = next((k for k, d in enumerate(graph.delegates) if root.name in d.workspace), None)
    if root.kind == "const":
        kind, storage = StorageKind.Constant, where.consts[root.name]
    elif root.kind == "state":
        kind, storage = StorageKind.State, where.state[root.name]
    elif owner is not None:
        kind, storage = StorageKind.Delegate, owner
        base = graph.delegates[owner].workspace[root.name]
    else:
        kind, storage = StorageKind.Arena, where.result.buffer_index[root.name]
    return TensorT(
        name=t.name,
        dtype=DTYPE_CODES[t.dtype],
        shape=list(t.shape),
        strides=list(t.element_strides()),
        storageKind=kind,
        storage=storage,
        byteOffset=base + t.offset * itemsize,
        aliasOf=index[root.name] if t.view_of else -1,
        quantization=_quantization(t.quant),
    )


def _quantization(quant: Quant | None) -> QuantizationT | None:
    if quant is None:
        return None
    zeros = list(quant.zero_point)
    return QuantizationT(scale=list(quant.scale),
                         zeroPoint=zeros[:1] if len(set(zeros)) == 1 else zeros,
                         axis=-1 if quant.axis is None else quant.axis)


def _node(node: Any, index: dict[str, int]) -> Any:
    return NodeT(
        op=node.op,
        args=[_arg(name, value, index) for name, value in node.args.items()],
        outputs=[index[o] for o in node.outputs],
        source=node.source,
        cpuReason=node.cpu_reason or None,
    )


def _delegate(d: Delegate, index: dict[str, int], segments: dict[str, int]) -> Any:
    e = d.estimate
    return DelegateT(
        backend=d.backend, target=d.target,
        compileSpecs=[KeyValueT(key=k, value=v) for k, v in d.specs.items()],
        payload=[PayloadT(name=name, segment=k) for name, k in segments.items()],
        inputs=[index[n] for n in d.inputs], outputs=[index[n] for n in d.outputs],
        inputOffsets=d.input_offsets, outputOffsets=d.output_offsets,
        scratch=d.scratch, fastScratch=d.fast_scratch,
        nodes=[_node(node, index) for node in d.nodes], workspace=d.workspace_size,
        estimate=None if e is None else DelegateEstimateT(
            cycles=e.cycles, clockHz=e.clock_hz, macs=e.macs, sramBytes=e.sram_bytes,
            flashBytes=e.flash_bytes, opNames=[n for n, _ in e.op_cycles],
            opCycles=[c for _, c in e.op_cycles]),
        cpuFallback=d.cpu_fallback,
    )


# (element test, kind for one value, kind for a list, ArgT field, element encoder); first match.
_ARG_KINDS = (
    (lambda v: isinstance(v, Ref), ArgKind.Tensor, ArgKind.TensorList, "tensors", None),
    (lambda v: isinstance(v, bool), ArgKind.Bool, ArgKind.BoolList, "ints", int),
    (lambda v: isinstance(v, int), ArgKind.Int, ArgKind.IntList, "ints", int),
    (lambda v: isinstance(v, (int, float)), ArgKind.Float, ArgKind.FloatList, "floats", float),
)


def _arg(name: str, value: Any, index: dict[str, int]) -> Any:
    if value is None:
        return ArgT(name=name, kind=ArgKind.None_)
    if isinstance(value, str):
        return ArgT(name=name, kind=ArgKind.String, str=value)
    is_list = isinstance(value, (list, tuple))
    values = list(value) if is_list else [value]
    if not values:
        return ArgT(name=name, kind=ArgKind.IntList, ints=[])
    if None in values and any(isinstance(v, Ref) for v in values):
        return ArgT(name=name, kind=ArgKind.OptionalTensorList,
                    ints=[int(v is not None) for v in values],
                    tensors=[index[v.name] for v in values if v is not None])
    for test, one, many, field, encode in _ARG_KINDS:
        if all(test(v) for v in values):
            encoded = [index[v.name] if encode is None else encode(v) for v in values]
            arg = ArgT(name=name, kind=many if is_list else one)
            setattr(arg, field, encoded)
            return arg
    raise ExportError(f"argument {name}", "a tensor, scalar, string or list of them",
                      repr(value), "this op argument type is not serializable yet")


def _plan(result: ExportResult) -> Any:
    tiers = [a.tier for a in result.plan.arenas]
    placed = result.plan.by_id()
    capacity = {t.name: t.capacity for t in result.tiers}
    return MemoryPlanT(
        planner=result.plan.planner,
        arenas=[ArenaT(tier=a.tier, size=a.size, lowerBound=a.lower_bound,
                                 capacity=capacity.get(a.tier, 0))
                for a in result.plan.arenas],
        buffers=[
            BufferT(
                tier=tiers.index(placed[r.id].tier), offset=placed[r.id].offset, size=r.size,
                firstStep=r.start, endStep=r.end, kind=result.graph.tensors[r.id].kind,
            )
            for r in result.requests
        ],
    )
