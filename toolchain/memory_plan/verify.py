"""Independent plan verifier: a sweep line over time, sharing no code with the planners."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from .core import PlanError
from .types import BufferRequest, Placement, Plan


def _describe(r: BufferRequest, p: Placement) -> str:
    return f"{r.id!r} (offset {p.offset}, size {r.size}, steps [{r.start}, {r.end}))"


def _check_placements(requests: Sequence[BufferRequest], plan: Plan) -> dict[str, Placement]:
    """Exactly one placement per request, aligned and inside its tier's arena."""
    placed: dict[str, Placement] = {}
    for p in plan.placements:
        if p.id in placed:
            raise PlanError(f"buffer {p.id!r} is placed twice")
        placed[p.id] = p
    wanted = {r.id for r in requests}
    if extra := sorted(set(placed) - wanted):
        raise PlanError(f"placements for unknown buffers: {extra}")
    if missing := sorted(wanted - set(placed)):
        raise PlanError(f"buffers without a placement: {missing}")
    arenas = {a.tier: a.size for a in plan.arenas}
    for r in requests:
        p = placed[r.id]
        if p.tier not in arenas:
            raise PlanError(f"buffer {r.id!r} is placed in tier {p.tier!r}, which has no arena")
        if p.offset < 0 or p.offset + r.footprint > arenas[p.tier]:
            raise PlanError(
                f"buffer {_describe(r, p)} lies outside arena {p.tier!r} of {arenas[p.tier]} bytes"
            )
        if p.offset % r.alignment:
            raise PlanError(f"buffer {_describe(r, p)} is not aligned to {r.alignment}")
    return placed


def _check_overlaps(requests: Sequence[BufferRequest], placed: dict[str, Placement]) -> None:
    """Sweep over steps; each arriving buffer is checked against its address neighbours."""
    events = sorted(
        [(r.end, 0, k) for k, r in enumerate(requests) if r.start < r.end and r.footprint]
        + [(r.start, 1, k) for k, r in enumerate(requests) if r.start < r.end and r.footprint]
    )  # at equal steps frees (0) come before arrivals (1): lifetimes are half-open
    live: dict[str, list[tuple[int, int]]] = {}  # tier -> sorted (offset, request index)
    for _, arrives, k in events:
        p = placed[requests[k].id]
        row = live.setdefault(p.tier, [])
        if not arrives:
            row.remove((p.offset, k))
            continue
        pos = bisect_left(row, (p.offset, k))
        for _, other in row[max(pos - 1, 0) : pos + 1]:
            q, a, b = placed[requests[other].id], requests[other], requests[k]
            if q.offset < p.offset + b.footprint and p.offset < q.offset + a.footprint:
                raise PlanError(
                    f"buffers {_describe(a, q)} and {_describe(b, p)} overlap in tier {p.tier!r}"
                )
        insort(row, (p.offset, k))


def verify_plan(requests: Sequence[BufferRequest], plan: Plan) -> None:
    """Raise PlanError unless every request has exactly one aligned placement inside its
    arena and no two buffers live at the same step share bytes (footprints, i.e. sizes
    rounded up to alignment, must not overlap)."""
    _check_overlaps(requests, _check_placements(requests, plan))
