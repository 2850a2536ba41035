"""Ethos-U NPU delegate: what Vela takes and its estimates, per example model and board.

Usage: python bench/npu.py [--models cnn,mobilenet_v2@224,...] [--boards a,b] [--progress]

A model is an examples/*.py file name, optionally with "@SIZE" for a SIZE x SIZE input instead
of its example's (calibrated on 16 seeded random samples of that shape); rows are labelled
name@SIZE either way. Each (model, board) row is one int8 export (calibration on the example's
calibration_inputs(), else on 16 seeded random samples like examples/_blocks.py's) for the board,
whose NPU partitions are compiled by Vela. Columns:
  calls    % of the program's calls inside NPU partitions (all calls counted, the delegated ones
           and the quantize/dequantize at the float edges included)
  MACs     % of the convolution / matrix-product multiply-accumulates inside NPU partitions
  parts    number of NPU partitions (delegate calls)
  NPU ms   Vela's estimated NPU time: sum over partitions of cycles / the board's NPU clock
  SRAM     KiB of SRAM Vela uses, the largest over partitions
  flash    KiB Vela places off the SRAM (flash + DRAM: encoded weights and command stream; in a
           Dedicated_Sram memory mode the feature maps too), summed over partitions
  export   wall time of the whole export() call in s (calibration, passes, every Vela run,
           memory plan, accuracy check); the machine is shared, so it varies from run to run
  CPU      calls left on the CPU: how many, and why, shortened ("float" = reads or writes a float
           tensor, as the quantize/dequantize at the edges are expected to; "Vela" = Vela
           placed it on the CPU; "no TFLite op" / "not in TFLite" = it cannot reach Vela as an
           int8 .tflite operator; those int8 calls are listed in full below the table)
A row whose partitions need more SRAM than the board's SRAM tier reads "over SRAM".

Last, the estimates beside ExecuTorch 1.5.1's Arm backend for the same NPU configuration
(ethos-u55-128, Ethos_U55_High_End_Embedded, Shared_Sram, 500 MHz): constants quoted from a past
measurement on this machine, not re-run here. Ratios are NEE / ExecuTorch (lower is better).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: no spinning threads

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime_py.format import DELEGATE_CALL  # noqa: E402
from toolchain.boards import Board, load_board  # noqa: E402
from toolchain.errors import ExportError  # noqa: E402
from toolchain.export import export  # noqa: E402
from toolchain.inspect import op_macs  # noqa: E402
from toolchain.ir import Graph, Node, Ref, node_inputs  # noqa: E402
from toolchain.modules import load_file  # noqa: E402
from toolchain.quantize.options import Int8Options  # noqa: E402

MODELS = ["mobilenet_v2", "mobilenet_v2@224", "mobilenet_v3_small", "resnet18", "cnn", "gru"]
BOARDS = ["corstone-300-ethos-u55", "imx93-ethos-u65"]
KIB = 1024

# The weight argument of a MAC-counting call and the slice of its shape that is the reduction
# per output element (as toolchain/inspect.py counts them): conv weight [O, I/g, kh, kw],
# linear weight [N, K], mm/addmm mat2 [K, N].
@dataclass(frozen=True)
class Anchor:
    """ExecuTorch 1.5.1's Arm backend (Vela) estimate for one model, measured earlier."""

    ms: float
    sram_kib: float | None = None
    export_s: float | None = None  # quantize + lower, on this machine's 2 cores
    note: str = ""


# Quoted from a past measurement on this machine (not re-run by this script), all for
# ethos-u55-128 / Ethos_U55_High_End_Embedded / Shared_Sram at 500 MHz.
ANCHOR_NPU = ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", 500_000_000)
ANCHORS = {
    ("cnn", 32): Anchor(0.171, note="with relu6 written as hardtanh: ExecuTorch splits its "
                        "partition at F.relu6"),
    ("mobilenet_v2", 96): Anchor(8.38, 274, 52 + 98, "52 s quantize + 98 s lower, 2 cores"),
    ("mobilenet_v2", 224): Anchor(15.73, 1474),
}


@dataclass(frozen=True)
class CpuCall:
    """A call left on the CPU: its op (shortened), reason, whether it is all int8, and where."""

    op: str
    reason: str
    int8: bool
    source: str  # file:line of the model line, relative to the repo when inside it


@dataclass
class Row:
    """One (model, board) export: the table's numbers, or why it failed."""

    model: str
    size: int
    board: str
    export_s: float
    error: str = ""
    calls_npu: int = 0
    calls: int = 0
    macs_npu: int = 0
    macs: int = 0
    parts: int = 0
    npu_ms: float = 0.0
    sram_kib: float = 0.0
    flash_kib: float = 0.0
    cpu: list[CpuCall] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.model}@{self.size}"


