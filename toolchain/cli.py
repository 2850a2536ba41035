"""``nee-export`` and ``nee-inspect``: the toolchain's command line."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from runtime_py.cli import version_option
from runtime_py.errors import NeeError
from runtime_py.loader import load_bundle
from toolchain.boards import available_boards, load_board
from toolchain.errors import ExportError, OverBudgetError, UnsupportedModelError
from toolchain.inspect import describe, plan_requests
from toolchain.modules import load_file
from toolchain.quantize.options import OBSERVERS, ROUNDINGS, Int8Options, split_samples
from toolchain.quantize.samples import read_samples
from toolchain.report import Gate, bundle_report, checked, write_report

BYTE_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 1000,
              "MB": 1000 ** 2, "GB": 1000 ** 3}


class ByteSize(click.ParamType):
    """A byte count: an integer, optionally with a unit (512KiB, 8MiB, 2GiB, 100kB, 4MB)."""

    name = "bytes"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(value))
        unit = match and match.group(2).upper()
        if not match or unit not in BYTE_UNITS:
            self.fail(f"{value!r} is not a byte count like 4096, 512KiB or 8MiB", param, ctx)
        return int(match.group(1)) * BYTE_UNITS[unit]


@click.command()
@version_option
@click.argument("target")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Where to write the .nee bundle (the .tflite model with --format tflite).")
@click.option("--example-input", "-e", "example_inputs", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="An example input .npy (repeat per input). Default: the module's "
                   "example_inputs().")
@click.option("--board", help=f"A shipped board recipe ({', '.join(available_boards())}) or the "
                              "path to a recipe .toml of your own.")
@click.option("--planner", default="auto", show_default=True,
              type=click.Choice(["auto", "greedy", "search", "naive"]))
@click.option("--time-limit", default=2.0, show_default=True,
              help="Seconds the search planner may spend improving on greedy.")
@click.option("--name", help="Model name stored in the bundle (default: the module's name).")
@click.option("--quantize", type=click.Choice(["int8"]),
              help="Quantize after calibrating on the module's calibration_inputs() or "
                   "--calibration (every fourth sample is held out for the accuracy report).")
@click.option("--calibration", type=click.Path(exists=True, file_okay=False),
              help="Folder of calibration samples: one .npz (arrays named after the inputs) or "
                   ".npy (one input) per sample.")
@click.option("--observer", type=click.Choice(OBSERVERS), default="minmax", show_default=True,
              help="Activation range observer for --quantize.")
@click.option("--rounding", type=click.Choice(list(ROUNDINGS)), default=None,
              help="int8 requantization: double (TFLite Micro, Vela), single (TOSA), xnnpack "
                   "(LiteRT's XNNPACK path) or litert (LiteRT's reference kernels). Default: "
                   "xnnpack for a board whose CPU delegate is XNNPACK, else double.")
@click.option("--format", "fmt", type=click.Choice(["nee", "tflite"]), default="nee",
              show_default=True, help="nee: a bundle for nee-run; tflite: the same float or int8 "
                                      "program as a .tflite model (LiteRT, TFLite Micro, Vela), "
                                      "inputs and outputs in NEE's layout.")
@click.option("--npu/--no-npu", default=True, show_default=True,
              help="Compile the calls the board's NPU takes into delegated partitions (with "
                   "Vela: pip install 'nee[npu]'). Off with --format tflite.")
@click.option("--cpu-delegate/--no-cpu-delegate", default=True, show_default=True,
              help="Move the calls the board's CPU delegate (a recipe's cpu_delegate, e.g. "
                   "xnnpack) can run into partitions. Off with --format tflite.")
@click.option("--cpu-fallback/--no-cpu-fallback", default=True, show_default=True,
              help="Let a runtime without a partition's backend run it on the numpy kernels.")
@click.option("--bundle-io", is_flag=True,
              help="Store the example inputs and the model's outputs in the bundle, for "
                   "nee-run --verify on the device.")
@click.option("--dynamic", help="A bounded dynamic dim INPUT:AXIS=MIN..MAX (INPUT an input name "
                                 "or index; several places of one dim: a:1,b:0=1..256). "
                                 "Default: the module's dynamic_shapes() (torch.export Dims).")
@click.option("--buckets", help="Bucket sizes of the dynamic dim, DIM=32,64,128 (DIM its name "
                                "or omitted). Default: powers of two up to the dim's max.")
@click.option("--symbolic", is_flag=True,
              help="One program for every size of the dynamic dim (planned at its max, shapes "
                   "following the size) instead of buckets.")
@click.option("--report", type=click.Path(dir_okay=False),
              help="Write a JSON report (arenas vs capacity and lower bound, bundle and weight "
                   "bytes, kernels, partitions, int8 SQNR, export time, gates), also on failure.")
@click.option("--max-arena", type=ByteSize(), help="Gate: total arena bytes (e.g. 512KiB).")
@click.option("--max-weights", type=ByteSize(), help="Gate: bytes of weights and payloads.")
@click.option("--max-bundle", type=ByteSize(), help="Gate: bytes of the bundle file.")
@click.option("--min-sqnr", type=float, help="Gate: dB, every output's int8 SQNR (--quantize).")
def export_main(target: str, output: str, example_inputs: tuple[str, ...], board: str | None,
                planner: str, time_limit: float, name: str | None, quantize: str | None,
                calibration: str | None, observer: str, rounding: str | None, fmt: str, npu: bool,
                cpu_delegate: bool, cpu_fallback: bool, bundle_io: bool, dynamic: str | None,
                buckets: str | None, symbolic: bool, report: str | None,
                **limits: float | None) -> None:
    """Export TARGET (``path/to/file.py:Model`` or ``package.module:factory``) to a bundle or
    a .tflite model.

    Exit status: 0 exported (and every gate passed); 1 a bad option value, input file or
    other error; 2 usage; 3 the model uses what NEE cannot export; 4 over budget (the board's
    memory, flash or NPU SRAM, or a gate: the bundle is still written)."""
    require_extra("torch", "nee-export")
    gates = [Gate(GATE_OPTIONS[key], limit) for key, limit in limits.items() if limit is not None]
    if fmt != "nee" and (report or gates or bundle_io):
        raise click.UsageError("--report, --bundle-io and the gates need --format nee")
    if limits["min_sqnr"] is not None and not quantize:
        raise click.UsageError("--min-sqnr gates an int8 export: add --quantize int8")
    if (dynamic or buckets or symbolic) and (fmt != "nee" or quantize):
        raise click.UsageError("--dynamic, --buckets and --symbolic need --format nee and a "
                               "float model")
    if buckets and symbolic:
        raise click.UsageError("--buckets and --symbolic exclude each other")
    start = time.perf_counter()
    try:
        result, size = _export(target, output, example_inputs, board, planner, time_limit, name,
                               quantize, calibration, observer, rounding, fmt, npu,
                               cpu_fallback, bundle_io, dynamic, buckets, symbolic, cpu_delegate)
    except NeeError as e:
        code = _exit_status(e)
        if report:
            write_report(report, STATUS[code], code, time.perf_counter() - start, error=str(e))
        raise ExportFailed(str(e), code) from e
    detail = ("TFLite flatbuffer" if fmt == "tflite" else
              f"{len(result.graph.nodes)} ops, {len(result.kernels)} kernels" + (
                  f", {1 + len(result.methods)} methods" if result.methods else ""))
    click.echo(f"wrote {output} ({size} bytes, {detail})")
    if fmt == "nee" and (report or gates):
        _gate(output, report, gates, time.perf_counter() - start)


def _export(target: str, output: str, example_inputs: tuple[str, ...], board: str | None,
            planner: str, time_limit: float, name: str | None, quantize: str | None,
            calibration: str | None, observer: str, rounding: str | None, fmt: str, npu: bool,
            cpu_fallback: bool, bundle_io: bool, dynamic: str | None = None,
            buckets: str | None = None, symbolic: bool = False,
            cpu_delegate: bool = True) -> tuple[Any, int]:
    """Export and write; the result and the bytes written."""
    from toolchain.export import export
    from toolchain.serialize.bundle import write_bundle
    from toolchain.serialize.tflite_program import write_tflite

    module, factory = _load_target(target)
    model = factory()
    inputs = _example_inputs(module, example_inputs, target)
    ref = target.rpartition(":")[0]
    default_name = Path(ref).stem if ref.endswith(".py") else ref.rpartition(".")[2]
    int8 = (_int8_options(module, model, calibration, observer, rounding, target)
            if quantize else None)
    options = dict(name=name or default_name, board=load_board(board) if board else None,
                   planner=planner, time_limit=time_limit,
                   progress=lambda m: click.echo(m, err=True), quantize=int8,
                   npu=npu and fmt == "nee", cpu_delegate=cpu_delegate and fmt == "nee",
                   cpu_fallback=cpu_fallback, bundle_io=bundle_io)
    dim = _dynamic_dim(module, model, dynamic, fmt == "nee" and not quantize)
    if dim is None:
        if buckets or symbolic:
            raise ExportError("--buckets" if buckets else "--symbolic", "a dynamic dim", "none",
                              "add --dynamic INPUT:AXIS=MIN..MAX or a dynamic_shapes() to the "
                              "module")
        result = export(model, inputs, **options)
    elif symbolic:
        from toolchain.export.symbolic import export_symbolic, sample_sizes

        click.echo(f"dim {dim.name} in [{dim.min}, {dim.max}]: one symbolic program, fitted at "
                   f"sizes {sample_sizes(dim)}", err=True)
        result = export_symbolic(export, model, inputs, dim, **options)
    else:
        from toolchain.export.buckets import export_buckets

        sizes = _bucket_sizes(buckets, dim)
        click.echo(f"dim {dim.name} in [{dim.min}, {dim.max}]: buckets {sizes}", err=True)
        result = export_buckets(export, model, inputs, dim, sizes, **options)
    return result, (write_tflite if fmt == "tflite" else write_bundle)(result, output)


def _dynamic_dim(module: Any, model: Any, text: str | None, allowed: bool) -> Any:
    """The dynamic dim from --dynamic or the module's dynamic_shapes(); None: static."""
    from toolchain.export.buckets import module_dim, parse_dynamic

    if text:
        return parse_dynamic(text, list(inspect.signature(model.forward).parameters))
    hook = getattr(module, "dynamic_shapes", None)
    return module_dim(model, hook()) if hook is not None and allowed else None


