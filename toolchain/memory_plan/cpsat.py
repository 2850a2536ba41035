"""CP-SAT decision engines (optional: ``pip install 'nee[plan]'``, OR-Tools).

At a fixed capacity every live buffer gets an offset variable in [0, capacity - size]; its
offset interval and its fixed lifetime interval go into one ``AddNoOverlap2D``, each maximal
cross-section adds a redundant 1-D ``AddNoOverlap`` over its members' offset intervals, and
buffers of identical size and lifetime are ordered. The search is fixed, not CP-SAT's default
portfolio: one worker takes the unplaced buffer with the lowest possible offset (ties by a
static order) and tries that offset first, which is the canonical lowest-offset search of the
exact search engine with CP-SAT's propagation behind it. It stops at the first plan.

Effort is CP-SAT's deterministic time (``EFFORT_SECONDS * 2 ** effort``), so a result does not
depend on the machine's load; the deadline still bounds it in wall-clock time.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from ortools.sat.python import cp_model

from .search import OutOfEffort, UnitProblem

EFFORT_SECONDS = 0.005  # deterministic seconds at effort 0 (0.1-0.3 s of wall time here)
_POLL = 0.02  # seconds between checks of the stop signal

# Static orders (ties of CHOOSE_LOWEST_MIN): by start step, by end step from the last (time
# reversed), by size, by area. Measured at the lower bound of 12 zero-waste instances of 100-300
# buffers and A/C.1048576 (effort <= 4): "start" solved 10 of 14 (the only order on A), "end" 13
# (of these four the only one on two), "size" and "area" 10 each. Orders by lifetime (9), by
# start then smallest (11) and by end then smallest (10) solved nothing the four did not.
ORDERS: dict[str, Callable[[int, int, int], tuple[int, ...]]] = {
    "start": lambda size, start, end: (start, -size),
    "end": lambda size, start, end: (-end, -size),
    "size": lambda size, start, end: (-size, start),
    "area": lambda size, start, end: ((start - end) * size, start),
}


def _model(problem: UnitProblem, capacity: int, order: str
           ) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    """The decision model at ``capacity`` units with its fixed search strategy."""
    model = cp_model.CpModel()
    sizes, starts, ends = problem.sizes, problem.starts, problem.ends
    offsets = [model.new_int_var(0, capacity - s, f"x{i}") for i, s in enumerate(sizes)]
    spans = [model.new_fixed_size_interval_var(x, s, "") for x, s in zip(offsets, sizes,
                                                                         strict=True)]
    lives = [model.new_fixed_size_interval_var(a, b - a, "") for a, b in zip(starts, ends,
                                                                            strict=True)]
    model.add_no_overlap_2d(spans, lives)
    for section in problem.solver.sections:
        if len(section) > 1:
            model.add_no_overlap([spans[i] for i in section])
    twins: dict[tuple[int, int, int], list[int]] = {}
    for i, key in enumerate(zip(sizes, starts, ends, strict=True)):
        twins.setdefault(key, []).append(i)
    for same in twins.values():
        for a, b in itertools.pairwise(same):
            model.add(offsets[a] < offsets[b])
    key = ORDERS[order]
    ranked = sorted(range(len(sizes)), key=lambda i: (*key(sizes[i], starts[i], ends[i]), i))
    model.add_decision_strategy([offsets[i] for i in ranked], cp_model.CHOOSE_LOWEST_MIN,
                                cp_model.SELECT_MIN_VALUE)
    return model, offsets


def decide(problem: UnitProblem, capacity: int, effort: int, deadline: float,
           stop: Callable[[], bool], order: str) -> list[int] | None:
    """Unit offsets fitting ``capacity``, None if CP-SAT proved none exist; raises OutOfEffort
    when its effort or the deadline runs out or ``stop()`` turns true."""
    if max(problem.solver.totals, default=0) > capacity:
        return None
    model, offsets = _model(problem, capacity, order)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.search_branching = cp_model.FIXED_SEARCH
    params.num_workers = 1
    params.catch_sigint_signal = False  # Ctrl-C is the caller's (the portfolio's workers ignore it)
    params.max_deterministic_time = EFFORT_SECONDS * 2 ** effort
    params.max_time_in_seconds = max(deadline - time.monotonic(), 0.001)
    status = _solve(solver, model, stop)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return [solver.value(x) for x in offsets]
    if status == cp_model.INFEASIBLE:
        return None
    raise OutOfEffort


def _solve(solver: cp_model.CpSolver, model: cp_model.CpModel,
           stop: Callable[[], bool]) -> cp_model.CpSolverStatus:
    """``solver.solve(model)``, stopped early from a watcher thread once ``stop()`` is true."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_POLL):
            if stop():
                solver.stop_search()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return solver.solve(model)
    finally:
        done.set()
        watcher.join()
