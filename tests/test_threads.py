"""The runtime's BLAS thread policy: the governor's choices on made-up run times, the thread
count a program sets, and where it comes from (argument, board recipe, default 1)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from threadpoolctl import threadpool_info

from runtime_py.backends import Cpu, Partition
from runtime_py.cli import main as run_main
from runtime_py.errors import BundleError, InputError
from runtime_py.kernels import Bound, run_all
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from runtime_py.threads import Fixed, Governor, policy
from tests.test_loader_errors import _repack
from tests.test_xnnpack import _bundle as _xnnpack_bundle
from toolchain.boards import load_board
from toolchain.export import export
from toolchain.serialize.bundle import write_bundle


def _drive(governor: Governor, seconds: dict[int, float], runs: int,
           settling: float = 0.0, spikes: frozenset[int] = frozenset()) -> list[int]:
    """The thread counts of ``runs`` runs that take ``seconds[threads]``, plus ``settling``
    where the count changed from the run before, times 1.4 for the runs numbered in
    ``spikes``."""
    used: list[int] = []
    for i in range(runs):
        threads = governor.threads()
        changed = bool(used) and used[-1] != threads
        took = (seconds[threads] + settling * changed) * (1.4 if i in spikes else 1)
        governor.record(threads, took)
        used.append(threads)
    return used


def _probes(used: list[int], other: int) -> list[int]:
    """Where the probes of ``other`` threads start in ``used``."""
    return [i for i, t in enumerate(used) if t == other and (i == 0 or used[i - 1] != other)]


def test_the_governor_keeps_the_faster_count_and_probes_ever_less() -> None:
    governor = Governor(4)
    used = _drive(governor, {4: 1.0, 1: 2.0}, 2000)
    assert governor.choice == 4
    probes = _probes(used, 1)
    assert probes[0] == Governor.FIRST - 1 and len(probes) <= 12  # 8, 16, ... up to 256 apart
    # each probe: a settling run, then a timed run slower than 4 threads' average ends it
    assert all(used[i:i + 3] == [1, 1, 4] for i in probes[:-1])
    assert used[-Governor.LONGEST:].count(1) <= 2


def test_the_governor_falls_back_under_load_and_returns_when_it_is_gone() -> None:
    governor = Governor(2)
    _drive(governor, {2: 1.0, 1: 1.6}, 500)
    assert governor.choice == 2
    loaded = _drive(governor, {2: 8.0, 1: 1.6}, 300)  # other work on the cores
    assert governor.choice == 1 and loaded[-100:].count(2) <= Governor.PROBE
    start = loaded.index(1)  # the first probe at 1 thread after the load came
    assert start <= Governor.LONGEST
    _drive(governor, {2: 1.0, 1: 1.6}, 300)  # the load is gone
    assert governor.choice == 2


def test_the_run_after_a_change_of_count_is_not_timed() -> None:
    """Switching counts costs the first run (threads start or wind down): 1 thread is truly
    1.5x faster here, but its first run after 2-thread runs is the slower. A governor timing
    that run would never switch."""
    governor = Governor(2)
    _drive(governor, {2: 1.5, 1: 1.0}, 200, settling=1.5)
    assert governor.choice == 1


def test_one_slow_probe_run_does_not_decide() -> None:
    """A probe counts the median of its timed runs: one run slowed 1.4x by a neighbour does not
    hide a faster count; and a count 5% slower is never picked."""
    governor = Governor(2)
    probe = frozenset({Governor.FIRST - 1, Governor.FIRST})  # its settling run and first timed
    used = _drive(governor, {2: 1.5, 1: 1.0}, 40, spikes=probe)
    assert used[Governor.FIRST] == 1 and governor.choice == 1
    governor = Governor(2)
    _drive(governor, {2: 1.0, 1: 1.05}, 500, settling=0.5)
    assert governor.choice == 2


def test_a_probe_ends_once_its_median_is_decided() -> None:
    """Two of three timed runs on one side of the bar decide the median: the third is not run.
    Run 7 settles; runs 8 and 9 are slower than the bar (0.9 of 2 threads' average) but not
    than the average, and run 10 is back at 2 threads (lost); or they are faster, and 1 thread
    is the choice from run 10 (won)."""
    governor = Governor(2)
    used = _drive(governor, {2: 1.0, 1: 0.95}, 12)
    assert used[7:10] == [1, 1, 1] and used[10] == 2
    governor = Governor(2)
    used = _drive(governor, {2: 1.0, 1: 0.5}, 12)
    assert used[7:12] == [1] * 5 and governor.choice == 1


def test_a_far_slower_count_costs_one_run_a_probe() -> None:
    """Under load the other count can be 10-30x slower: its probe ends at its first run, even
    though that run settles."""
    governor = Governor(2)  # 1 thread is faster: it becomes the choice, 2 threads the probes
    used = _drive(governor, {2: 30.0, 1: 1.0}, 300)
    starts = _probes(used[100:], 2)
    assert starts and all(used[100 + i:100 + i + 2] == [2, 1] for i in starts)
    governor = Governor(2)  # 2 threads stay; the first probe of 1 thread is lost at once
    _drive(governor, {2: 1.0, 1: 30.0}, 20)
    assert governor.choice == 2 and governor.probe == []
    assert governor.interval == 2 * Governor.FIRST


def test_one_thread_is_not_governed() -> None:
    assert isinstance(policy(1), Fixed) and policy(1).threads() == 1
    assert isinstance(policy(3), Governor) and policy(3).most == 3


def _blas_threads() -> int:
    return next(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_a_run_sets_the_programs_blas_threads(exported) -> None:
    ex = exported("mlp")
    Program.load(ex.path, threads=2).run(*ex.inputs)
    assert _blas_threads() == 2  # the governor starts at its most
    program = Program.load(ex.path)
    program.run(*ex.inputs)
    assert _blas_threads() == 1 and isinstance(program.thread_policy, Fixed)
    with pytest.raises(InputError, match="at least 1"):
        Program.load(ex.path, threads=0)


class _Recorder:
    """A backend noting the BLAS threads set while it prepares (and times) a partition."""

    label = "recorder"

    def __init__(self) -> None:
        self.threads: list[int] = []

    def prepare(self, partition: Partition) -> Bound:
        self.threads.append(_blas_threads())
        return run_all(*partition.reference())


def test_a_load_runs_at_the_programs_thread_count(tmp_path) -> None:
    """A race between engines at load times them at the loading program's count, not at the
    count the process's last program left (here the board recipe's 4)."""
    *_, path = _xnnpack_bundle(tmp_path, "mlp")
    recorder = _Recorder()
    Program.load(path, {"xnnpack": Cpu()}).run(*_zeros(path))  # the board's 4 threads
    Program.load(path, {"xnnpack": recorder}, threads=1)
    Program.load(path, {"xnnpack": recorder}, threads=2)
    assert recorder.threads == [1, 2]


def _zeros(path) -> list[np.ndarray]:
    return [np.zeros(s.shape, s.dtype) for s in Program.load(path, {"xnnpack": Cpu()}).inputs]


def test_the_board_recipes_threads_are_the_default(tmp_path) -> None:
    import torch

    path = tmp_path / "host.nee"
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    board = load_board("host")
    write_bundle(export(model, (torch.randn(2, 8),), board=board), path)
    assert load_bundle(path).bundle.threads == board.threads == 4
    assert Program.load(path).thread_policy.most == 4
    assert Program.load(path, threads=1).thread_policy.most == 1
    bundle, write = _repack(path, tmp_path, "forged.nee")
    bundle.threads = 10**6
    with pytest.raises(BundleError, match="at most 256 BLAS threads"):
        load_bundle(write())


def test_nee_run_takes_threads(exported) -> None:
    ex = exported("mlp")
    done = CliRunner().invoke(run_main, [str(ex.path), "--random", "--threads", "2"])
    assert done.exit_code == 0, done.output
    bad = CliRunner().invoke(run_main, [str(ex.path), "--random", "--threads", "0"])
    assert bad.exit_code == 2