def _bucket_sizes(text: str | None, dim: Any) -> list[int]:
    from toolchain.export.buckets import default_buckets

    if not text:
        return default_buckets(dim)
    name, _, sizes = text.rpartition("=")
    try:
        values = [int(s) for s in sizes.split(",")]
    except ValueError:
        values = []
    if not values or name not in ("", dim.name):
        raise ExportError(f"--buckets {text}", f"{dim.name}=SIZE,SIZE,... (sizes in "
                          f"[{dim.min}, {dim.max}])", text, f"e.g. {dim.name}=32,64,{dim.max}")
    return values


def _gate(output: str, report: str | None, gates: list[Gate], seconds: float) -> None:
    """Hold the written bundle against the gates; write the report; exit 4 if a gate failed."""
    body = bundle_report(load_bundle(output, check_kernels=False), output)
    results = checked(body, gates)
    failed = [g for g in results if not g.passed]
    code = EXIT_OVER_BUDGET if failed else 0
    if report:
        write_report(report, STATUS[code], code, seconds, body, results)
        click.echo(f"wrote {report}")
    for g in results:
        relation = ">=" if g.name.startswith("min_") else "<="
        click.echo(f"gate {g.name}: {_number(g.value)} {relation} {_number(g.limit)}: "
                   f"{'ok' if g.passed else 'FAILED'}")
    if failed:
        raise ExportFailed(f"{len(failed)} gate(s) failed: " + ", ".join(
            f"{g.name} {_number(g.value)} (limit {_number(g.limit)})" for g in failed),
            EXIT_OVER_BUDGET)


