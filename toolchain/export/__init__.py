"""Export an nn.Module to an ExportResult: capture -> passes -> plan -> kernel list."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from toolchain import __version__
from toolchain.boards import Board
from toolchain.errors import OverBudgetError
from toolchain.export.capture import export_program, to_graph
from toolchain.export.names import output_names
from toolchain.export.result import ExportResult
from toolchain.ir import Graph
from toolchain.memory_plan import Plan, PlanError, plan_memory, plan_tiers
from toolchain.memory_plan.lifetimes import buffer_requests
from toolchain.pipeline import run_passes
from toolchain.quantize.options import Int8Options, board_rounding
from toolchain.selective_build import kernel_list

Progress = Callable[[str], None]


def export(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    name: str = "model",
    board: Board | None = None,
    planner: str = "auto",
    time_limit: float = 2.0,
    verify_each: bool = True,
    progress: Progress | None = None,
    quantize: Int8Options | None = None,
    npu: bool = True,
    cpu_fallback: bool = True,
    bundle_io: bool = False,
    run_time: frozenset[str] = frozenset(),
    cpu_delegate: bool = True,
    static_shapes: bool = True,
) -> ExportResult:
    """Export ``model`` traced with ``example_inputs`` into a plan-complete program; with
    ``quantize``, calibrated and converted to int8 first, and its accuracy measured. With a
    board that has an NPU (and ``npu``), the calls it takes are compiled into delegated
    partitions; ``cpu_fallback`` lets a runtime without that backend run them on its CPU. With a
    board that names a CPU delegate (and ``cpu_delegate``), the calls it can run go to it.
    ``bundle_io`` stores the example inputs and the model's outputs for ``nee-run --verify``;
    the calls writing the ``run_time`` values are not folded into constants, and
    ``static_shapes`` False makes no size-dependent layout choice (both for
    toolchain.export.symbolic's samples)."""
    say = _stage_timer(progress)
    traced = model
    if quantize is not None:
        from toolchain.quantize.calibrate import quantize_model

        traced = quantize_model(model, example_inputs, quantize)
        say(f"calibrated int8 on {len(quantize.calibration)} sample(s)")
    program = export_program(traced, example_inputs)
    graph = to_graph(program, output_names(model, program.call_spec.out_spec))
    graph.scratch_budget = board.scratch_limit if board else None
    graph.run_time = run_time
    graph.static_shapes = static_shapes
    graph.npu = board.npu if board and npu else None
    graph.cpu_delegate = board.cpu_delegate if board and cpu_delegate else None
    if quantize is not None:
        graph.int8_rounding = quantize.rounding or board_rounding(graph.npu, graph.cpu_delegate)
    say(f"captured {len(graph.nodes)} core ATen calls")
    graph = run_passes(graph, verify_each=verify_each)
    say(f"ran passes: {len(graph.nodes)} out-variant calls")
    for i, d in enumerate(graph.delegates):
        d.cpu_fallback = cpu_fallback
        say(f"delegate {i}: {len(d.nodes)} calls compiled for {d.target}" + (
            f", {d.estimate.cycles} cycles, {d.estimate.sram_bytes} B of SRAM (Vela)"
            if d.estimate else ""))
    _check_npu_sram(graph, board)
    requests = buffer_requests(graph)
    try:
        plan = (plan_tiers(requests, board.tiers, planner=planner, time_limit=time_limit)
                if board else plan_memory(requests, planner=planner, time_limit=time_limit))
    except PlanError as e:
        raise _plan_failure(graph, board, e) from e
    say("planned memory: " + ", ".join(
        f"{a.tier} {a.size} B (lower bound {a.lower_bound} B)" for a in plan.arenas))
    if board:
        _check_weights(graph.weight_bytes(), board, plan)
    producer = f"nee {__version__} (torch {torch.__version__})"
    result = ExportResult(graph, requests, plan, kernel_list(graph), name, producer,
                          board.name if board else "", (board.threads or 0) if board else 0,
                          board.tiers if board else ())
    if quantize is not None:
        from toolchain.quantize.accuracy import measure

        held_out = bool(quantize.evaluation)
        accuracy = measure(model, result, quantize.evaluation or [example_inputs], held_out)
        for line in accuracy:
            say(f"int8 accuracy: {line}")
        result = dataclasses.replace(result, accuracy=accuracy)
    if bundle_io:
        from toolchain.export.bundle_io import bundled_vectors

        vectors = bundled_vectors(model, result, [example_inputs])
        say(f"bundled {len(vectors)} test vector(s), atol {vectors[0].atol:.3g}")
        result = dataclasses.replace(result, vectors=vectors)
    return result


def _stage_timer(progress: Progress | None) -> Progress:
    start = time.perf_counter()

    def say(message: str) -> None:
        if progress is not None:
            progress(f"[{time.perf_counter() - start:6.2f}s] {message}")

    return say


def _check_npu_sram(graph: Graph, board: Board | None) -> None:
    """Each compiled partition's SRAM use (Vela's, which Vela itself does not hold against
    the board) within the board's fastest tier."""
    if graph.npu is None:
        return
    tier = next(t for t in board.tiers if t.name == board.npu.sram_tier)
    over = [(i, d.estimate.sram_bytes) for i, d in enumerate(graph.delegates)
            if d.estimate and d.estimate.sram_bytes > tier.capacity]
    if over:
        raise OverBudgetError(
            f"NPU partitions on board {board.name}",
            f"each within the {tier.name} tier of {tier.capacity} B ({tier.capacity / 1024:.0f} "
            "KiB)", "; ".join(f"partition {i} needs {b} B ({b / 1024:.0f} KiB) of SRAM (Vela)"
                               for i, b in over),
            "use smaller inputs, a board with more SRAM, or a memory mode that keeps feature "
            "maps in DRAM")


def _check_weights(weights: int, board: Board, plan: Plan) -> None:
    """The weights within the board's flash or, on a board without flash, within its slowest
    memory tier beside the activations planned there."""
    if board.flash is not None:
        room, where = board.flash, f"the {board.flash} B flash"
    else:
        tier = board.tiers[-1]
        used = sum(a.size for a in plan.arenas if a.tier == tier.name)
        room = tier.capacity - used
        where = (f"the {room} B of the {tier.name} tier ({tier.capacity} B) left beside "
                 f"{used} B of activations")
    if weights > room:
        raise OverBudgetError(f"weights on board {board.name}", f"at most {where}",
                              f"{weights} B ({weights / 2**20:.1f} MiB) of weights",
                              "quantize (--quantize int8), use a smaller model or a board with "
                              "more memory")


def _plan_failure(graph: Graph, board: Board | None, error: PlanError) -> OverBudgetError:
    step, where = error.peak_step, ""
    if step is not None and 0 <= step < len(graph.nodes):
        node = graph.nodes[step]
        where = f"; live set peaks at step {step} ({node.op} at {node.source or '?'})"
    return OverBudgetError(
        f"memory plan for board {board.name if board else '-'}",
        "the activations to fit the board's memory tiers",
        f"{error}{where}",
        "use a board with more memory, smaller inputs, or a smaller model",
    )
