"""Static memory planning (INTERIM stub by the pipeline engineer so export imports work; the
planner engineer replaces this file with the full public API)."""

from __future__ import annotations

from collections.abc import Sequence

from .core import PlanError, lower_bound
from .greedy import plan_greedy, plan_naive
from .types import Arena, BufferRequest, Placement, Plan, Tier

__all__ = ["Arena", "BufferRequest", "Placement", "Plan", "PlanError", "Tier", "lower_bound",
           "plan_greedy", "plan_memory", "plan_naive", "plan_tiers"]


def plan_memory(requests: Sequence[BufferRequest], *, planner: str = "auto",
                time_limit: float = 2.0) -> Plan:
    """Interim: greedy for everything."""
    return plan_naive(requests) if planner == "naive" else plan_greedy(requests)


def plan_tiers(requests: Sequence[BufferRequest], tiers: Sequence[Tier], *,
               planner: str = "auto", time_limit: float = 2.0) -> Plan:
    """Interim: not implemented yet."""
    raise PlanError("tiered planning not implemented yet")
