"""What export produces before serialization: the final graph, its memory plan and kernel list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime_py.buckets import Bucket
from toolchain.ir import Graph
from toolchain.memory_plan.types import BufferRequest, Plan, Tier


@dataclass(frozen=True)
class BundledVector:
    """Example inputs and the model's outputs on them (``--bundle-io``), with the tolerance a
    run of the bundle must meet: every element within ``atol + rtol * |want|``."""

    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    rtol: float
    atol: float


@dataclass(frozen=True)
class ExportResult:
    """An exported program ready to serialize: one method, and (for the bundle's first method)
    the bundle's other ``methods``."""

    graph: Graph
    requests: list[BufferRequest]
    plan: Plan
    kernels: list[tuple[str, str]]
    model_name: str
    producer: str
    board: str = ""
    threads: int = 0  # the board recipe's threads for the runtime (0: none given)
    tiers: tuple[Tier, ...] = ()
    accuracy: tuple[Any, ...] = ()  # toolchain.quantize.accuracy.OutputAccuracy per output
    vectors: tuple[BundledVector, ...] = ()  # stored for ``nee-run --verify``
    method: str = "forward"  # this program's method name
    entry: str = ""  # the entry point a bucketed method specialises
    dim: Bucket | None = None  # its bucket (or symbolic dim)
    exprs: tuple[Any, ...] = ()  # a symbolic method's toolchain.export.symbolic.SizeExpr
    methods: tuple[ExportResult, ...] = ()  # the bundle's other methods
    buffer_index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffer_index", {r.id: i for i, r in enumerate(self.requests)})
