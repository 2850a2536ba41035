"""Human-readable description of a bundle (used by ``nee-inspect``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from runtime_py.buckets import Bucket
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import DELEGATE_CALL, DTYPES
from runtime_py.loader import (
    LoadedBundle,
    ints,
    kernel_list,
    output_names,
    shared_arenas,
    state_bytes,
)
from toolchain.ir import SCRATCH_ARGS
from toolchain.memory_plan.types import Arena, BufferRequest, Placement, Plan


def describe(loaded: LoadedBundle, *, buffers: bool = False) -> str:
    """Header, methods and state, then per method its IO, program and memory plan, then the
    kernel list, as text."""
    b = loaded.bundle
    methods = loaded.methods()
    sections = [
        f"bundle {loaded.path}: model {b.model!r}, schema v{b.schemaVersion}, {b.producer}"
        + (f", board {b.board}" if b.board else ""),
        *_methods(loaded, methods),
        *[text for m in methods for text in _program(m, buffers, len(methods) > 1)],
        f"kernels ({len(kernel_list(loaded))}):\n" + "\n".join(
            f"  {op} {dtype}" for op, dtype in kernel_list(loaded)),
    ]
    return "\n\n".join(sections)


def _methods(loaded: LoadedBundle, methods: list[LoadedBundle]) -> list[str]:
    """The methods with their arenas and dims, and the state, when there is more than one
    method, a dynamic dim or any state."""
    state = loaded.bundle.state or []
    if len(methods) == 1 and not state and not loaded.bundle.dims:
        return []
    lines = [f"methods ({len(methods)}; one arena per tier shared, as large as the largest):"]
    for m in methods:
        arenas = ", ".join(f"{a.tier} {a.size} B" for a in (m.bundle.plan.arenas or []))
        bucket = Bucket.of(m.bundle)
        where = f" ({bucket.name} in [{_served(methods, m) + 1}, {bucket.size}]" + (
            f", symbolic: {len(m.bundle.dims[0].exprs or [])} size expressions)"
            if bucket.symbolic else ")") if bucket else ""
        lines.append(f"  {m.method_name}{where}: {len(m.bundle.nodes or [])} calls, "
                     f"arenas {arenas or 'none'}")
    shared = ", ".join(f"{tier} {size} B" for tier, size in shared_arenas(methods).items())
    lines.append(f"  shared arenas: {shared or 'none'}")
    lines.append(f"state: {state_bytes(loaded.bundle)} B in {len(state)} buffer(s), kept "
                 "across runs")
    lines += [f"  {s.name}: {s.size} B at {s.offset}, initially "
              f"{'zeros' if s.initial == -1 else f'segment {s.initial}'}" for s in state]
    return ["\n".join(lines)]


def _served(methods: list[LoadedBundle], m: LoadedBundle) -> int:
    """The largest size below ``m``'s bucket that a smaller bucket of its entry serves."""
    mine = Bucket.of(m.bundle)
    smaller = [Bucket.of(o.bundle).size for o in methods if o.bundle.dims
               and o.bundle.entry == m.bundle.entry and not mine.symbolic]
    return max((size for size in smaller if size < mine.size), default=mine.min - 1)


def _program(loaded: LoadedBundle, buffers: bool, named: bool) -> list[str]:
    """IO, calls, int8 accuracy, partitions and memory plan of one method."""
    b = loaded.bundle
    title = f"method {loaded.method_name}: " if named else ""
    return [
        f"{title}inputs:\n" + "\n".join(f"  {_tensor(loaded, i)}" for i in ints(b.inputs)),
        "outputs:\n" + "\n".join(f"  {name} = {_tensor(loaded, i)}" for name, i
                                  in zip(output_names(b), ints(b.outputs), strict=True)),
        f"program ({len(b.nodes or [])} calls):\n" + "\n".join(_node(loaded, i, n)
                                                              for i, n in enumerate(b.nodes or [])),
        *_int8(loaded),
        *_partitions(loaded),
        _plan(loaded, buffers),
    ]


def _tensor(loaded: LoadedBundle, index: int) -> str:
    t = loaded.bundle.tensors[index]
    return f"{t.name}: {DTYPES[t.dtype]}{ints(t.shape)}{_quant(t.quantization)}"


def _quant(q: object) -> str:
    if q is None:
        return ""
    if q.axis == -1:
        return f" (scale {q.scale[0]:.6g}, zero point {q.zeroPoint[0]})"
    return f" ({len(q.scale)} scales along axis {q.axis})"


