"""Portfolio planner: several exact decision engines race at each capacity, the greedy plan
above them and the best bound below.

Engines (``engines()``): the exact search in each of its preorders and, when OR-Tools is
installed, CP-SAT's fixed-order decision search in several orders (``cpsat.py``). At a capacity
all engines run in rounds of doubling effort, spread over worker processes; a round's answer is
that of the first engine, in ``engines()`` order, that finds a plan or proves there is none, so
the result does not depend on which process was faster. Capacities are probed as in
``plan_search``: the lower bound first, then a bisection between what is known infeasible and
the best plan, each probe getting half of the remaining time.

A proof that a capacity is infeasible raises the lower bound the plan reports (``Arena.
lower_bound``): a plan at that bound is optimal. Proofs count only when every footprint is a
multiple of the common alignment unit, the engines' model then being exact.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any

from .core import arena_size, plan_peak, single_tier_plan
from .greedy import plan_greedy
from .search import HEURISTICS, OutOfEffort, UnitProblem, deep_recursion
from .types import BufferRequest, Plan

Engine = Callable[..., list[int] | None]  # (problem, capacity, effort, deadline, stop)
SEARCH_NODES = 8  # the exact search's node limit per buffer at effort 0
FOUND, INFEASIBLE, UNKNOWN = "found", "infeasible", "unknown"


def _search(problem: UnitProblem, capacity: int, effort: int, deadline: float,
            stop: Callable[[], bool], heuristic: str) -> list[int] | None:
    """The exact search in one preorder under a node limit doubling with ``effort``."""
    with deep_recursion(len(problem.sizes)):
        return problem.solver.decide(capacity, heuristic,
                                     SEARCH_NODES * len(problem.sizes) << effort, deadline, stop)


def engines() -> dict[str, Engine]:
    """The decision engines by name, in the order their answers take precedence."""
    found: dict[str, Engine] = {}
    try:
        cpsat = importlib.import_module(".cpsat", __package__)
    except ImportError:  # OR-Tools is an optional extra
        pass
    else:
        found.update({f"cpsat-{o}": partial(cpsat.decide, order=o) for o in cpsat.ORDERS})
    found.update({f"search-{h}": partial(_search, heuristic=h) for h in HEURISTICS})
    return found


@dataclass(frozen=True)
class Progress:
    """What the portfolio knows so far, reported after every probe."""

    elapsed: float  # seconds since the start
    best: int  # bytes of the best plan so far
    bound: int  # no plan is smaller (max live bytes, raised by infeasibility proofs)
    tried: int  # the capacity just probed
    outcome: str  # FOUND, INFEASIBLE (proven) or UNKNOWN (out of time)
    engine: str  # the engine that answered ("" for UNKNOWN)


def _attempt(problem: UnitProblem, engine: Engine, capacity: int, effort: int,
             deadline: float, stop: Callable[[], bool]) -> tuple[str, list[int] | None]:
    """(FOUND, unit offsets), (INFEASIBLE, None) or (UNKNOWN, None)."""
    try:
        found = engine(problem, capacity, effort, deadline, stop)
    except OutOfEffort:
        return UNKNOWN, None
    return (INFEASIBLE, None) if found is None else (FOUND, found)


def _serve(conn: Connection, problem: UnitProblem, chosen: dict[str, Engine],
           generation: Any) -> None:
    """A worker process (forked: it inherits the parent's problem and engines): answers tasks
    ``(round, engine, capacity, effort, deadline, generation)`` until its pipe closes; a task
    stops once the parent moves on (the shared ``generation`` changes). Ctrl-C is left to the
    parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            round_, name, capacity, effort, deadline, mine = conn.recv()
        except EOFError:
            return
        conn.send((round_, name, *_attempt(problem, chosen[name], capacity, effort, deadline,
                                           lambda g=mine: generation.value != g)))


class _Pool:
    """Engines run in forked worker processes (forked, not spawned: a spawned worker would run
    the caller's main script again), each with its own pipe: no lock is shared, so a worker that
    dies costs only its answer (UNKNOWN) and ``close`` can kill them all without hanging (as
    ``multiprocessing.Pool.terminate`` can, CPython issue 96995); ``cancel`` stops every task
    of the current round."""

    def __init__(self, problem: UnitProblem, chosen: dict[str, Engine], workers: int) -> None:
        context = multiprocessing.get_context("fork")
        self.names = list(chosen)
        self.generation = context.Value("q", 0, lock=False)
        self.round = 0
        self.idle: list[tuple[Connection, Any]] = []
        self.busy: dict[Connection, tuple[Any, int, str]] = {}  # conn: (process, round, engine)
        for _ in range(workers):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, daemon=True,
                                      args=(theirs, problem, chosen, self.generation))
            process.start()
            theirs.close()
            self.idle.append((mine, process))

    def answers(self, capacity: int, effort: int, deadline: float
                ) -> Iterator[tuple[str, str, list[int] | None]]:
        """(engine, outcome, offsets) of every engine at ``effort``, in engine order; UNKNOWN
        for an engine not answering within 5 s after ``deadline`` or whose worker died."""
        self.round += 1
        todo = list(self.names)
        got: dict[str, tuple[str, list[int] | None]] = {}
        for name in self.names:
            while name not in got:
                while todo and self.idle:
                    conn, process = self.idle.pop()
                    task = (self.round, todo[0], capacity, effort, deadline)
                    conn.send((*task, self.generation.value))
                    self.busy[conn] = (process, self.round, todo.pop(0))
                if not self.busy or not self._collect(got, deadline + 5):
                    got.update({n: (UNKNOWN, None) for n in self.names if n not in got})
            yield name, *got[name]

    def _collect(self, got: dict[str, tuple[str, list[int] | None]], until: float) -> bool:
        """Wait for the busy workers' answers until ``until``; record this round's in ``got``.
        False if none came."""
        ready = wait(list(self.busy), timeout=max(until - time.monotonic(), 0))
        for conn in ready:
            process, round_, name = self.busy.pop(conn)
            try:
                _, _, outcome, found = conn.recv()
            except (EOFError, OSError):  # the worker died
                outcome, found = UNKNOWN, None
                conn.close()
                process.join()
            else:
                self.idle.append((conn, process))
            if round_ == self.round:
                got[name] = outcome, found
        return bool(ready)

    def cancel(self) -> None:
        self.generation.value += 1

    def close(self) -> None:
        """Stop and reap every worker."""
        self.cancel()
        workers = self.idle + [(conn, process) for conn, (process, _, _) in self.busy.items()]
        for conn, process in workers:
            conn.close()
            process.kill()
            process.join()


