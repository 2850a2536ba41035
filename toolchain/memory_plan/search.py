"""Search planner: a MiniMalloc-style exact search (Moffitt, ASPLOS'23) for a target capacity.

For a capacity ``C`` the decision search places buffers in *canonical* order, by non-decreasing
offset (ties by a static preorder rank), each at the lowest offset above every time-overlapping
buffer placed before it. Any plan can be pushed down into such a form, so the search is complete.
It prunes with:

* section inference: per cross-section (maximal set of simultaneously live buffers), the floor
  (raised to the current offset, offsets being monotone, and to the lowest offset any unplaced
  member can take) plus the unplaced bytes must fit under ``C``;
* dominance: a buffer may not go at or above the top of the lowest unplaced buffer's slot, as
  that buffer could then drop into the gap below (an equivalent plan is explored elsewhere);
* dynamic decomposition: once no unplaced buffer crosses between two sections, both sides are
  solved independently (no backtracking across them).

``plan_search`` starts from the greedy plan, targets the lower bound first (finished if it is
reached) and otherwise binary-searches the capacity between the lower bound and the best plan,
within a wall-clock budget; it never returns a plan worse than greedy.
"""

from __future__ import annotations

import math
import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise

from .core import arena_size, plan_peak, single_tier_plan
from .greedy import plan_greedy
from .types import BufferRequest, Plan

# Static preorders tried round-robin (MiniMalloc's defaults): W = lifetime width, A = area
# (footprint x width), T = largest section total the buffer takes part in; all descending.
HEURISTICS = ("WAT", "TAW", "TWA")


class OutOfEffort(Exception):
    """A decision search hit its node limit, its deadline or its stop signal."""


def _never() -> bool:
    return False


def _sections(starts: list[int], ends: list[int]) -> tuple[list[list[int]], list[int], list[int]]:
    """Maximal cross-sections in time order, and each buffer's half-open range of them."""
    events = sorted(
        [(e, 0, i) for i, e in enumerate(ends)] + [(s, 1, i) for i, s in enumerate(starts)]
    )
    live: set[int] = set()
    sections: list[list[int]] = []
    rising = False
    for _, is_start, i in events:
        if is_start:
            live.add(i)
            rising = True
            continue
        if rising:
            sections.append(sorted(live))
            rising = False
        live.discard(i)
    sec_lo, sec_hi = [len(sections)] * len(starts), [0] * len(starts)
    for k, members in enumerate(sections):
        for i in members:
            sec_lo[i] = min(sec_lo[i], k)
            sec_hi[i] = k + 1
    return sections, sec_lo, sec_hi