def inputs_for(name: str, size: int | None) -> tuple[torch.nn.Module, tuple, list[tuple]]:
    """The example's model, inputs and calibration samples, resized to ``size`` if given."""
    module = load_file(ROOT / "examples" / f"{name}.py")
    example = tuple(module.example_inputs())
    shape = tuple(example[0].shape)
    if size is not None and shape[-2:] != (size, size):
        shape = (*shape[:-2], size, size)
        torch.manual_seed(1)  # as the examples' example_inputs()
        example = (torch.randn(shape),)
        calibration = _random_samples(shape)
    elif hasattr(module, "calibration_inputs"):
        calibration = [tuple(s) for s in module.calibration_inputs()]
    else:
        calibration = _random_samples(shape)
    return module.Model().eval(), example, calibration


def _random_samples(shape: tuple[int, ...]) -> list[tuple]:
    return load_file(ROOT / "examples" / "_blocks.py").random_samples(shape)


def node_macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of a convolution or matrix product call (0 for other ops)."""
    shapes = {k: graph.tensors[v.name].shape for k, v in node.args.items() if isinstance(v, Ref)}
    return op_macs(node.op, shapes, graph.tensors[node.outputs[0]].shape)


def is_int8(graph: Graph, node: Node) -> bool:
    """No float feature map among the call's inputs and outputs (constants aside)."""
    return all(not graph.tensors[n].dtype.startswith("float") for n in [
        *node_inputs(node), *node.outputs] if not graph.is_const(n))


def short_op(op: str) -> str:
    return op.partition("::")[2].removesuffix(".out") or op


def short_reason(reason: str, int8: bool) -> str:
    if not int8:
        return "float"
    if reason.startswith("Vela: "):
        return "Vela"
    if reason.startswith("no TFLite builtin"):
        return "no TFLite op"
    if reason.startswith("not expressible in TFLite"):
        return "not in TFLite"
    return reason[:20] or "?"


def bench(spec: str, board: Board, progress: bool) -> Row:
    name, _, size_text = spec.partition("@")
    model, example, calibration = inputs_for(name, int(size_text) if size_text else None)
    size = int(example[0].shape[-1])
    say = (lambda m: print(f"  {spec} on {board.name}: {m}", file=sys.stderr, flush=True)
           ) if progress else None
    start = time.perf_counter()
    try:
        result = export(model, example, board=board, quantize=Int8Options(calibration),
                        progress=say)
    except ExportError as e:
        seconds = time.perf_counter() - start
        needs = [int(b) for b in re.findall(r"needs (\d+) B", str(e))]
        if needs:
            tier = next((t for t in board.tiers if t.name == "sram"), board.tiers[0])
            error = (f"over SRAM: needs {max(needs) / KIB:.0f} KiB, board has "
                     f"{tier.capacity / KIB:.0f} KiB")
        else:
            error = f"export failed: {str(e).splitlines()[0][:160]}"
        return Row(name, size, board.name, seconds, error)
    seconds = time.perf_counter() - start
    g = result.graph
    delegated = [n for d in g.delegates for n in d.nodes]
    cpu = [n for n in g.nodes if n.op != DELEGATE_CALL]
    estimates = [d.estimate for d in g.delegates if d.estimate is not None]
    macs_npu = sum(node_macs(g, n) for n in delegated)
    return Row(
        name, size, board.name, seconds,
        calls_npu=len(delegated), calls=len(delegated) + len(cpu),
        macs_npu=macs_npu, macs=macs_npu + sum(node_macs(g, n) for n in cpu),
        parts=len(g.delegates),
        npu_ms=sum(e.cycles / e.clock_hz for e in estimates) * 1e3,
        sram_kib=max((e.sram_bytes for e in estimates), default=0) / KIB,
        flash_kib=sum(e.flash_bytes for e in estimates) / KIB,
        cpu=[cpu_call(g, n) for n in cpu])


def cpu_call(graph: Graph, node: Node) -> CpuCall:
    """The call with its reason made generic: without its source line and quantization
    parameters, so that the calls one constraint stops read alike."""
    reason = node.cpu_reason.replace(f" at {node.source}", "") if node.source else node.cpu_reason
    reason = re.sub(r"Quant\([^)]*\)", "Quant(...)", reason)
    where = node.source.partition(": ")[0].removeprefix(f"{ROOT}/")
    return CpuCall(short_op(node.op), reason, is_int8(graph, node), where)