class _InProcess:
    """Engines run one after another in this process (one worker)."""

    def __init__(self, problem: UnitProblem, chosen: dict[str, Engine]) -> None:
        self.problem, self.engines = problem, chosen

    def answers(self, capacity: int, effort: int, deadline: float
                ) -> Iterator[tuple[str, str, list[int] | None]]:
        for name, engine in self.engines.items():
            yield name, *_attempt(self.problem, engine, capacity, effort, deadline,
                                  lambda: False)

    def cancel(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        """Nothing to release."""


def _decide(runner: _Pool | _InProcess, capacity: int, deadline: float
            ) -> tuple[str, str, list[int] | None]:
    """The first decisive (engine, outcome, offsets) at ``capacity`` in rounds of doubling
    effort; UNKNOWN once the deadline passes."""
    effort = 0
    while True:
        for name, outcome, found in runner.answers(capacity, effort, deadline):
            if outcome != UNKNOWN:
                runner.cancel()
                return name, outcome, found
        if time.monotonic() >= deadline:
            return "", UNKNOWN, None
        effort += 1


def default_workers() -> int:
    """The processes the portfolio uses: the CPUs this process may run on (1 where processes
    cannot be forked)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def plan_portfolio(requests: Sequence[BufferRequest], time_limit: float = 30.0, *,
                   workers: int | None = None, names: Sequence[str] | None = None,
                   progress: Callable[[Progress], None] | None = None,
                   stop_on_interrupt: bool = False) -> Plan:
    """The best plan the engines ``names`` (default: all of ``engines()``) find within
    ``time_limit`` seconds on ``workers`` processes (1: in this process); never worse than
    greedy. ``progress`` is called after every probe. With ``stop_on_interrupt``, Ctrl-C ends
    the search and the best plan so far is returned (planner name ending in ``interrupted``)."""
    start = time.monotonic()
    deadline = start + time_limit
    greedy = plan_greedy(requests)  # checks the requests
    bound = greedy.arenas[0].lower_bound
    if plan_peak(greedy) <= bound:
        return greedy
    everything = engines()
    if unknown := [n for n in names or () if n not in everything]:
        raise ValueError(f"unknown engines {unknown}; available: {sorted(everything)}")
    chosen = {n: everything[n] for n in names or everything}
    workers = min(workers or default_workers(), len(chosen))
    state = _Bisection(requests, greedy, bound, start, progress)
    runner = (_InProcess(state.problem, chosen) if workers == 1
              else _Pool(state.problem, chosen, workers))
    try:
        state.run(runner, deadline)
    except KeyboardInterrupt:
        if not stop_on_interrupt:
            raise
        state.interrupted = True
    finally:
        runner.close()
    return state.plan()


class _Bisection:
    """Capacity probes from the lower bound up to the best plan (see the module docstring)."""

    def __init__(self, requests: Sequence[BufferRequest], greedy: Plan, bound: int,
                 start: float, progress: Callable[[Progress], None] | None) -> None:
        self.requests, self.greedy, self.start, self.progress = requests, greedy, start, progress
        self.problem = UnitProblem(requests)
        self.exact = all(r.footprint % self.problem.unit == 0 for r in requests)
        self.bound, self.lo, self.hi = bound, bound, plan_peak(greedy) - 1
        self.best: list[int] | None = None
        self.engine = ""
        self.interrupted = False

    def run(self, runner: _Pool | _InProcess, deadline: float) -> None:
        target = self.lo
        while self.lo <= self.hi and time.monotonic() < deadline:
            now = time.monotonic()
            name, outcome, found = _decide(runner, target // self.problem.unit,
                                           now + (deadline - now) / 2)
            if outcome == FOUND:
                self.best = self.problem.bytes(found)
                self.hi, self.engine = arena_size(self.requests, self.best) - 1, name
            else:
                self.lo = target + 1
                if outcome == INFEASIBLE and self.exact:
                    self.bound = max(self.bound, target + 1)
            self._report(target, outcome, name)
            target = (self.lo + self.hi) // 2

    def _report(self, tried: int, outcome: str, engine: str) -> None:
        if self.progress is not None:
            self.progress(Progress(time.monotonic() - self.start, self.hi + 1, self.bound,
                                   tried, outcome, engine))

    def plan(self) -> Plan:
        """The best plan, its arena's lower bound raised to what was proven."""
        suffix = " interrupted" if self.interrupted else ""
        plan = (replace(self.greedy, planner=self.greedy.planner + suffix) if self.best is None
                else single_tier_plan(self.requests, self.best, f"portfolio:{self.engine}{suffix}"))
        arena = replace(plan.arenas[0], lower_bound=self.bound)
        return replace(plan, arenas=(arena,))
