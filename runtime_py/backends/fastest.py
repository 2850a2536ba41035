"""The fastest engine per partition, timed at load.

Which engine runs a partition fastest depends on the partition and the machine: on one x86
machine OpenVINO ran resnet18's XNNPACK partition 1.13-1.21x faster than LiteRT, and LiteRT ran
the small models 1.1-3.5x faster than OpenVINO (docs/cpu-speed.md). ``Fastest``
prepares each partition with every one of its engines and times them at load, in turns: BLOCK
runs of one engine at a time (the first of each untimed: it pays for the other engine's
threads, which may still be spinning), the engines' order alternating, for at least ``rounds``
rounds and ``seconds`` in all, at the program's thread count (``Program`` sets it before
binding). The one with the lowest median runs the partition; the others
are dropped. An engine that refuses the partition (a BundleError: OpenVINO refuses int8
partitions) is left out of the race; the partition is refused only if every engine refuses
it, with every engine's reason. The choice is made once, at load, on the arena's current
values: a run then only calls the chosen closure. While a partition is raced every engine holds
its own copy of the model (each checked against ``max_arena_bytes`` alone): the load's peak
memory is their sum. ``Program.load(path, {"xnnpack":
Fastest([Xnnpack(), OpenVino()])})``, ``nee-run --engine fastest``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime_py.errors import BundleError
from runtime_py.kernels import Bound

if TYPE_CHECKING:
    from runtime_py.backends import Backend, Partition

BLOCK = 5  # runs of one engine in a row, the first untimed
MAX_ROUNDS = 2000  # a race ends after this many rounds, however short they are


@dataclass(frozen=True)
class Choice:
    """The engine partition ``partition`` (of one method) runs on, each raced engine's median
    time (seconds; none if only one engine took the partition) and the reasons of those that
    refused it."""

    partition: int
    engine: str
    seconds: dict[str, float]
    refused: dict[str, str]


class Fastest:
    """Runs each partition on whichever of ``engines`` (labels distinct) was fastest at load."""

    def __init__(self, engines: Sequence[Backend], seconds: float = 0.2,
                 rounds: int = 4) -> None:
        labels = [engine.label for engine in engines]
        if not labels or len(set(labels)) != len(labels) or rounds < 1:
            raise ValueError(f"engines {labels}, rounds {rounds}: expected at least one engine, "
                             "distinct labels and at least one round")
        self.engines, self.seconds, self.rounds = list(engines), seconds, rounds
        self.choices: list[Choice] = []  # in the order partitions were prepared

    @property
    def label(self) -> str:
        """The engines raced and, once partitions are loaded, the ones chosen."""
        raced = f"fastest of {', '.join(e.label for e in self.engines)} at load"
        if not self.choices:
            return raced
        chosen = {c.engine for c in self.choices}
        if len(chosen) == 1:
            return f"{raced}: {chosen.pop()}"
        return f"{raced}: " + ", ".join(f"partition {c.partition} {c.engine}"
                                        for c in self.choices)

    def prepare(self, partition: Partition) -> Bound:
        """Each engine's closure for ``partition``, raced; the fastest one's."""
        runs, refused = {}, {}
        for engine in self.engines:
            try:
                runs[engine.label] = engine.prepare(partition)
            except BundleError as e:
                refused[engine.label] = str(e)
        if not runs:
            raise BundleError(f"partition {partition.index} ({partition.backend})",
                              f"an engine that runs it (of {len(self.engines)})",
                              "; ".join(f"{label}: {why}" for label, why in refused.items()),
                              "fix the first engine's error, or install another engine")
        seconds = _race(runs, self.seconds, self.rounds) if len(runs) > 1 else {}
        engine = min(seconds, key=seconds.__getitem__) if seconds else next(iter(runs))
        self.choices.append(Choice(partition.index, engine, seconds, refused))
        return runs[engine]


def _race(runs: dict[str, Bound], seconds: float, rounds: int) -> dict[str, float]:
    """Each closure's median time, the closures run in turns (module docstring)."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    order = list(runs.items())
    start = time.perf_counter()
    for r in range(MAX_ROUNDS):
        if r >= rounds and time.perf_counter() - start >= seconds:
            break
        for label, run in (order if r % 2 == 0 else order[::-1]):
            run()
            for _ in range(BLOCK - 1):
                begin = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - begin)
    return {label: statistics.median(t) for label, t in times.items()}
