"""The runtime's thread policy: how many BLAS threads (the only threads numpy's kernels use) a
program's runs get.

OpenBLAS's worker threads spin while they wait for work. On a device whose cores also run other
work, a run with 2 threads can be several times slower than with 1 (measured here beside one or
two busy processes on 2 cores: resnet18 1.5-8x, mobilenet_v2 1.4-5x). So a program runs with 1
thread unless asked for more (``Program.load(threads=N)``, or the board recipe's ``threads``
recorded in the bundle); with N > 1 a ``Governor`` keeps choosing between 1 and N threads by the
run times it measures, so a loaded device falls back to 1 thread and an idle one uses N.

The setting is the process's (BLAS libraries have one): each run sets it when it differs from
the last value the runtime set, and leaves it set (threadpoolctl finds the BLAS libraries numpy
loaded; ``threadpoolctl.threadpool_limits`` sets it for other code). A delegate engine whose
threads are fixed when it is made (LiteRT's, OpenVINO's) follows the same choice through one
instance per count (``per_count``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

_BLAS: list[Any] = []  # threadpoolctl's controllers of the loaded BLAS libraries, on first use
_current = [0]  # the BLAS threads the runtime last set (0: none yet)


def set_blas_threads(threads: int) -> None:
    """Set the process's BLAS threads to ``threads`` unless the runtime last set just that."""
    if threads == _current[0]:
        return
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.extend(ThreadpoolController().select(user_api="blas").lib_controllers or [None])
    for lib in _BLAS:
        if lib is not None:
            lib.set_num_threads(threads)
    _current[0] = threads


def per_count(most: int, make: Callable[[int], Callable[[], None]]) -> Callable[[], None]:
    """The run of a delegate engine whose thread count is fixed when it is made (LiteRT's
    XNNPACK pool, OpenVINO's): made by ``make`` for 1 and for ``most`` threads if ``most`` > 1
    (the counts a ``Governor`` switches between), each run calling the one of the count the
    program's policy set for it (``set_blas_threads``, right before the run)."""
    if most <= 1:
        return make(1)
    one, many = make(1), make(most)

    def run() -> None:
        (one if _current[0] == 1 else many)()

    return run


class Fixed:
    """Always the same number of threads."""

    def __init__(self, threads: int) -> None:
        self.most = threads

    def threads(self) -> int:
        return self.most

    def run(self, execute: Callable[[], None]) -> None:
        """``execute`` with ``most`` threads (untimed: nothing to learn)."""
        set_blas_threads(self.most)
        execute()


class Governor:
    """1 or ``most`` threads per run, whichever has run faster lately.

    Runs use the current choice; every ``interval`` runs a probe of up to ``PROBE`` runs tries
    the other count. The first run after a change of count is not timed: OpenBLAS's threads
    start or wind down in it (cnn's first 1-thread run after 2-thread runs took 1.46x the later
    ones here; timed, it kept 2 threads that ran 1.5x slower than 1). The other runs decide by
    their median, and the probe ends once that is decided (two of three on one side): at most
    ``MARGIN`` of the choice's recent average (an exponential average of its run times) makes
    the probed count the choice; otherwise the interval doubles, up to ``LONGEST`` runs. A timed
    run not faster than that average ends the probe (lost), and so does any probe run over
    ``LOST`` times it: a slower count costs two runs per probe, one if 10-30x slower (under
    load)."""

    FIRST, LONGEST = 8, 256  # runs between probes: after a switch, and at most
    PROBE = 4  # runs per probe at most: the first settles, the median of the other three counts
    MARGIN = 0.9  # a probe must take at most this share of the choice's average time
    LOST = 3.0  # a probe run over this many times the choice's average ends the probe
    WEIGHT = 0.25  # of the newest run time in the choice's average

    def __init__(self, most: int) -> None:
        self.most = most
        self.choice = most
        self.average = math.inf  # the choice's recent run time (s)
        self.interval = self.countdown = self.FIRST
        self.last = 0  # the previous run's thread count (0: none yet)
        self.probe: list[float] = []  # the current probe's timed runs (s)

    def threads(self) -> int:
        """The thread count for the next run."""
        self.countdown -= 1
        if self.countdown > 0:
            return self.choice
        return 1 if self.choice == self.most else self.most

    def run(self, execute: Callable[[], None]) -> None:
        """``execute`` with the next run's thread count, timed and recorded."""
        threads = self.threads()
        set_blas_threads(threads)
        start = time.perf_counter()
        execute()
        self.record(threads, time.perf_counter() - start)

    def record(self, threads: int, seconds: float) -> None:
        """Learn from a run that used ``threads`` and took ``seconds``."""
        settling, self.last = threads != self.last, threads
        if threads == self.choice:
            if not settling:
                self.average = seconds if math.isinf(self.average) else (
                    self.average + self.WEIGHT * (seconds - self.average))
            return
        if not settling:
            self.probe.append(seconds)
        bar, majority = self.MARGIN * self.average, self.PROBE // 2  # of PROBE - 1 timed runs
        faster = sum(t < bar for t in self.probe)
        lost = (seconds > self.LOST * self.average or len(self.probe) - faster >= majority
                or (not settling and seconds >= self.average))
        if faster >= majority:
            self.choice, self.average, self.interval = threads, statistics.median(self.probe), \
                self.FIRST
        elif lost:
            self.interval = min(2 * self.interval, self.LONGEST)
        else:
            return
        self.probe.clear()
        self.countdown = self.interval


def policy(threads: int) -> Fixed | Governor:
    """The policy of a program allowed ``threads`` BLAS threads."""
    return Fixed(1) if threads <= 1 else Governor(threads)
