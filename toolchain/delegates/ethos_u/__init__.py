"""Ethos-U delegate: partition a program for the board's NPU and compile it with Vela.

Which calls the NPU takes is Vela's own decision (its supported-operator constraints), asked
per partition rather than restated here:
1. Calls that cannot be asked are left on the CPU first, with the reason: they read or write
   floats (the NPU runs integer feature maps), have no TFLite builtin, or have arguments TFLite
   has no equivalent for (the partition reaches Vela as an int8 .tflite).
2. The rest are clustered (``toolchain.partition``); each run is written as .tflite and compiled
   by Vela, which places operators it cannot run on the CPU and says why. Their calls get Vela's
   reason and the clustering repeats until Vela takes every run whole.
3. Where a run's 4-D input comes from a quantize on the CPU, that quantize may write it in
   NHWC instead (``_quantize_channels_last``); Vela's estimates of both decide.
4. Each run is compiled to Vela's raw output (command stream, encoded weights, scratch sizes)
   and becomes a ``Delegate`` called by one ``nee::delegate_call`` node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from toolchain.boards import Npu
from toolchain.delegates.ethos_u import vela
from toolchain.errors import ExportError
from toolchain.ir import (
    FAST_SCRATCH_ARG,
    SCRATCH_ARG,
    Delegate,
    Estimate,
    Graph,
    Node,
    Ref,
    Tensor,
)
from toolchain.partition import (
    boundary,
    delegate_call,
    plan_workspace,
    rest,
    runs,
    schedule,
    subgraph,
    tflite_reason,
)
from toolchain.serialize.tflite_program import to_tflite

BACKEND = "ethos-u"
MAX_ROUNDS = 16  # Vela rounds before giving up (each demotes at least one call)
FEATURE_DTYPES = ("int8",)  # what NEE's int8 programs hand the NPU


def delegate(graph: Graph) -> Graph:
    """Move every call the board's NPU takes into delegates (see the module docstring)."""
    npu = graph.npu
    for node in graph.nodes:
        node.cpu_reason = _static_reason(graph, node)
    order, checked = _settle(graph, npu)
    checked = [_quantize_channels_last(graph, c, order) for c in checked]
    starts = {id(c[0][0]): c for c in checked}
    inside = {id(n) for run, _, _ in checked for n in run}
    calls, delegates = [], []
    for node in order:
        if id(node) in starts:
            calls.append(_compile(graph, starts[id(node)], len(delegates), order, delegates))
        elif id(node) not in inside:
            calls.append(node)
    graph.nodes, graph.delegates = calls, delegates
    return graph


def _accepted(node: Node) -> bool:
    return not node.cpu_reason


def _static_reason(graph: Graph, node: Node) -> str:
    quantized = any(x.quant is not None for x in graph.tensors.values())
    return tflite_reason(graph, node, FEATURE_DTYPES, "NPU", "Vela",
                         "" if quantized else " (export with --quantize int8)")


QUANTIZE = "nee::quantize_per_tensor.out"
NHWC = (0, 2, 3, 1)


def _quantize_channels_last(graph: Graph, checked: _Checked, order: list[Node]) -> _Checked:
    """Try the run's 4-D inputs quantized on the CPU straight into NHWC, the layout the NPU
    works in: the quantize reads its float input through a permuted view and writes an NHWC
    storage, of which the NCHW int8 tensor becomes a view. The NPU then needs no TRANSPOSE of
    its own (20736 cycles for mobilenet_v2's 96x96 input on an Ethos-U55), and the quantize
    does the same work. Kept when Vela estimates fewer cycles (not so on an Ethos-U65 with
    the input in DRAM, where reading 3-channel pixels costs more than the TRANSPOSE). Only for
    an int8 tensor without views, not a program output, read by this run alone."""
    run, _, report = checked
    members = {id(n) for n in run}
    readers = graph.readers()
    viewed = {t.view_of for t in graph.tensors.values() if t.view_of}
    undo = [_write_channels_last(graph, node) for node in order
            if node.op == QUANTIZE and _only_for(graph, node.outputs[0], members, readers, viewed)]
    if not undo:
        return checked
    model = to_tflite(subgraph(graph, run, order), graph.npu.target)
    trial = vela.check(model, graph.npu)
    if trial.cpu or trial.cycles >= report.cycles:
        for restore in undo:
            restore()
        return checked
    return run, model, trial


def _only_for(graph: Graph, name: str, members: set[int], readers: dict[str, list[Node]],
              viewed: set[str]) -> bool:
    """Whether 4-D ``name`` has no views, is no program output, and only the run reads it."""
    return (len(graph.tensors[name].shape) == 4 and name not in viewed
            and name not in graph.outputs and bool(readers.get(name))
            and all(id(r) in members for r in readers[name]))


def _write_channels_last(graph: Graph, node: Node) -> Callable[[], None]:
    """Make ``node`` quantize into NHWC (see ``_quantize_channels_last``); returns the undo."""
    x, out = graph.tensors[node.args["input"].name], graph.tensors[node.outputs[0]]
    n, c, h, w = out.shape
    shape = (n, h, w, c)
    strides = x.element_strides()
    source = Tensor(f"{x.name}@nhwc", shape, x.dtype, "activation",
                    view_of=graph.storage_of(x.name), strides=tuple(strides[d] for d in NHWC),
                    offset=x.offset)
    stored = Tensor(f"{out.name}@nhwc", shape, out.dtype, "activation", quant=out.quant)
    graph.tensors.update({source.name: source, stored.name: stored})
    args, outputs = dict(node.args), list(node.outputs)
    out.view_of, out.strides, out.offset = stored.name, (h * w * c, 1, w * c, c), 0
    node.args.update(input=Ref(source.name), out=Ref(stored.name))
    node.outputs = [stored.name]

    def undo() -> None:
        out.view_of, out.strides = None, None
        node.args, node.outputs = args, outputs
        del graph.tensors[source.name], graph.tensors[stored.name]

    return undo


