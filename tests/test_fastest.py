"""The race between engines at load (``runtime_py/backends/fastest.py``): the fastest engine
runs each partition, refusing engines are left out, and the choice is visible."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import runtime_py.cli
from runtime_py.backends import Cpu, Partition, fastest
from runtime_py.backends.fastest import BLOCK, Fastest
from runtime_py.errors import BundleError
from runtime_py.kernels import Bound
from runtime_py.program import Program
from tests.test_xnnpack import _bundle
from toolchain.boards import load_board
from toolchain.export import export
from toolchain.quantize.options import Int8Options
from toolchain.serialize.bundle import write_bundle

pytest.importorskip("ai_edge_litert")


class _Delayed:
    """The CPU backend under another label, each run ``delay`` seconds slower; or refusing
    every partition (``delay`` None)."""

    def __init__(self, label: str, delay: float | None) -> None:
        self.label, self.delay, self.runs = label, delay, 0

    def prepare(self, partition: Partition) -> Bound:
        if self.delay is None:
            raise BundleError(f"partition {partition.index}", "something", "nothing", "none")
        run = Cpu().prepare(partition)

        def delayed() -> None:
            self.runs += 1
            time.sleep(self.delay)
            run()

        return delayed


def _inputs(path) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s.shape).astype(s.dtype)
            for s in Program.load(path, {"xnnpack": Cpu()}).inputs]


def _outputs(path, backend) -> list[np.ndarray]:
    """The outputs at 1 thread (BLAS sums in another order at the board's 4)."""
    program = Program.load(path, {"xnnpack": backend}, threads=1)
    return [o.copy() for o in program.run(*_inputs(path))]


@pytest.mark.parametrize("slow_first", [True, False])
def test_the_fastest_engine_runs_the_partition(tmp_path, slow_first: bool) -> None:
    _, _, _, path = _bundle(tmp_path, "cnn")
    slow, fast = _Delayed("slow", 0.003), _Delayed("fast", 0.0)
    race = Fastest([slow, fast] if slow_first else [fast, slow], seconds=0, rounds=3)
    program = Program.load(path, {"xnnpack": race}, threads=1)
    (choice,) = race.choices
    assert choice.engine == "fast" and race.label.endswith(": fast")
    assert choice.seconds["slow"] >= 0.003 > choice.seconds["fast"]
    assert slow.runs == fast.runs == 3 * BLOCK
    got = program.run(*_inputs(path))
    assert slow.runs == 3 * BLOCK and fast.runs == 3 * BLOCK + 1  # the run: the fast engine
    for g, want in zip(got, _outputs(path, Cpu()), strict=True):
        np.testing.assert_array_equal(g, want)


class _Clock:
    """A perf_counter advancing ``step`` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(("step", "rounds"), [(0.001, None), (0.0, 7)])
def test_the_race_lasts_its_seconds_up_to_a_most_of_rounds(tmp_path, monkeypatch, step,
                                                           rounds) -> None:
    """Past its least rounds the race goes on until ``seconds`` have passed (a clock at 1 ms a
    reading: 17 readings a round, 0.1 s), but never past MAX_ROUNDS (a clock standing still)."""
    _, _, _, path = _bundle(tmp_path, "cnn")
    monkeypatch.setattr(fastest, "time", _Clock(step))
    monkeypatch.setattr(fastest, "MAX_ROUNDS", 7)
    a, b = _Delayed("a", 0.0), _Delayed("b", 0.0)
    Program.load(path, {"xnnpack": Fastest([a, b], seconds=0.1, rounds=1)})
    assert a.runs == b.runs == BLOCK * (rounds or -(-100 // 17))


class _TwoPartitions(torch.nn.Module):
    """Two linear layers with a cumsum between them, which TFLite has no builtin for."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cumsum(self.a(x), dim=-1))


class _FastOn(_Delayed):
    """``_Delayed``: 2 ms a run on every partition but ``fast``."""

    def __init__(self, label: str, fast: int) -> None:
        super().__init__(label, 0.0)
        self.fast = fast

    def prepare(self, partition: Partition) -> Bound:
        self.delay = 0.0 if partition.index == self.fast else 0.002
        return super().prepare(partition)


def test_each_partition_gets_its_own_fastest_engine(tmp_path) -> None:
    path = tmp_path / "two.nee"
    write_bundle(export(_TwoPartitions(), (torch.randn(2, 8),), board=load_board("rpi5")), path)
    race = Fastest([_FastOn("one", 1), _FastOn("zero", 0)], seconds=0, rounds=2)
    program = Program.load(path, {"xnnpack": race})
    assert len(program.partitions) == 2
    assert [(c.partition, c.engine) for c in race.choices] == [(0, "zero"), (1, "one")]
    assert race.label.endswith(": partition 0 zero, partition 1 one")


def test_refusing_engines_are_left_out_and_all_refusing_is_an_error(tmp_path) -> None:
    _, _, _, path = _bundle(tmp_path, "cnn")
    race = Fastest([_Delayed("no", None), _Delayed("yes", 0.0)])
    _outputs(path, race)
    (choice,) = race.choices
    assert choice.engine == "yes" and choice.seconds == {} and "no" in choice.refused
    with pytest.raises(BundleError, match=r"partition 0 \(xnnpack\): expected an engine that "
                       r"runs it \(of 2\), found a: .*; b: .*"):
        Program.load(path, {"xnnpack": Fastest([_Delayed("a", None), _Delayed("b", None)])})


@pytest.mark.parametrize("engines", [[], [Cpu(), Cpu()]])
def test_engines_are_at_least_one_with_distinct_labels(engines) -> None:
    with pytest.raises(ValueError, match="at least one engine, distinct labels"):
        Fastest(engines)


def test_litert_and_openvino_race_and_int8_goes_to_litert(tmp_path) -> None:
    """The real engines: the chosen one's outputs are the reference program's (float
    tolerance); OpenVINO refuses an int8 partition, so LiteRT runs it."""
    pytest.importorskip("openvino")
    from runtime_py.backends.openvino import OpenVino
    from runtime_py.backends.xnnpack import Xnnpack

    _, inputs, _, path = _bundle(tmp_path, "cnn")
    race = Fastest([Xnnpack(), OpenVino()])
    for g, want in zip(_outputs(path, race), _outputs(path, Cpu()), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)
    (choice,) = race.choices
    assert set(choice.seconds) == {Xnnpack.label, OpenVino.label} and not choice.refused
    _, _, _, int8 = _bundle(tmp_path, "cnn", quantize=Int8Options(calibration=[inputs]))
    race = Fastest([Xnnpack(), OpenVino()])
    Program.load(int8, {"xnnpack": race})
    (choice,) = race.choices
    assert choice.engine == Xnnpack.label and set(choice.refused) == {OpenVino.label}


def test_nee_run_engine_fastest_says_what_it_chose(tmp_path) -> None:
    pytest.importorskip("openvino")
    _, _, _, path = _bundle(tmp_path, "mlp")
    done = CliRunner().invoke(runtime_py.cli.main,
                              [str(path), "--random", "--profile", "--engine", "fastest"])
    assert done.exit_code == 0, done.output
    assert "(fastest of XNNPACK (ai-edge-litert), OpenVINO CPU at load: " in done.output


def test_an_engine_a_pruned_runtime_lacks_is_a_usage_error(tmp_path, monkeypatch) -> None:
    _, _, _, path = _bundle(tmp_path, "mlp")
    real = runtime_py.cli.importlib.util.find_spec
    monkeypatch.setattr(runtime_py.cli.importlib.util, "find_spec",
                        lambda name, *a: None if name.endswith(".openvino") else real(name, *a))
    done = CliRunner().invoke(runtime_py.cli.main, [str(path), "--random", "--engine", "fastest"])
    assert done.exit_code == 2 and "built without the XNNPACK backend's engines" in done.output