class _Solver:
    """Decision-search state for one instance of buffers 0..n-1 with positive sizes.

    Sizes are in units of a common alignment, so every offset the search makes is aligned.
    """

    def __init__(self, sizes: list[int], starts: list[int], ends: list[int]) -> None:
        n = len(sizes)
        self.size = sizes
        self.sections, self.sec_lo, self.sec_hi = _sections(starts, ends)
        self.totals = [sum(sizes[i] for i in sec) for sec in self.sections]
        self._index_overlaps(n)
        self._index_ranks(n, [e - s for s, e in zip(starts, ends, strict=True)])
        self.solution = [0] * n

    def _index_overlaps(self, n: int) -> None:
        """Overlap lists and bitsets: buffers overlap iff they share a cross-section."""
        near = [set() for _ in range(n)]
        for sec in self.sections:
            for i in sec:
                near[i].update(sec)
        self.overlaps = [sorted(m - {i}) for i, m in enumerate(near)]
        bit = [1 << i for i in range(n)]
        self.bit = bit
        self.member = [sum(bit[i] for i in sec) for sec in self.sections]
        everyone = (1 << n) - 1
        self.free = [everyone & ~sum(bit[j] for j in m) for m in near]  # not overlapping i
        self.near_lo = [min(self.sec_lo[j] for j in m) for m in near]
        self.near_hi = [max(self.sec_hi[j] for j in m) for m in near]

    def _index_ranks(self, n: int, width: list[int]) -> None:
        """Static preorder rank of every buffer under each heuristic of HEURISTICS."""
        keys = {
            "W": width,
            "A": [w * z for w, z in zip(width, self.size, strict=True)],
            "T": [max(self.totals[self.sec_lo[i] : self.sec_hi[i]]) for i in range(n)],
        }
        self.ranks = {}
        for h in HEURISTICS:
            order = sorted(range(n), key=lambda i, h=h: (*(-keys[c][i] for c in h), i))
            rank = [0] * n
            for r, i in enumerate(order):
                rank[i] = r
            self.ranks[h] = rank

    def solve(self, capacity: int, deadline: float) -> list[int] | None:
        """Offsets fitting ``capacity``; None if proven infeasible; raises OutOfEffort at deadline.

        The preorders are tried round-robin under a node limit that doubles every round.
        """
        limit = len(self.size)
        while True:
            limit *= 2
            for h in HEURISTICS:
                try:
                    return self.decide(capacity, h, limit, deadline)
                except OutOfEffort:
                    if time.monotonic() > deadline:
                        raise

    def decide(self, capacity: int, heuristic: str, node_limit: int, deadline: float,
               stop: Callable[[], bool] = _never) -> list[int] | None:
        """One complete depth-first search in one preorder: offsets fitting ``capacity``, or
        None if none exist; raises OutOfEffort past ``node_limit`` nodes, the deadline or when
        ``stop()`` (polled with the clock) turns true."""
        self.capacity, self.deadline, self.stop = capacity, deadline, stop
        if max(self.totals, default=0) > capacity:
            return None
        return list(self.solution) if self._run(heuristic, node_limit) else None

    def _run(self, heuristic: str, node_limit: int) -> bool:
        """One complete depth-first search from scratch (raises OutOfEffort past the node limit)."""
        n, n_sec = len(self.size), len(self.sections)
        self.rank = self.ranks[heuristic]
        self.nodes_left = node_limit
        self.off = [-1] * n
        self.min_off = [0] * n
        self.total = list(self.totals)
        self.cuts = [0] * n_sec  # buffers still to place that span sections k and k + 1
        for i in range(n):
            for k in range(self.sec_lo[i], self.sec_hi[i] - 1):
                self.cuts[k] += 1
        cutpoints = [k + 1 for k, c in enumerate(self.cuts[:-1]) if c == 0]
        return self._split(0, n_sec, list(range(n)), cutpoints)

    def _split(self, lo: int, hi: int, todo: list[int], cutpoints: list[int]) -> bool:
        """Solve the section ranges between cut points one after another, independently."""
        bounds = [lo, *cutpoints, hi]
        off, sec_lo, sec_hi, rank = self.off, self.sec_lo, self.sec_hi, self.rank
        for a, b in pairwise(bounds):
            part = [i for i in todo if off[i] < 0 and sec_lo[i] < b and sec_hi[i] > a]
            if part and not self._search(a, b, sorted(part, key=rank.__getitem__), 0, -1):
                return False
        return True

    def _search(self, lo: int, hi: int, order: list[int], last_off: int, last_rank: int) -> bool:
        """Try each canonical next placement in sections [lo, hi), lowest offset first."""
        self.nodes_left -= 1
        if self.nodes_left < 0 or (not self.nodes_left & 127 and (
                time.monotonic() > self.deadline or self.stop())):
            raise OutOfEffort
        off, min_off, size, rank, bit = self.off, self.min_off, self.size, self.rank, self.bit
        todo = [i for i in order if off[i] < 0]
        if not todo:
            return True
        todo.sort(key=lambda i: (min_off[i], rank[i]))
        lows = [min_off[i] for i in todo]
        prefix = [0]
        for i in todo:
            prefix.append(prefix[-1] | bit[i])
        # Offsets never decrease along a branch, so each section needs its unplaced bytes of
        # room above the offset; and no buffer may start above the lowest unplaced slot's top.
        top = min([m + size[i] for m, i in zip(lows, todo, strict=True)])
        top = min(top, self.capacity - max(self.total[lo:hi]) + 1)
        for i in todo:
            o = min_off[i]
            if o >= top:
                break
            if o < last_off or (o == last_off and rank[i] < last_rank):
                continue
            moved = self._place(i, o)
            found = self._fits(lo, hi, i, o, lows, prefix) and self._descend(lo, hi, todo, i, o)
            self._unplace(i, moved)
            if found:
                return True
        return False

    def _descend(self, lo: int, hi: int, todo: list[int], i: int, o: int) -> bool:
        """Recurse after placing ``i``; split the problem where no unplaced buffer crosses."""
        self.solution[i] = o
        cuts = self.cuts
        span = range(self.sec_lo[i], self.sec_hi[i] - 1)
        cutpoints = []
        for k in span:
            cuts[k] -= 1
            if not cuts[k]:
                cutpoints.append(k + 1)
        try:
            if cutpoints:
                return self._split(lo, hi, todo, cutpoints)
            return self._search(lo, hi, todo, o, self.rank[i])
        finally:
            for k in span:
                cuts[k] += 1

    def _place(self, i: int, o: int) -> list[tuple[int, int]]:
        """Place ``i`` at ``o``: lift the min offsets of unplaced overlapping buffers above it
        and take it out of its sections' unplaced totals. Returns the (buffer, old min) log."""
        off, min_off, total = self.off, self.min_off, self.total
        off[i] = o
        s = self.size[i]
        height = o + s
        moved = []
        for j in self.overlaps[i]:
            if off[j] < 0 and min_off[j] < height:
                moved.append((j, min_off[j]))
                min_off[j] = height
        for k in range(self.sec_lo[i], self.sec_hi[i]):
            total[k] -= s
        return moved

    def _fits(self, lo: int, hi: int, i: int, o: int, lows: list[int], prefix: list[int]) -> bool:
        """Section inference around ``i``: in each section, the lowest offset an unplaced member
        can now take plus the unplaced bytes must fit the capacity. ``lows`` are the min offsets
        before placing ``i`` in ascending order, ``prefix[p]`` the bitset of the first p buffers;
        buffers overlapping ``i`` now sit above ``o + size`` and the others did not move."""
        total, cap, member, free = self.total, self.capacity, self.member, self.free[i]
        height = o + self.size[i]
        for k in range(max(lo, self.near_lo[i]), min(hi, self.near_hi[i])):
            room = cap - total[k]
            if height > room and not prefix[bisect_right(lows, room)] & member[k] & free:
                return False
        return True

    def _unplace(self, i: int, moved: list[tuple[int, int]]) -> None:
        """Undo ``_place(i, ...)`` given its log."""
        min_off, total, s = self.min_off, self.total, self.size[i]
        for k in range(self.sec_lo[i], self.sec_hi[i]):
            total[k] += s
        for j, m in moved:
            min_off[j] = m
        self.off[i] = -1


