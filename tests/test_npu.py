"""The Ethos-U delegate: partitioning by Vela's verdict, compiled payloads in the bundle, the
backend interface, and outputs bit-identical to the all-CPU int8 program."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from bundle_fuzz import repacked
from click.testing import CliRunner
from torch import nn

from runtime_py import program as program_module
from runtime_py.backends import Cpu, Partition
from runtime_py.backends.ethos_u import EthosU
from runtime_py.errors import BundleError, MissingBackendError
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.fbs.StorageKind import StorageKind
from runtime_py.format import DELEGATE_CALL
from runtime_py.kernels import run_all
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from toolchain.boards import Board, Npu
from toolchain.cli import export_main, inspect_main
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.ir import Graph, Node, Quant, Ref, Tensor
from toolchain.memory_plan.types import Tier
from toolchain.partition import boundary, runs, schedule
from toolchain.passes.npu_tables import npu_tables
from toolchain.quantize.options import Int8Options
from toolchain.serialize.bundle import write_bundle

pytest.importorskip("ethosu.vela")

U55 = Npu("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", 500_000_000)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _board(npu: Npu = U55, sram: int = 2 << 20) -> Board:
    return Board("test-npu", "", (Tier("sram", sram), Tier("dram", 64 << 20)), npu,
                 ("int8", "float32"))


class Middle(nn.Module):
    """Convolutions around one with stride 4 and padding, which Vela cannot run on an Ethos-U55."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 5, stride=4, padding=2)
        self.c = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b(torch.relu(self.a(x))))
        return self.fc(torch.relu(self.c(y)).mean((2, 3)))


def _samples(n: int, shape: tuple[int, ...], seed: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g),) for _ in range(n)]


@dataclass
class Pair:
    """One int8 model exported for the NPU board and for the CPU alone."""

    npu: Path
    cpu: Path
    result: object
    inputs: list[np.ndarray]


def _export_pair(tmp: Path, model: nn.Module, example: tuple, calibration: list) -> Pair:
    options = Int8Options(calibration=calibration)
    result = export(model, example, board=_board(), quantize=options)
    write_bundle(result, tmp / "npu.nee")
    write_bundle(export(model, example, quantize=options), tmp / "cpu.nee")
    inputs = [s[0].numpy() for s in _samples(4, tuple(example[0].shape), 7)]
    return Pair(tmp / "npu.nee", tmp / "cpu.nee", result, inputs)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> Pair:
    from toolchain.modules import load_file

    module = load_file(EXAMPLES / "cnn.py")
    calibration = [tuple(s) for s in module.calibration_inputs()]
    return _export_pair(tmp_path_factory.mktemp("cnn"), module.Model().eval(),
                        tuple(module.example_inputs()), calibration)


@pytest.fixture(scope="module")
def middle(tmp_path_factory) -> Pair:
    torch.manual_seed(0)
    return _export_pair(tmp_path_factory.mktemp("middle"), Middle().eval(),
                        (torch.randn(1, 3, 32, 32),), _samples(8, (1, 3, 32, 32), 1))


def _assert_bit_identical(pair: Pair, **load) -> None:
    npu, cpu = Program.load(pair.npu, **load), Program.load(pair.cpu)
    for x in pair.inputs:
        got = [o.copy() for o in npu.run(x)]
        for a, b in zip(got, cpu.run(x), strict=True):
            np.testing.assert_array_equal(a, b)


