"""Entry points used by the export pipeline: one arena, or a board's memory tiers."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from .core import PlanError, check_requests, conflict, peak_live_set, plan_peak
from .greedy import plan_greedy, plan_naive
from .portfolio import plan_portfolio
from .search import plan_search
from .types import BufferRequest, Plan, Tier
from .verify import verify_plan

# "auto" is greedy, then the portfolio only if greedy is above the lower bound (it starts from
# the greedy plan and stops at the lower bound), keeping the better plan. "search" is the exact
# search alone, in this process.
PLANNERS: dict[str, Callable[..., Plan]] = {
    "naive": plan_naive,
    "greedy": plan_greedy,
    "search": plan_search,
    "portfolio": plan_portfolio,
    "auto": plan_portfolio,
}
_TIMED = {"search", "portfolio", "auto"}  # planners that take a time_limit


def _run(planner: str, requests: Sequence[BufferRequest], time_limit: float) -> Plan:
    if planner not in PLANNERS:
        raise PlanError(f"unknown planner {planner!r}; choose from {sorted(PLANNERS)}")
    if planner in _TIMED:
        return PLANNERS[planner](requests, max(time_limit, 0.0))
    return PLANNERS[planner](requests)


def plan_memory(
    requests: Sequence[BufferRequest], *, planner: str = "auto", time_limit: float = 2.0
) -> Plan:
    """Plan all requests into one arena of the tier "default" (tier pins are ignored).

    ``planner`` is one of PLANNERS; ``time_limit`` (seconds) bounds the search. The plan is
    verified before it is returned.
    """
    plan = _run(planner, requests, time_limit)
    verify_plan(requests, plan)
    return plan


def _pressure_ids(requests: Sequence[BufferRequest], plan: Plan, capacity: int) -> set[str]:
    """Ids live at a step where some buffer reaches above ``capacity`` in ``plan``."""
    placed = plan.by_id()
    over = [r for r in requests if placed[r.id].offset + r.footprint > capacity]
    return {r.id for r in requests if any(conflict(r, o) for o in over)}


def _evict_one(movable: list[BufferRequest], pressure: set[str]) -> BufferRequest | None:
    """The movable buffer under pressure with the largest size x lifetime (then size, id)."""
    under = [r for r in movable if r.id in pressure]
    return max(
        under, key=lambda r: (r.footprint * (r.end - r.start), r.footprint, r.id), default=None
    )


def _fill_tier(
    tier: Tier,
    pinned: list[BufferRequest],
    movable: list[BufferRequest],
    planner: str,
    deadline: float,
) -> tuple[Plan, list[BufferRequest]]:
    """Plan ``pinned + movable`` into ``tier``, evicting movable buffers until it fits.

    Returns the plan (possibly over capacity when nothing movable is left) and the evicted.
    """
    kept, evicted = list(movable), []
    while True:
        reqs = pinned + kept
        lb, _, live = peak_live_set(reqs)
        if lb > tier.capacity:  # cheap phase: no plan can fit, skip planning
            pressure, plan = set(live), None
        else:
            plan = _run(planner, reqs, deadline - time.monotonic())
            if plan_peak(plan) <= tier.capacity:
                return plan, evicted
            pressure = _pressure_ids(reqs, plan, tier.capacity)
        victim = _evict_one(kept, pressure)
        if victim is None:
            return plan or _run(planner, reqs, deadline - time.monotonic()), evicted
        kept.remove(victim)
        evicted.append(victim)


def _tier_error(
    requests: Sequence[BufferRequest], tiers: Sequence[Tier], plans: list[Plan]
) -> PlanError:
    needs = "; ".join(
        f"tier {t.name!r} needs {plan_peak(p)} bytes, {t.capacity} available"
        for t, p in zip(tiers, plans, strict=False)
    )
    lb, step, ids = peak_live_set(requests)
    return PlanError(
        f"memory plan does not fit the board: {needs}. Largest live set: "
        f"{lb} bytes at step {step}: {', '.join(ids)}",
        peak_step=step,
        live_ids=ids,
    )


def _merge(requests: Sequence[BufferRequest], tiers: Sequence[Tier], plans: list[Plan]) -> Plan:
    """One plan with each tier's placements and single arena retagged (0 bytes if empty)."""
    placed = {
        p.id: replace(p, tier=t.name)
        for t, plan in zip(tiers, plans, strict=True)
        for p in plan.placements
    }
    placements = tuple(placed[r.id] for r in requests)
    arenas = tuple(replace(p.arenas[0], tier=t.name) for t, p in zip(tiers, plans, strict=True))
    names = sorted({p.planner for p in plans if p.placements})
    return Plan(placements, arenas, "+".join(names) or "empty")


def plan_tiers(
    requests: Sequence[BufferRequest],
    tiers: Sequence[Tier],
    *,
    planner: str = "auto",
    time_limit: float = 2.0,
) -> Plan:
    """Plan into a board's tiers, fastest first, filling the fast tiers first.

    Rule: requests with ``tier`` set are pinned there. Tiers are filled in the given order;
    every unpinned request is first offered to the fastest tier. While a tier's buffers do
    not fit its capacity, one unpinned buffer moves on to the next tier: the one with the
    largest size x lifetime among those live where the tier overflows (at its peak live step
    while even the lower bound exceeds the capacity, else at the steps of the buffers the
    plan puts above the capacity); ties go to the larger size, then the larger id. The last
    tier takes everything left. ``time_limit`` (seconds) is the total budget of all planner
    runs. Raises PlanError (needed vs available per tier, the largest live set as
    ``peak_step``/``live_ids``) when a tier cannot hold what is left for it.
    """
    check_requests(requests)
    names = [t.name for t in tiers]
    if not tiers or len(set(names)) != len(names):
        raise PlanError(f"tiers need distinct names and at least one tier, got {names}")
    if unknown := sorted({r.tier for r in requests if r.tier is not None} - set(names)):
        raise PlanError(f"requests pinned to unknown tiers {unknown}; board tiers are {names}")
    deadline = time.monotonic() + time_limit
    movable = [r for r in requests if r.tier is None]
    plans: list[Plan] = []
    for k, tier in enumerate(tiers):
        pinned = [r for r in requests if r.tier == tier.name]
        if k == len(tiers) - 1:
            plan = _run(planner, pinned + movable, deadline - time.monotonic())
        else:
            plan, movable = _fill_tier(tier, pinned, movable, planner, deadline)
        plans.append(plan)
        if plan_peak(plan) > tier.capacity:
            raise _tier_error(requests, tiers, plans)
    merged = _merge(requests, tiers, plans)
    verify_plan(requests, merged)
    return merged