class UnitProblem:
    """The requests that need bytes, in units of the lcm of their alignments.

    Footprints are rounded up to the unit, which is exact whenever they are multiples of it
    (always so for a uniform alignment); any offset in units is then aligned for every buffer.
    ``sizes``, ``starts`` and ``ends`` describe those requests (``index``: their positions).
    """

    def __init__(self, requests: Sequence[BufferRequest]) -> None:
        self.requests = requests
        self.index = [k for k, r in enumerate(requests) if r.footprint and r.start < r.end]
        live = [requests[k] for k in self.index]
        self.unit = math.lcm(*(r.alignment for r in live)) if live else 1
        self.sizes = [-(-r.footprint // self.unit) for r in live]
        self.starts, self.ends = [r.start for r in live], [r.end for r in live]
        self.solver = _Solver(self.sizes, self.starts, self.ends)

    def bytes(self, found: Sequence[int]) -> list[int]:
        """Byte offsets of every request from the unit offsets of the live ones."""
        offsets = [0] * len(self.requests)
        for k, o in zip(self.index, found, strict=True):
            offsets[k] = o * self.unit
        return offsets

    def offsets(self, capacity: int, deadline: float) -> list[int] | None:
        """Byte offsets with every footprint under ``capacity`` bytes, None if infeasible;
        raises OutOfEffort at the deadline."""
        with deep_recursion(len(self.index)):
            found = self.solver.solve(capacity // self.unit, deadline)
        return None if found is None else self.bytes(found)


@contextmanager
def deep_recursion(buffers: int) -> Iterator[None]:
    """Room for the search's two stack frames per buffer."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * buffers + 200))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def plan_search(requests: Sequence[BufferRequest], time_limit: float = 5.0) -> Plan:
    """Best plan found within ``time_limit`` seconds; never worse than greedy.

    Probes capacities with the exact search: the lower bound first (a plan there is optimal,
    so the search stops), then a binary search between the lower bound and the best plan so
    far. Each probe gets half of the remaining time; a timed-out probe counts as infeasible.
    """
    deadline = time.monotonic() + time_limit
    greedy = plan_greedy(requests)  # checks the requests
    lo, hi = greedy.arenas[0].lower_bound, plan_peak(greedy) - 1
    if lo > hi:
        return greedy
    problem, target = UnitProblem(requests), lo
    best: list[int] | None = None  # offsets of the best plan found by the search
    while lo <= hi and time.monotonic() < deadline:
        now = time.monotonic()
        try:
            offsets = problem.offsets(target, now + (deadline - now) / 2)
        except OutOfEffort:
            offsets = None
        if offsets is None:
            lo = target + 1
        else:
            best, hi = offsets, arena_size(requests, offsets) - 1
        target = (lo + hi) // 2
    return greedy if best is None else single_tier_plan(requests, best, "search")