def _number(x: float | None) -> str:
    return "none" if x is None else str(int(x)) if float(x).is_integer() else f"{x:.2f}"


EXIT_ERROR, EXIT_UNSUPPORTED, EXIT_OVER_BUDGET = 1, 3, 4
STATUS = {0: "ok", EXIT_ERROR: "error", EXIT_UNSUPPORTED: "unsupported model",
          EXIT_OVER_BUDGET: "over budget"}
GATE_OPTIONS = {"max_arena": "max_arena_bytes", "max_weights": "max_weight_bytes",
                "max_bundle": "max_bundle_bytes", "min_sqnr": "min_sqnr_db"}


def _exit_status(error: NeeError) -> int:
    if isinstance(error, UnsupportedModelError):
        return EXIT_UNSUPPORTED
    return EXIT_OVER_BUDGET if isinstance(error, OverBudgetError) else EXIT_ERROR


class ExportFailed(click.ClickException):
    """A failed export: the error line, with the exit status of its kind."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def require_extra(module: str, command: str) -> None:
    """Fail with the extra to install when ``module`` (from ``nee[toolchain]``) is missing."""
    if importlib.util.find_spec(module) is None:
        raise click.ClickException(str(ExportError(
            command, f"the {module} package (from the toolchain extra)",
            "a runtime-only install of NEE", "pip install 'nee[toolchain]'")))


def _load_target(target: str) -> tuple[Any, Any]:
    module_ref, sep, attr = target.rpartition(":")
    if not sep or not attr:
        raise ExportError(f"target {target!r}", "MODULE_OR_FILE:ATTR", "no ':ATTR'",
                          "e.g. examples/mlp.py:Model")
    try:
        if module_ref.endswith(".py"):
            module = load_file(module_ref)
        else:
            module = importlib.import_module(module_ref)
    except (ImportError, FileNotFoundError) as e:
        raise ExportError(f"target {target!r}", "an importable module or .py file",
                          f"{type(e).__name__}: {e}", "check the path") from e
    if not hasattr(module, attr):
        public = [n for n in dir(module) if not n.startswith("_")]
        raise ExportError(f"target {target!r}", f"an attribute {attr!r} in {module_ref}",
                          f"only {public}", "name the model class or factory function")
    return module, getattr(module, attr)


def _example_inputs(module: Any, paths: tuple[str, ...], target: str) -> tuple[Any, ...]:
    import torch

    if paths:
        return tuple(torch.from_numpy(np.load(p)) for p in paths)
    if not hasattr(module, "example_inputs"):
        raise ExportError(f"target {target!r}", "example inputs",
                          "no example_inputs() in the module and no --example-input",
                          "add def example_inputs() -> tuple[Tensor, ...] or pass .npy files")
    return tuple(module.example_inputs())


def _int8_options(module: Any, model: Any, folder: str | None, observer: str,
                  rounding: str | None, target: str) -> Int8Options:
    """Calibration samples from --calibration or the module's calibration_inputs()."""
    import torch

    if folder:
        names = list(inspect.signature(model.forward).parameters)
        samples = [tuple(torch.from_numpy(a) for a in s) for s in read_samples(folder, names)]
    elif hasattr(module, "calibration_inputs"):
        samples = [tuple(s) for s in module.calibration_inputs()]
    else:
        raise ExportError(f"--quantize int8 of {target!r}", "calibration data",
                          "no calibration_inputs() in the module and no --calibration",
                          "add def calibration_inputs() -> Iterable[tuple[Tensor, ...]] or "
                          "pass a folder of .npz samples")
    calibrate, held_out = split_samples(samples)
    return Int8Options(calibrate, held_out, observer, rounding)