_Checked = tuple[list[Node], bytes, vela.Report]


def _settle(graph: Graph, npu: object) -> tuple[list[Node], list[_Checked]]:
    """The node order and the runs Vela takes whole, each with its .tflite and Vela's report."""
    for _ in range(MAX_ROUNDS):
        order = schedule(graph, _accepted)
        checked, demoted = [], False
        for run in runs(order, _accepted):
            owners: dict[str, Node] = {}
            model = to_tflite(subgraph(graph, run, order), graph.npu.target, owners)
            try:
                report = vela.check(model, npu)
            except vela.VelaError as e:
                _demote_failing(graph, run, order, e)
                demoted = True
                continue
            for name, reason in report.cpu.items():
                _owner(owners, name, reason).cpu_reason = f"Vela: {reason}"
                demoted = True
            checked.append((run, model, report))
        if not demoted:
            return order, checked
    raise ExportError("NPU partitioning", f"Vela to accept the partitions within {MAX_ROUNDS} "
                      "rounds", "operators still placed on the CPU",
                      "export without the NPU board and report the model")


def _demote_failing(graph: Graph, run: list[Node], order: list[Node],
                    error: vela.VelaError) -> None:
    """Vela stopped on ``run``: find the calls it fails on alone and leave them on the CPU, with
    the legacy core's constraint where it names one. Re-raise when no call fails alone."""
    failing = []
    for node in run:
        owners: dict[str, Node] = {}
        model = to_tflite(subgraph(graph, [node], order), graph.npu.target, owners)
        try:
            vela.check(model, graph.npu)
        except vela.VelaError as e:
            why = [r for name, r in vela.legacy_reasons(model, graph.npu).items()
                   if owners.get(name) is node]
            failing.append((node, why[0] if why else e.message))
    if not failing:
        raise error
    for node, reason in failing:
        node.cpu_reason = f"Vela: {reason}"


def _owner(owners: dict[str, Node], name: str, reason: str) -> Node:
    if name not in owners:
        raise ExportError(f"Vela's CPU operator {name!r}", "an operator NEE wrote",
                          f"an unknown output name (reason: {reason})",
                          "report the model; export for a board without an NPU meanwhile")
    return owners[name]


def _compile(graph: Graph, checked: _Checked, index: int, order: list[Node],
             delegates: list[Delegate]) -> Node:
    """Compile one run, record its Delegate and return the node calling it."""
    run, model, report = checked
    npu = graph.npu
    raw = vela.compile_raw(model, npu)
    edge = boundary(graph, run, rest(run, order))
    _check_io(raw, graph, edge.inputs, edge.outputs)
    offsets, size = plan_workspace(graph, run, edge.internal)
    delegates.append(Delegate(
        BACKEND, npu.target, run, edge.inputs, edge.outputs,
        specs=_specs(graph, raw),
        payload={"command_stream": _bytes(raw["cmd_data"]),
                 "weights": _bytes(raw["weight_data"])},
        input_offsets=[int(o) for o in raw["input_offset"]],
        output_offsets=[int(o) for o in raw["output_offset"]],
        scratch=int(raw["scratch_size"]), fast_scratch=int(raw["scratch_fast_size"]),
        workspace=offsets, workspace_size=size,
        estimate=Estimate(report.cycles, npu.clock_hz, report.macs, report.sram_bytes,
                          report.flash_bytes, report.op_cycles)))
    call = delegate_call(index, edge, run[0].source)
    for key, size in ((SCRATCH_ARG, raw["scratch_size"]), (FAST_SCRATCH_ARG,
                                                            raw["scratch_fast_size"])):
        if int(size):
            name = f"delegate{index}_{key}"
            graph.tensors[name] = Tensor(name, (int(size),), "uint8", "scratch",
                                         tier=_scratch_tier(npu, key))
            call.args[key] = Ref(name)
    return call


def _scratch_tier(npu: Npu, key: str) -> str:
    """Where the device expects a workspace: Vela's scratch (the NPU's arena) in SRAM unless
    the memory mode keeps it in DRAM (Dedicated_Sram: SRAM is then the NPU's own cache, the
    fast scratch)."""
    dedicated = npu.memory_mode.startswith("Dedicated_Sram")
    return npu.dram_tier if dedicated and key == SCRATCH_ARG else npu.sram_tier


def _check_io(raw: dict[str, np.ndarray], graph: Graph, inputs: list[str],
              outputs: list[str]) -> None:
    """Vela's inputs and outputs are the partition's, in order (by element count)."""
    for side, names in (("input", inputs), ("output", outputs)):
        found = [int(np.prod(s)) for s in raw[f"{side}_shape"]]
        expected = [int(np.prod(graph.tensors[n].shape)) for n in names]
        if found != expected:
            raise ExportError(f"Vela's compiled {side}s", f"element counts {expected}",
                              str(found), "report the model")


def _specs(graph: Graph, raw: dict[str, np.ndarray]) -> dict[str, str]:
    npu = graph.npu
    return {"compiler": f"ethos-u-vela {vela.vela_version()}", "accelerator_config": npu.target,
            "system_config": npu.system_config, "memory_mode": npu.memory_mode,
            "int8_rounding": graph.int8_rounding,
            **{key: str(int(raw[key])) for key in ("weight_region", "scratch_region",
                                                    "scratch_fast_region")}}


def _bytes(array: np.ndarray) -> np.ndarray:
    return np.frombuffer(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
                         .tobytes(), np.uint8)