_CONVERSIONS = ("nee::quantize_per_tensor.out", "nee::dequantize_per_tensor.out")


def _int8(loaded: LoadedBundle) -> list[str]:
    """For a quantized program: its accuracy and the ops it still runs in float."""
    b = loaded.bundle
    if not any(t.quantization is not None for t in b.tensors or []):
        return []
    calls = [n for n in b.nodes or [] if n.op != DELEGATE_CALL]  # and the partitions' calls:
    calls += [n for d in b.delegates or [] for n in d.nodes or []]
    floats = [f"  {n.op} at {n.source or '?'}" for n in calls
              if n.op not in _CONVERSIONS and DTYPES[b.tensors[n.outputs[0]].dtype] != "int8"]
    accuracy = [f"  {a.output}: SQNR {a.sqnrDb:.1f} dB, max abs error {a.maxAbsError:.4g} over "
                f"{a.samples} {'held-out' if a.heldOut else 'calibration'} sample(s)"
                for a in b.accuracy or []]
    return ["int8 accuracy vs float (measured at export):\n" + "\n".join(accuracy or ["  -"]),
            f"ops left in float ({len(floats)}: no int8 kernel, parameters that rule one out, "
            f"or a returned softmax/sigmoid/tanh):\n" + "\n".join(floats or ["  none"])]


# Weight argument and the dims of its shape a multiply-accumulate runs over, per op.
_MAC_WEIGHTS = {
    **dict.fromkeys(("conv2d_int8", "convolution", "convolution_act"), ("weight", slice(1, None))),
    "linear_int8": ("weight", slice(1, 2)),
    **dict.fromkeys(("addmm", "addmm_act", "mm", "mm_act"), ("mat2", slice(0, 1))),
}


def op_macs(op: str, shapes: Mapping[str, Sequence[int]], out_shape: Sequence[int]) -> int:
    """Multiply-accumulates of a convolution or matrix product call, from the shapes of its
    tensor arguments by name (0 for other ops)."""
    rule = _MAC_WEIGHTS.get(op.partition("::")[2].partition(".")[0])
    if rule is None or rule[0] not in shapes:
        return 0
    return math.prod(list(shapes[rule[0]])[rule[1]]) * math.prod(out_shape)


def macs(loaded: LoadedBundle, node) -> int:
    """``op_macs`` of a bundle's node."""
    tensors = loaded.bundle.tensors
    shapes = {a.name: ints(tensors[int(a.tensors[0])].shape) for a in node.args or []
              if a.kind == ArgKind.Tensor}
    return op_macs(node.op, shapes, ints(tensors[int(node.outputs[0])].shape))


def delegated_macs(loaded: LoadedBundle) -> tuple[int, int]:
    """MACs of the delegated calls, and of all calls."""
    b = loaded.bundle
    delegated = sum(macs(loaded, n) for d in b.delegates or [] for n in d.nodes or [])
    return delegated, delegated + sum(macs(loaded, n) for n in b.nodes or []
                                      if n.op != DELEGATE_CALL)


def _partitions(loaded: LoadedBundle) -> list[str]:
    """Delegated partitions (payload, estimate, share of MACs) and why the rest stays on the CPU."""
    b = loaded.bundle
    cpu = [n for n in b.nodes or [] if n.op != DELEGATE_CALL]
    if not b.delegates and not any(n.cpuReason for n in cpu):
        return []
    npu_macs, total = delegated_macs(loaded)
    delegated = sum(len(d.nodes or []) for d in b.delegates or [])
    lines = [f"partitions ({len(b.delegates or [])}; {delegated} of {delegated + len(cpu)} calls "
             f"and {npu_macs / max(total, 1):.1%} of {total} MACs delegated):"]
    for i, d in enumerate(b.delegates or []):
        lines += _partition(loaded, i, d)
    reasons = [f"  {n.op} at {n.source or '?'}: {n.cpuReason}" for n in cpu if n.cpuReason]
    return ["\n".join(lines), f"calls on the CPU and why ({len(reasons)}):\n"
            + "\n".join(reasons or ["  none"])]


SHOWN_OPS = 3  # a partition's slowest compiled ops, by Vela's cycles


