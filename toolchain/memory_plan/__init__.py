"""Static memory planning: buffer requests (size, lifetime, alignment, tier) in, a verified
plan out. See ``plan_memory`` / ``plan_tiers``; ``nee-plan`` is the benchmark CLI."""

from .benchmark_io import read_benchmark_csv, write_solution_csv
from .core import PlanError, lower_bound
from .greedy import plan_greedy, plan_naive
from .plan import PLANNERS, plan_memory, plan_tiers
from .search import plan_search
from .types import Arena, BufferRequest, Placement, Plan, Tier
from .verify import verify_plan

__all__ = [
    "PLANNERS",
    "Arena",
    "BufferRequest",
    "Placement",
    "Plan",
    "PlanError",
    "Tier",
    "lower_bound",
    "plan_greedy",
    "plan_memory",
    "plan_naive",
    "plan_search",
    "plan_tiers",
    "read_benchmark_csv",
    "verify_plan",
    "write_solution_csv",
]