def test_cnn_runs_on_the_npu_in_one_partition(cnn):
    graph = cnn.result.graph
    assert len(graph.delegates) == 1
    d = graph.delegates[0]
    assert d.backend == "ethos-u" and d.target == "ethos-u55-128"
    assert all(graph.tensors[n.outputs[0]].dtype == "int8" for n in d.nodes)
    left = [n for n in graph.nodes if n.op != DELEGATE_CALL]
    assert left and all(n.cpu_reason for n in left)  # quantize, dequantize, float softmax
    assert all("float32" in n.cpu_reason for n in left)
    assert d.payload["command_stream"].size > 0 and d.payload["weights"].size > 0
    assert d.estimate.cycles > 0 and d.estimate.macs > 0 and d.scratch > 0
    # the CPU's quantize writes the NPU's input in NHWC (fewer cycles on this U55 than a
    # TRANSPOSE on the NPU); the NCHW int8 tensor the reference program reads is a view of it
    (x_q,) = d.inputs
    assert graph.tensors[x_q].shape == (1, 32, 32, 3)
    _assert_bit_identical(cnn)


@pytest.mark.parametrize("kind", ["example", "LSTM"])
def test_an_int8_recurrent_model_runs_on_the_npu_in_one_partition(tmp_path, kind):
    """Ten unrolled steps of the GRU example's cell or of an nn.LSTM (linear layers, add, sub
    with a number, mul, sigmoid and tanh tables): every int8 call goes to the NPU, only the
    float input's quantize and the output's dequantize stay; the reference program gives the
    CPU bundle's outputs bit for bit."""
    from tests.test_quantize import _Recurrent
    from toolchain.modules import load_file

    module = load_file(EXAMPLES / "gru.py")
    model = module.Model() if kind == "example" else _Recurrent(kind)
    pair = _export_pair(tmp_path, model.eval(), tuple(module.example_inputs()),
                        [tuple(s) for s in module.calibration_inputs()])
    graph = pair.result.graph
    (d,) = graph.delegates
    assert d.backend == "ethos-u" and len(d.nodes) > 100
    assert graph.int8_rounding == "double"  # an NPU board's default: Vela's
    assert [n.op for n in graph.nodes] == ["nee::quantize_per_tensor.out", DELEGATE_CALL,
                                           "nee::dequantize_per_tensor.out"]
    _assert_bit_identical(pair)


def test_layout_vela_estimates_slower_is_undone(exported, tmp_path):
    """On the i.MX 93's Ethos-U65 (input in DRAM) the NHWC input costs more: NCHW stays."""
    from toolchain.boards import load_board
    from toolchain.modules import load_file

    module = load_file(EXAMPLES / "cnn.py")
    options = Int8Options(calibration=[tuple(s) for s in module.calibration_inputs()])
    model, example = module.Model().eval(), tuple(module.example_inputs())
    result = export(model, example, board=load_board("imx93-ethos-u65"), quantize=options)
    (d,) = result.graph.delegates
    assert result.graph.tensors[d.inputs[0]].shape == (1, 3, 32, 32)
    assert not any(name.endswith("@nhwc") for name in result.graph.tensors)
    assert d.fast_scratch > 0  # Dedicated_Sram: the NPU's SRAM cache is planned too
    write_bundle(result, tmp_path / "u65.nee")
    write_bundle(export(model, example, quantize=options), tmp_path / "cpu.nee")
    x = [s[0].numpy() for s in _samples(2, (1, 3, 32, 32), 3)]
    _assert_bit_identical(Pair(tmp_path / "u65.nee", tmp_path / "cpu.nee", result, x))


def test_op_vela_rejects_leaves_cpu_between_two_partitions(middle):
    graph = middle.result.graph
    ops = [n.op for n in graph.nodes]
    assert ops.count(DELEGATE_CALL) == 2
    first, second = (i for i, op in enumerate(ops) if op == DELEGATE_CALL)
    between = graph.nodes[first + 1:second]
    assert [n.op for n in between] == ["nee::conv2d_int8.out"]
    assert between[0].cpu_reason.startswith("Vela: ") and "tride" in between[0].cpu_reason
    _assert_bit_identical(middle)