HEADER = (f"{'model':22s} {'board':24s} {'calls':>6s} {'MACs':>6s} {'parts':>5s} "
          f"{'NPU ms':>8s} {'SRAM':>8s} {'flash':>9s} {'export':>7s}  CPU")


def line(row: Row) -> str:
    head = f"{row.label:22s} {row.board:24s} "
    if row.error:
        return f"{head}{row.error} (after {row.export_s:.1f} s)"
    counts: dict[str, int] = {}
    for call in row.cpu:
        key = short_reason(call.reason, call.int8)
        counts[key] = counts.get(key, 0) + 1
    why = ", ".join(f"{k} {v}" for k, v in counts.items())
    calls, macs = row.calls_npu / max(row.calls, 1), row.macs_npu / max(row.macs, 1)
    return (f"{head}{calls:6.1%} {macs:6.1%} {row.parts:5d} {row.npu_ms:8.3f} "
            f"{row.sram_kib:5.0f} KiB {row.flash_kib:5.0f} KiB "
            f"{row.export_s:6.1f}s  {len(row.cpu)}" + (f" ({why})" if why else ""))


def refused(rows: list[Row]) -> list[str]:
    """The int8 calls left on the CPU (Vela or TFLite refused them), by model and distinct
    reason; boards refusing the same calls for the same reason share a line."""
    boards: dict[tuple, list[str]] = {}
    for row in rows:
        seen: dict[str, list[CpuCall]] = {}
        for call in row.cpu:
            if call.int8:
                seen.setdefault(call.reason, []).append(call)
        for reason, calls in seen.items():
            ops = ", ".join(sorted({c.op for c in calls}))
            where = ", ".join(sorted({c.source for c in calls if c.source}))
            key = (row.label, len(calls), ops, where, reason)
            boards.setdefault(key, []).append(row.board)
    return [f"  {label} on {', '.join(on)}: {n} x {ops}" + (f" ({where})" if where else "")
            + f": {reason}" for (label, n, ops, where, reason), on in boards.items()]


def anchors(rows: list[Row], boards: dict[str, Board]) -> list[str]:
    lines = ["ExecuTorch 1.5.1 anchors (quoted from a past measurement on this machine, not "
             f"re-run; {', '.join(map(str, ANCHOR_NPU[:3]))}, {ANCHOR_NPU[3] / 1e6:.0f} MHz):"]
    for (name, size), a in ANCHORS.items():
        extra = [f"{a.sram_kib:.0f} KiB SRAM"] if a.sram_kib else []
        extra += [f"export {a.export_s:.0f} s"] if a.export_s else []
        extra += [a.note] if a.note else []
        lines.append(f"  {name}@{size}: {a.ms:g} ms" + "".join(f"; {x}" for x in extra))
    lines.append("NEE / ExecuTorch on boards with that NPU configuration:")
    compared = 0
    for row in rows:
        a = ANCHORS.get((row.model, row.size))
        npu = boards[row.board].npu
        if a is None or npu is None or (npu.target, npu.system_config, npu.memory_mode,
                                        npu.clock_hz) != ANCHOR_NPU:
            continue
        compared += 1
        head = f"  {row.label:22s} {row.board:24s} "
        if row.error:
            lines.append(f"{head}{row.error}")
            continue
        text = f"NPU {row.npu_ms:.3f} / {a.ms:g} ms = {row.npu_ms / a.ms:.3f}"
        if a.sram_kib:
            text += (f"; SRAM {row.sram_kib:.0f} / {a.sram_kib:.0f} KiB = "
                     f"{row.sram_kib / a.sram_kib:.3f}")
        if a.export_s:
            text += (f"; export {row.export_s:.1f} / {a.export_s:.0f} s = "
                     f"{row.export_s / a.export_s:.2f}")
        lines.append(head + text)
    if not compared:
        lines.append("  none (no anchored model on such a board in this run)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="examples/*.py names, each optionally @SIZE (SIZE x SIZE input)")
    parser.add_argument("--boards", default=",".join(BOARDS), help="board recipes (with an NPU)")
    parser.add_argument("--progress", action="store_true", help="export stages on stderr")
    args = parser.parse_args()
    boards = {name: load_board(name) for name in args.boards.split(",")}
    print(HEADER, flush=True)
    rows = []
    for spec in args.models.split(","):
        for board in boards.values():
            rows.append(bench(spec, board, args.progress))
            print(line(rows[-1]), flush=True)
    print("int8 calls left on the CPU (refused by Vela / TFLite), by reason:")
    print("\n".join(refused(rows) or ["  none"]))
    print("\n".join(anchors(rows, boards)))


if __name__ == "__main__":
    main()