def _partition(loaded: LoadedBundle, i: int, d) -> list[str]:
    specs = ", ".join(f"{kv.key} {kv.value}" for kv in d.compileSpecs or [])
    payload = ", ".join(f"{p.name} {loaded.bundle.segments[p.segment].size} B"
                        for p in d.payload or [])
    lines = [f"  {i}: {d.backend} {d.target}, {len(d.nodes or [])} calls "
             f"({'CPU fallback kept' if d.cpuFallback else 'no CPU fallback'})",
             f"    inputs {', '.join(_tensor(loaded, k) for k in ints(d.inputs))}",
             f"    outputs {', '.join(_tensor(loaded, k) for k in ints(d.outputs))}",
             f"    payload: {payload}; device scratch {d.scratch} B, fast scratch "
             f"{d.fastScratch} B; host reference workspace {d.workspace} B",
             f"    compiled with {specs}"]
    e = d.estimate
    if e is not None:
        lines.append(f"    estimate: {e.cycles} cycles = {e.cycles / e.clockHz * 1e3:.3f} ms at "
                     f"{e.clockHz / 1e6:g} MHz, {e.macs} MACs, SRAM {e.sramBytes / 1024:.1f} KiB, "
                     f"flash {e.flashBytes / 1024:.1f} KiB")
        ops = sorted(zip(ints(e.opCycles), e.opNames or [], strict=True), reverse=True)
        lines.append("    slowest compiled ops: " + ", ".join(
            f"{name} {cycles} cycles ({cycles / max(e.cycles, 1):.0%})"
            for cycles, name in ops[:SHOWN_OPS]))
    return lines


def _node(loaded: LoadedBundle, i: int, node) -> str:
    outs = set(ints(node.outputs))
    tensors = loaded.bundle.tensors
    ins = [tensors[k].name for a in node.args or [] if a.name not in SCRATCH_ARGS
           for k in ints(a.tensors) if k not in outs]
    scratch = [f"; scratch {tensors[k].shape[0]} B" for a in node.args or []
               if a.name in SCRATCH_ARGS for k in ints(a.tensors)]
    results = ", ".join(_tensor(loaded, k) for k in ints(node.outputs))
    return f"  {i:4d} {node.op}({', '.join(ins)}) -> {results}{''.join(scratch)}"


def _plan(loaded: LoadedBundle, buffers: bool) -> str:
    plan = loaded.bundle.plan
    lines = [f"memory plan ({plan.planner}):"]
    for a in plan.arenas or []:
        gap = (a.size - a.lowerBound) / a.lowerBound if a.lowerBound else 0.0
        cap = f", capacity {a.capacity} B" if a.capacity else ""
        lines.append(f"  arena {a.tier}: {a.size} B, lower bound {a.lowerBound} B "
                     f"(+{gap:.1%}){cap}")
    tensors = loaded.bundle.tensors or []
    written = {k for node in loaded.bundle.nodes or [] for k in ints(node.outputs)}
    aliases = [(k, t) for k, t in enumerate(tensors) if t.aliasOf >= 0]
    lines.append(f"  {len(plan.buffers or [])} planned buffers; {len(aliases)} tensors share "
                 "another's bytes:")
    lines += [f"    {t.name} {'is written in place over' if k in written else 'is a view of'} "
              f"{tensors[t.aliasOf].name}" for k, t in aliases]
    consts = sum(s.size for s in loaded.bundle.segments or [])
    lines.append(f"  constants: {len(loaded.bundle.segments or [])} segments, {consts} B "
                 "(used in place from the file)")
    if buffers:
        names = {t.storage: t.name for t in tensors
                 if t.storageKind == StorageKind.Arena and t.aliasOf < 0}
        lines += [f"    {i:4d} {names.get(i, '?'):30s} {plan.arenas[buf.tier].tier}"
                  f"[{buf.offset}, {buf.offset + buf.size}) steps [{buf.firstStep}, "
                  f"{buf.endStep}) {buf.kind}" for i, buf in enumerate(plan.buffers or [])]
    return "\n".join(lines)


def plan_requests(loaded: LoadedBundle) -> tuple[list[BufferRequest], Plan]:
    """The bundle's memory plan as planner requests and a Plan (for drawing or re-verifying)."""
    plan = loaded.bundle.plan
    tiers = [a.tier for a in plan.arenas or []]
    requests = [BufferRequest(str(i), int(b.size), b.firstStep, b.endStep)
                for i, b in enumerate(plan.buffers or [])]
    placements = tuple(Placement(str(i), int(b.offset), tiers[b.tier])
                       for i, b in enumerate(plan.buffers or []))
    arenas = tuple(Arena(a.tier, int(a.size), int(a.lowerBound)) for a in plan.arenas or [])
    return requests, Plan(placements, arenas, plan.planner)
