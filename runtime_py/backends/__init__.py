"""Backends: who runs a delegated partition. The CPU kernels are one backend, devices others.

A backend receives each of its partitions at load as a ``Partition`` and returns the closure
that runs it (``prepare``); a run then only calls closures. The partition's inputs and outputs
are views of the planned arena, its payload views of the bundle's segments (no copies), and its
``reference()`` binds the partition's reference program on the CPU kernels (what the payload
computes, bit-exact), allocating that program's workspace once. ``BACKENDS`` is the registry a
``Program`` uses unless given its own; a bundle naming a backend missing from it loads only if
it was exported with a CPU fallback (the reference program then runs on the CPU).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from runtime_py import build_info
from runtime_py.kernels import Bound, run_all


@dataclass(frozen=True)
class Estimate:
    """The delegate compiler's estimate for one run (e.g. Vela's for an Ethos-U)."""

    cycles: int
    clock_hz: int
    macs: int
    sram_bytes: int
    flash_bytes: int
    op_cycles: tuple[tuple[str, int], ...]

    @property
    def seconds(self) -> float:
        """Estimated time of one run at the board's clock."""
        return self.cycles / self.clock_hz


@dataclass(frozen=True)
class Partition:
    """What a backend receives at load (see the module docstring)."""

    index: int
    backend: str
    target: str
    specs: dict[str, str]
    payload: dict[str, np.ndarray]  # read-only uint8 views of the bundle's segments
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    input_offsets: list[int]  # where the device reads each input inside ``scratch``
    output_offsets: list[int]  # where the device writes each output inside ``scratch``
    scratch: np.ndarray | None  # the planned device scratch (uint8), None if it needs none
    fast_scratch: np.ndarray | None  # the planned fast (SRAM) scratch, None if none
    estimate: Estimate | None
    reference: Callable[[], list[Bound]]
    threads: int = 1  # the threads the program may use (its thread policy's most)
    memory_limit: int | None = None  # bytes a backend may allocate for it (max_arena_bytes)


class Backend(Protocol):
    """Runs partitions: ``prepare`` at load, the returned closure at every run; ``label`` says
    where they run (for profiles)."""

    label: str

    def prepare(self, partition: Partition) -> Bound:
        """Everything a run needs, made once; returns the closure running the partition."""


class Cpu:
    """The CPU backend for a partition: its reference program on the numpy kernels."""

    label = "CPU fallback"

    def prepare(self, partition: Partition) -> Bound:
        """Bind the reference program."""
        return run_all(*partition.reference())


# Delegate backends by name: the module and class implementing each, and the package it needs
# (None: numpy only).
DELEGATE_BACKENDS = {"ethos-u": ("runtime_py.backends.ethos_u", "EthosU", None),
                     "xnnpack": ("runtime_py.backends.xnnpack", "Xnnpack", "ai_edge_litert")}

# Modules serving only a delegate backend's partitions, beside its own: OpenVINO, the other
# engine of the XNNPACK partitions (chosen at load, never named by a bundle), the race between
# engines at load, and the checks both engines share. A pruned runtime without that backend
# drops them too (toolchain/build.py).
COMPANIONS = {"xnnpack": ("runtime_py.backends.openvino", "runtime_py.backends.fastest",
                          "runtime_py.backends.tflite_io")}

# What can run the XNNPACK delegate's partitions (``xnnpack_engine``, ``nee-run --engine``).
XNNPACK_ENGINES = ("litert", "openvino", "fastest")


def xnnpack_engine(name: str) -> Backend:
    """The engine ``name`` of XNNPACK_ENGINES for the XNNPACK delegate's partitions: LiteRT,
    OpenVINO, or the faster of the two on each partition, raced at load. Imports only the
    modules it needs (ValueError for another name)."""
    if name not in XNNPACK_ENGINES:
        raise ValueError(f"engine {name!r}: expected one of {', '.join(XNNPACK_ENGINES)}")
    from runtime_py.backends.xnnpack import Xnnpack

    if name == "litert":
        return Xnnpack()
    from runtime_py.backends.openvino import OpenVino

    if name == "openvino":
        return OpenVino()
    from runtime_py.backends.fastest import Fastest

    return Fastest([Xnnpack(), OpenVino()])


def _shipped() -> dict[str, Backend]:
    """The CPU backend and the delegate backends this runtime ships (all, or those a board's
    pruned runtime kept: ``build_info.BACKENDS``) whose package is installed."""
    kept = DELEGATE_BACKENDS.keys() if build_info.BACKENDS is None else build_info.BACKENDS
    return {"cpu": Cpu(), **{name: getattr(importlib.import_module(module), cls)()
                             for name, (module, cls, needs) in DELEGATE_BACKENDS.items()
                             if name in kept and (needs is None
                                                  or importlib.util.find_spec(needs))}}


BACKENDS: dict[str, Backend] = _shipped()