def test_partition_payloads_are_aligned_segments_of_their_own(middle):
    loaded = load_bundle(middle.npu)
    segments = [p.segment for d in loaded.bundle.delegates for p in d.payload]
    assert len(set(segments)) == len(segments) == 4
    for k in segments:
        assert loaded.bundle.segments[k].offset % 64 == 0
    graph = middle.result.graph
    blobs = [b for d in graph.delegates for b in d.payload.values()]
    program = Program.load(middle.npu)
    views = [v for p in program.partitions for v in p.payload.values()]
    assert all(np.array_equal(v, b) for v, b in zip(views, blobs, strict=True))


def test_float_model_on_an_npu_board_stays_on_the_cpu_with_reasons(exported):
    ex = exported("cnn")
    result = export(ex.model, ex.torch_inputs, board=_board())
    assert not result.graph.delegates
    assert all("--quantize int8" in n.cpu_reason for n in result.graph.nodes)


def test_sram_beyond_the_board_fails_export_with_needed_and_available():
    torch.manual_seed(0)
    options = Int8Options(calibration=_samples(4, (1, 3, 32, 32), 1))
    with pytest.raises(ExportError,
                       match=r"within the sram tier of 8192 B \(8 KiB\).*partition 0 needs \d+ B"):
        export(Middle().eval(), (torch.randn(1, 3, 32, 32),), board=_board(sram=8192),
               quantize=options)


def test_missing_backend_falls_back_to_the_cpu_or_fails_naming_it(middle, monkeypatch,
                                                                   tmp_path):
    monkeypatch.setattr(program_module, "BACKENDS", {"cpu": Cpu()})
    _assert_bit_identical(middle)
    graph = middle.result.graph
    for d in graph.delegates:
        d.cpu_fallback = False
    try:
        write_bundle(middle.result, tmp_path / "strict.nee")
    finally:
        for d in graph.delegates:
            d.cpu_fallback = True
    with pytest.raises(MissingBackendError, match=r"missing: ethos-u \(partition 0"):
        Program.load(tmp_path / "strict.nee")


def test_device_driver_receives_payload_scratch_and_io(middle):
    seen: list[Partition] = []

    def driver(partition: Partition):
        seen.append(partition)
        return run_all(*partition.reference())  # a test double: NEE ships no driver

    _assert_bit_identical(middle, backends={"ethos-u": EthosU(driver)})
    delegates = middle.result.graph.delegates
    assert [p.index for p in seen] == [0, 1]
    for p, d in zip(seen, delegates, strict=True):
        assert p.scratch is not None and p.scratch.nbytes == d.scratch
        assert [x.shape for x in p.inputs] == [middle.result.graph.tensors[n].shape
                                                for n in d.inputs]
        assert p.input_offsets == d.input_offsets and p.specs["memory_mode"] == "Shared_Sram"
        assert not p.payload["command_stream"].flags.writeable


def test_device_mode_without_a_driver_fails_at_load(middle):
    with pytest.raises(BundleError, match=r"expected an Ethos-U driver"):
        Program.load(middle.npu, backends={"ethos-u": EthosU(require_device=True)})


def _mutated(pair: Pair, tmp_path: Path, mutate) -> Path:
    path = tmp_path / "bad.nee"
    path.write_bytes(repacked(pair.npu.read_bytes(), mutate))
    return path


def _set_payload_segment(b):
    b.delegates[0].payload[0].segment = 10_000


def _drop_call(b):
    b.nodes = [n for n in b.nodes if n.op != DELEGATE_CALL.encode()
               and n.op != DELEGATE_CALL]


def _swap_outputs(b):
    b.delegates[0].outputs = list(b.delegates[1].outputs)


def _offsets(b):
    b.delegates[0].inputOffsets = []


def _empty_backend(b):
    b.delegates[1].backend = ""


def _read_other_workspace(b):
    """Delegate 1's first call reads a tensor of delegate 0's workspace."""
    inside = next(k for k, t in enumerate(b.tensors)
                  if t.storageKind == StorageKind.Delegate and t.storage == 0)
    arg = next(a for a in b.delegates[1].nodes[0].args if a.kind == ArgKind.Tensor)
    arg.tensors = [inside]


