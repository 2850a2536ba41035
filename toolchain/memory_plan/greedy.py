"""The reference planners: naive (no reuse) and greedy-by-size best-fit."""

from __future__ import annotations

from collections.abc import Sequence

from runtime_py.format import align

from .core import check_requests, conflict, single_tier_plan
from .types import BufferRequest, Plan


def plan_naive(requests: Sequence[BufferRequest]) -> Plan:
    """Every buffer gets its own bytes, back to back in request order (no reuse)."""
    check_requests(requests)
    offsets, cursor = [], 0
    for r in requests:
        offset = align(cursor, r.alignment)
        offsets.append(offset)
        cursor = offset + r.footprint
    return single_tier_plan(requests, offsets, "naive")


def _best_fit(busy: list[tuple[int, int]], size: int, alignment: int) -> int:
    """Lowest aligned offset in the smallest gap between ``busy`` ranges that holds ``size``."""
    best, best_gap, top = None, 0, 0
    for lo, hi in sorted(busy):
        offset = align(top, alignment)
        if offset + size <= lo and (best is None or lo - top < best_gap):
            best, best_gap = offset, lo - top
        top = max(top, hi)
    return align(top, alignment) if best is None else best


def greedy_offsets(requests: Sequence[BufferRequest]) -> list[int]:
    """Offsets by greedy-by-size best-fit: largest footprint first (then longest lifetime),
    each into the smallest gap left by the time-overlapping buffers placed before it.

    Never above naive when all requests share one alignment; with mixed alignments the
    padding depends on the order and either can win.
    """
    order = sorted(
        range(len(requests)),
        key=lambda i: (-requests[i].footprint, requests[i].start - requests[i].end, i),
    )
    offsets = [0] * len(requests)
    placed: list[int] = []
    for i in order:
        r = requests[i]
        busy = [
            (offsets[j], offsets[j] + requests[j].footprint)
            for j in placed
            if conflict(r, requests[j])
        ]
        offsets[i] = _best_fit(busy, r.footprint, r.alignment)
        placed.append(i)
    return offsets


def plan_greedy(requests: Sequence[BufferRequest]) -> Plan:
    """Greedy-by-size best-fit plan (see ``greedy_offsets``)."""
    check_requests(requests)
    return single_tier_plan(requests, greedy_offsets(requests), "greedy-by-size")
