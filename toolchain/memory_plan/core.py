"""Shared building blocks of the planners: the error type, request checks, the lower bound.

Sizes are always *footprints* (``size`` rounded up to ``alignment``): that is what a planner
reserves, what the lower bound sums and what an arena's size is measured in.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import Arena, BufferRequest, Placement, Plan

DEFAULT_TIER = "default"


class PlanError(ValueError):
    """A plan is invalid or cannot be made; tier failures carry the peak live set.

    ``peak_step`` is the step where the live bytes peak and ``live_ids`` the ids live there
    (both ``None`` when not relevant), so a caller can name the op at that step.
    """

    def __init__(
        self, message: str, *, peak_step: int | None = None, live_ids: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.peak_step = peak_step
        self.live_ids = live_ids


def conflict(a: BufferRequest, b: BufferRequest) -> bool:
    """True if the half-open lifetimes of ``a`` and ``b`` share a step."""
    return a.start < b.end and b.start < a.end


def check_requests(requests: Sequence[BufferRequest]) -> None:
    """Raise PlanError on duplicate ids, negative sizes, bad alignments or reversed lifetimes."""
    seen: set[str] = set()
    for r in requests:
        if r.id in seen:
            raise PlanError(f"duplicate buffer id {r.id!r}")
        seen.add(r.id)
        if r.size < 0 or r.alignment < 1 or r.end < r.start:
            raise PlanError(
                f"invalid request {r.id!r}: size {r.size}, alignment {r.alignment}, "
                f"steps [{r.start}, {r.end})"
            )


def _live_profile(requests: Sequence[BufferRequest]) -> tuple[int, int | None]:
    """(peak live footprint, first step where it is reached) by a sweep over start/end events."""
    live = [r for r in requests if r.start < r.end]
    events = sorted(
        [(r.end, -r.footprint) for r in live] + [(r.start, r.footprint) for r in live]
    )  # at equal steps, frees (negative) sort before allocations: lifetimes are half-open
    live = peak = 0
    peak_step = None
    for step, delta in events:
        live += delta
        if live > peak:
            peak, peak_step = live, step
    return peak, peak_step


def lower_bound(requests: Sequence[BufferRequest]) -> int:
    """Max over steps of the summed footprints of the live requests: no plan can be smaller."""
    return _live_profile(requests)[0]


def peak_live_set(
    requests: Sequence[BufferRequest],
) -> tuple[int, int | None, tuple[str, ...]]:
    """The lower bound, the first step where the live footprint reaches it, and the ids live
    at that step (``None`` and ``()`` when nothing is live)."""
    peak, step = _live_profile(requests)
    if step is None:
        return peak, None, ()
    return peak, step, tuple(r.id for r in requests if r.start <= step < r.end)


def arena_size(requests: Sequence[BufferRequest], offsets: Sequence[int]) -> int:
    """max(offset + footprint) over the requests, 0 when there are none."""
    return max((o + r.footprint for r, o in zip(requests, offsets, strict=True)), default=0)


def single_tier_plan(
    requests: Sequence[BufferRequest], offsets: Sequence[int], planner: str
) -> Plan:
    """Wrap per-request offsets into a Plan with one arena in the default tier."""
    placements = tuple(
        Placement(r.id, o, DEFAULT_TIER) for r, o in zip(requests, offsets, strict=True)
    )
    arena = Arena(DEFAULT_TIER, arena_size(requests, offsets), lower_bound(requests))
    return Plan(placements, (arena,), planner)


def plan_peak(plan: Plan) -> int:
    """The largest arena of a plan (the single arena for single-tier plans)."""
    return max((a.size for a in plan.arenas), default=0)