def _offset_beyond_scratch(b):
    b.delegates[0].outputOffsets = [b.delegates[0].scratch]


def _huge_workspace(b):
    b.delegates[0].workspace = 1 << 40


def _output_in_workspace(b):
    b.outputs = [next(k for k, t in enumerate(b.tensors) if t.storageKind == StorageKind.Delegate)]


@pytest.mark.parametrize("mutate, message", [
    (_offset_beyond_scratch, r"delegate 0 .*offsets \[\d+\], \[\d+\] inside the \d+ B scratch"),
    (_huge_workspace, r"delegate 0 .*a workspace of 1099511627776 B, as large as its tensors"),
    (_output_in_workspace, r"output .*expected an arena tensor or a constant"),
    (_set_payload_segment, r"delegate 0 .*payload"),
    (_drop_call, r"delegate calls: expected one nee::delegate_call per delegate"),
    (_swap_outputs, r"delegate 0 .*call's inputs and outputs"),
    (_offsets, r"delegate 0 .*one scratch offset per input"),
    (_empty_backend, r"delegate 1 .*backend ''"),
    (_read_other_workspace, r"delegate workspaces: .*delegate 1 node 0 .* of delegate 0"),
])
def test_loader_rejects_malformed_delegates(middle, tmp_path, mutate, message):
    with pytest.raises(BundleError, match=message):
        load_bundle(_mutated(middle, tmp_path, mutate))


def test_cli_exports_for_a_board_and_shows_partitions_and_reasons(tmp_path):
    out = tmp_path / "cnn.nee"
    runner = CliRunner()
    done = runner.invoke(export_main, [f"{EXAMPLES / 'cnn.py'}:Model", "-o", str(out),
                                       "--quantize", "int8", "--board", "cortex-m55-ethos-u55"])
    assert done.exit_code == 0, done.output
    assert "delegate 0:" in done.output
    shown = runner.invoke(inspect_main, [str(out)])
    assert shown.exit_code == 0, shown.output
    assert "partitions (1;" in shown.output and "100.0% of" in shown.output
    assert "calls on the CPU and why (3)" in shown.output
    from runtime_py.cli import main as run_main

    ran = runner.invoke(run_main, [str(out), "--random", "--profile"])
    assert ran.exit_code == 0, ran.output
    assert "estimated" in ran.output and "on the ethos-u55-128" in ran.output


# -- the partitioner on random graphs: runs are contiguous and free of cycles ----------------


def _random_graph(rng: random.Random, n: int) -> tuple[Graph, set[str]]:
    tensors = {"x": Tensor("x", (1,), "int8", "input")}
    nodes, names = [], ["x"]
    for i in range(n):
        reads = rng.sample(names, min(len(names), rng.randint(1, 2)))
        out = f"t{i}"
        tensors[out] = Tensor(out, (1,), "int8", "activation")
        nodes.append(Node("nee::add_int8.out", {"self": Ref(reads[0]), "other": Ref(reads[-1]),
                                                "out": Ref(out)}, [out], out_names=["out"]))
        names.append(out)
    accepted = {f"t{i}" for i in range(n) if rng.random() < 0.6}
    return Graph(tensors, nodes, ["x"], [names[-1]]), accepted