@click.command()
@version_option
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--plan-png", type=click.Path(dir_okay=False),
              help="Draw the memory plan (time x address) to this PNG.")
@click.option("--buffers", is_flag=True, help="List every planned buffer.")
def inspect_main(bundle: str, plan_png: str | None, buffers: bool) -> None:
    """Print BUNDLE's program, memory plan (arena vs lower bound) and kernel list."""
    try:
        loaded = load_bundle(bundle, check_kernels=False)
    except NeeError as e:
        raise click.ClickException(str(e)) from e
    click.echo(describe(loaded, buffers=buffers))
    if plan_png:
        require_extra("matplotlib", "nee-inspect --plan-png")
        from toolchain.memory_plan.draw import draw_plan

        draw_plan(*plan_requests(loaded), plan_png)
        click.echo(f"wrote {plan_png}")


@click.command()
@version_option
@click.argument("board", required=False)
def boards_main(board: str | None) -> None:
    """List the shipped board recipes, one line each, or show BOARD (a shipped recipe's name or
    the path to a recipe .toml) in full."""
    from toolchain.boards import board_table, describe_board, recipe_source

    try:
        if board is None:
            click.echo(board_table([load_board(name) for name in available_boards()]))
        else:
            click.echo(describe_board(load_board(board), recipe_source(board)))
    except NeeError as e:
        raise click.ClickException(str(e)) from e


@click.command()
@version_option
@click.argument("bundles", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--board", required=True, help="The board the runtime is for (a shipped recipe's "
                                             "name or a recipe .toml).")
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False),
              help="Folder for the wheel, the bundles and the kernel lists.")
def build_main(bundles: tuple[str, ...], board: str, output: str) -> None:
    """Build BOARD's runtime for BUNDLES: a wheel of the runtime with only the kernels (op,
    dtype) the bundles need and the board's delegate backends, the bundles, and the kernel list
    for ExecuTorch (selected_operators.yaml) and TFLite Micro (micro_op_resolver.h)."""
    from toolchain.build import build

    try:
        summary = build(load_board(board), [Path(b) for b in bundles], Path(output))
    except NeeError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"kernels kept ({len(summary.kernels_kept)}): {', '.join(summary.kernels_kept)}")
    click.echo(f"kernels dropped: {summary.kernels_dropped}; kernel modules dropped: "
               f"{', '.join(summary.modules_dropped) or 'none'}; backends: "
               f"{', '.join(summary.backends)}")
    click.echo(f"wrote {Path(output) / summary.wheel} ({summary.wheel_bytes} bytes; the full "
               f"runtime's wheel: {summary.full_wheel_bytes} bytes, "
               f"{summary.wheel_bytes / summary.full_wheel_bytes:.0%})")
    click.echo(f"wrote {output}/bundles, selected_operators.yaml, micro_op_resolver.h, "
               "build.json")