@pytest.mark.parametrize("seed", range(40))
def test_runs_of_the_schedule_never_create_a_cycle(seed):
    graph, accepted_outputs = _random_graph(random.Random(seed), 14)

    def accepted(node: Node) -> bool:
        return node.outputs[0] in accepted_outputs

    order = schedule(graph, accepted)
    position = {node.outputs[0]: i for i, node in enumerate(order)}
    for node in order:  # a topological order
        for name in node.args.values():
            if name.name != "x" and name.name != node.outputs[0]:
                assert position[name.name] < position[node.outputs[0]]
    found = runs(order, accepted)
    assert sum(map(len, found)) == sum(map(accepted, graph.nodes))
    for run in found:
        members = {n.outputs[0] for n in run}
        rest = [n for n in order if n.outputs[0] not in members]
        edge = boundary(graph, run, rest)
        # nothing the run reads comes from a node that itself reads the run's results
        downstream = set(members)
        for node in order[position[run[-1].outputs[0]] + 1:]:
            if {r.name for r in node.args.values()} & downstream:
                downstream.add(node.outputs[0])
        assert not set(edge.inputs) & (downstream - members)


# -- hardsigmoid: a table Vela has no operator for, written as ADD and MUL ------------------


def _lookup_graph(q_in: tuple[float, int], q_out: tuple[float, int]) -> Graph:
    from toolchain.quantize import fixed_point

    quant = {n: Quant((fixed_point.f32(s),), (z,)) for n, (s, z) in (("x", q_in), ("y", q_out))}
    table = fixed_point.hardsigmoid_table(fixed_point.Quant(*q_in), fixed_point.Quant(*q_out))
    tensors = {"x": Tensor("x", (256,), "int8", "input", quant=quant["x"]),
               "y": Tensor("y", (256,), "int8", "activation", quant=quant["y"]),
               "t": Tensor("t", (256,), "int8", "const", table)}
    node = Node("nee::lookup_int8.out", {"self": Ref("x"), "table": Ref("t"), "out": Ref("y")},
                ["y"], out_names=["out"])
    return Graph(tensors, [node], ["x"], ["y"])


def _evaluate(graph: Graph, x: np.ndarray) -> np.ndarray:
    from runtime_py.kernels import KERNELS, numpy_mode

    values = {"x": x}
    with numpy_mode():
        for node in graph.nodes:
            for out in node.outputs:
                values[out] = np.empty(graph.tensors[out].shape, graph.tensors[out].dtype)
            args = {k: (values[v.name] if v.name in values else graph.const_value(v.name))
                    if isinstance(v, Ref) else v for k, v in node.args.items()}
            KERNELS[node.op].bind(args)()
    return values[graph.outputs[0]]


@pytest.mark.parametrize("q_in, q_out", [
    ((0.05, 3), (1 / 256, -128)), ((0.1, -20), (0.004, -128)), ((0.02, 0), (0.0045, -100)),
    ((0.2, 60), (1 / 255, -128))])
def test_npu_tables_rewrites_hardsigmoid_within_one_step_of_the_table(q_in, q_out):
    x = np.arange(-128, 128, dtype=np.int8)
    want = _evaluate(_lookup_graph(q_in, q_out), x)
    graph = _lookup_graph(q_in, q_out)
    graph.npu = U55
    graph = npu_tables(graph)
    assert [n.op for n in graph.nodes] == ["nee::add_int8.out", "nee::mul_int8.out"]
    got = _evaluate(graph, x)
    assert np.abs(got.astype(int) - want).max() <= 1
    assert npu_tables(_lookup_graph(q_in, q_out)).nodes[0].op == "nee::lookup_int8.out"  # no NPU


class Gated(nn.Module):
    """A squeeze-excite gate with hardsigmoid (MobileNetV3's), between convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        y = y * nn.functional.hardsigmoid(self.fc(y.mean((2, 3), keepdim=True)))
        return self.b(y)


def test_hardsigmoid_gate_stays_inside_one_partition():
    torch.manual_seed(0)
    options = Int8Options(calibration=_samples(8, (1, 3, 16, 16), 2))
    result = export(Gated().eval(), (torch.randn(1, 3, 16, 16),), board=_board(),
                    quantize=options)
    (d,) = result.graph.delegates
    assert "nee::mul_int8.out" in [n.op for n in d.nodes]
    assert "nee::lookup_int8.out" not in [n.op for n in result.graph.all_nodes()]
