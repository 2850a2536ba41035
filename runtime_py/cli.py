"""``nee-run``: run a .nee bundle on .npy/.npz inputs and print or save the outputs."""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np

from runtime_py import __version__
from runtime_py.backends import XNNPACK_ENGINES, Backend, xnnpack_engine
from runtime_py.errors import InputError, NeeError
from runtime_py.format import DELEGATE_CALL, SCHEMA_VERSION
from runtime_py.generate import GenerationStats, generate
from runtime_py.program import Call, Program
from runtime_py.verify import verify as verify_vectors

VERIFY_FAILED = 3  # nee-run --verify: an output beyond the bundle's stored tolerance

# --engine (XNNPACK_ENGINES) -> the packages it needs beside the default's, and their pip extras
NEEDS = {"litert": (), "openvino": ("openvino",), "fastest": ("ai_edge_litert", "openvino")}
EXTRAS = {"ai_edge_litert": "xnnpack", "openvino": "openvino"}

# --version on every NEE command: the package's and the bundle schema's versions.
version_option = click.version_option(
    __version__, prog_name="nee", message=f"%(prog)s %(version)s, bundle schema {SCHEMA_VERSION}")


def _in_existing_folder(ctx: click.Context, param: click.Parameter,
                        value: str | None) -> str | None:
    """An output path whose folder exists (checked before the run, not after it)."""
    if value is not None and not Path(value).resolve().parent.is_dir():
        raise click.BadParameter(f"{Path(value).parent} is not an existing folder")
    return value


@click.command()
@version_option
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--input", "-i", "inputs", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="An input .npy (one per program input, in order) or one .npz holding all.")
@click.option("--random", "random_inputs", is_flag=True,
              help="Use seeded random inputs of the bundle's shapes instead of files.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), callback=_in_existing_folder,
              help="Save the outputs to this .npz (keys are the output names).")
@click.option("--profile", is_flag=True,
              help="Print a per-op time breakdown (each call's median over --repeat runs) and "
                   "the slowest calls with their tensor shapes.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(min=1),
              help="Runs to time after one warm-up run (median reported).")
@click.option("--no-segment-check", is_flag=True,
              help="Skip the CRC-32s of the weights at load (trusted storage; the flatbuffer's "
                   "is still checked).")
@click.option("--verify", is_flag=True,
              help="Run the test vectors stored with nee-export --bundle-io instead of inputs; "
                   f"exit status {VERIFY_FAILED} if an output is beyond the stored tolerance.")
@click.option("--method", help="The method or entry point to run (default: the first; "
                                "nee-inspect lists them).")
@click.option("--generate", "prompt_ids", help="Greedy generation from a decoder bundle (tokens "
                                               "and start_pos in, logits out): the prompt's "
                                               "token ids, e.g. 1,2,3.")
@click.option("--max-new-tokens", default=32, show_default=True, type=click.IntRange(min=1),
              help="Tokens to generate with --generate.")
@click.option("--threads", type=click.IntRange(min=1),
              help="Threads at most, BLAS's and the XNNPACK delegate's (default: the board "
                   "recipe's, else 1); with more than 1 a run falls back to 1 thread while that "
                   "is faster.")
@click.option("--engine", type=click.Choice(XNNPACK_ENGINES), default="litert", show_default=True,
              help="What runs the XNNPACK delegate's partitions: LiteRT, OpenVINO (float "
                   "partitions; pip install 'nee[openvino]'), or the faster of the two on each "
                   "partition, timed at load.")
def main(bundle: str, inputs: tuple[str, ...], random_inputs: bool, output: str | None,
         profile: bool, repeat: int, no_segment_check: bool, verify: bool, method: str | None,
         prompt_ids: str | None, max_new_tokens: int, threads: int | None,
         engine: str) -> None:
    """Run BUNDLE with numpy kernels and print its outputs."""
    backends = _engine(engine)
    if prompt_ids is not None:
        if inputs or random_inputs or output or profile or verify:
            raise click.UsageError("--generate makes its own inputs: give no --input, "
                                   "--random, --output, --profile or --verify")
        _generate(bundle, prompt_ids, max_new_tokens, method, no_segment_check, threads,
                  backends)
        return
    if verify:
        if inputs or random_inputs or output or profile:
            raise click.UsageError("--verify runs the bundle's own vectors: give no --input, "
                                   "--random, --output or --profile")
        _verify(bundle, no_segment_check, backends)
        return
    try:
        program = Program.load(bundle, backends, verify_segments=not no_segment_check,
                               threads=threads)
        program = program.method(method) if method else program
        arrays = _random(program) if random_inputs else _read_inputs(inputs, program)
        outputs = [o.copy() for o in program.run(*arrays)]  # also warms kernel caches up
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            program.run(*arrays)
            times.append(time.perf_counter() - start)
    except NeeError as e:
        raise click.ClickException(str(e)) from e
    for spec, value in zip(program.outputs, outputs, strict=True):
        click.echo(f"{spec}\n{np.array2string(value, threshold=20, precision=6)}")
    click.echo(f"latency: median {statistics.median(times) * 1e3:.3f} ms over {len(times)} "
               "run(s) after one warm-up run")
    if output:
        np.savez(output, **{s.name: v for s, v in zip(program.outputs, outputs, strict=True)})
        click.echo(f"saved outputs to {output}")
    if profile:
        timings = median_profile([program.profile(*arrays) for _ in range(repeat)])
        click.echo(f"profile: each call's median over {repeat} run(s)")
        click.echo(format_profile(timings))
        if program.partitions:
            click.echo(format_partitions(program, timings))


def _engine(engine: str) -> dict[str, Backend]:
    """The backends replacing the registry's: the XNNPACK partitions' ``engine`` unless the
    default (the registry's LiteRT)."""
    if engine == "litert":
        return {}
    if importlib.util.find_spec("runtime_py.backends.openvino") is None:
        raise click.UsageError(f"--engine {engine}: this runtime was built without the "
                               "XNNPACK backend's engines (nee-build for a board whose recipe "
                               "names cpu_delegate = \"xnnpack\")")
    missing = [p for p in NEEDS[engine] if importlib.util.find_spec(p) is None]
    if missing:
        raise click.UsageError(f"--engine {engine} needs {' and '.join(missing)}: pip install "
                               f"'nee[{','.join(EXTRAS[p] for p in missing)}]'")
    return {"xnnpack": xnnpack_engine(engine)}


def _generate(bundle: str, prompt: str, max_new_tokens: int, method: str | None,
              no_segment_check: bool, threads: int | None,
              backends: dict[str, Backend]) -> None:
    """Stream generated token ids, then the prefill time and decode speed."""
    try:
        ids = [int(x) for x in prompt.split(",")]
    except ValueError as e:
        raise click.BadParameter(f"{prompt!r} is not comma-separated token ids",
                                 param_hint="--generate") from e
    stats = GenerationStats()
    try:
        with Program.load(bundle, backends, verify_segments=not no_segment_check,
                          threads=threads) as program:
            program = program.method(method) if method else program
            for token in generate(program, ids, max_new_tokens, stats):
                click.echo(token, nl=False)
                click.echo(" ", nl=False)
    except NeeError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"\n{stats}")


def _verify(bundle: str, no_segment_check: bool, backends: dict[str, Backend]) -> None:
    try:
        with Program.load(bundle, backends, verify_segments=not no_segment_check) as program:
            checks = verify_vectors(program)
    except NeeError as e:
        raise click.ClickException(str(e)) from e
    for check in checks:
        click.echo(str(check))
    failed = sum(not c.passed for c in checks)
    click.echo(f"verify: {len(checks) - failed} of {len(checks)} output(s) within tolerance")
    if failed:
        raise SystemExit(VERIFY_FAILED)


def _read_inputs(paths: tuple[str, ...], program: Program) -> list[np.ndarray]:
    if len(paths) == 1 and Path(paths[0]).suffix == ".npz":
        with _npy_errors(paths[0]), np.load(paths[0], allow_pickle=False) as npz:
            missing = [s.name for s in program.inputs if s.name not in npz]
            if missing:
                raise click.ClickException(
                    f"{paths[0]}: expected arrays named {[s.name for s in program.inputs]}, "
                    f"found {list(npz.keys())}. Hint: save with np.savez(path, <name>=array)")
            return [npz[s.name] for s in program.inputs]
    arrays = []
    for path in paths:
        with _npy_errors(path):
            arrays.append(np.load(path, allow_pickle=False))
    return arrays


# What numpy's .npy and .npz (zip) files start with.
NUMPY_MAGICS = (b"\x93NUMPY", b"PK\x03\x04")


@contextlib.contextmanager
def _npy_errors(path: str) -> Iterator[None]:
    """A file numpy cannot read as arrays of numbers, as one error line (exit status 1)."""
    with open(path, "rb") as f:
        start = f.read(6)
    try:
        if not start.startswith(NUMPY_MAGICS):
            raise ValueError(f"a file starting with {start!r}, not numpy's format")
        yield
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        found = (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
        raise click.ClickException(str(InputError(
            f"input file {path}", "a .npy/.npz of numbers written by numpy.save/savez",
            found, "save the array with numpy.save(path, array)"))) from e


def _random(program: Program) -> list[np.ndarray]:
    """Seeded normal floats; zeros for integer and bool inputs (always valid indices)."""
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s.shape).astype(s.dtype) if np.dtype(s.dtype).kind == "f"
            else np.zeros(s.shape, s.dtype) for s in program.inputs]


def format_partitions(program: Program, timings: list) -> str:
    """Per delegated partition: its measured time here (host emulation or device) beside the
    compiler's estimate on the device; then the time of the calls left on the CPU."""
    lines = ["partitions:"]
    delegated = 0.0
    for p in program.partitions:
        measured = sum(t for call, t in timings if call.op == f"{DELEGATE_CALL}[{p.index}]")
        delegated += measured
        estimate = ("no estimate" if p.estimate is None else
                    f"estimated {p.estimate.seconds * 1e3:.3f} ms on the {p.target} "
                    f"({p.estimate.cycles} cycles at {p.estimate.clock_hz / 1e6:g} MHz)")
        backend = program.backends.get(p.backend, program.backends["cpu"]).label
        lines.append(f"  {p.index}: {measured * 1e3:.3f} ms here ({backend}); {estimate}")
    cpu = sum(t for _, t in timings) - delegated
    lines.append(f"  calls on the CPU: {cpu * 1e3:.3f} ms")
    return "\n".join(lines)


def median_profile(runs: list[list[tuple[Call, float]]]) -> list[tuple[Call, float]]:
    """Each call's median time over ``runs`` (profiles of one program, calls in one order)."""
    return [(call, statistics.median(run[i][1] for run in runs))
            for i, (call, _) in enumerate(runs[0])]


def format_profile(timings: list[tuple[Call, float]], slowest: int = 10) -> str:
    """Per-op totals (time, share, calls), slowest first, then the ``slowest`` single calls
    with their tensor shapes and source lines."""
    total = sum(t for _, t in timings) or 1e-12
    per_op: dict[str, list[float]] = {}
    for call, t in timings:
        per_op.setdefault(call.op, []).append(t)
    lines = [f"{'op':40s} {'ms':>9s} {'share':>7s} {'calls':>6s}"]
    for op, ts in sorted(per_op.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{op:40s} {sum(ts) * 1e3:9.3f} {sum(ts) / total:7.1%} {len(ts):6d}")
    lines.append(f"{'total':40s} {total * 1e3:9.3f}")
    lines.append("slowest calls:")
    for call, t in sorted(timings, key=lambda ct: -ct[1])[:slowest]:
        source = f"  ({call.source})" if call.source else ""
        lines.append(f"  {t * 1e3:8.3f} ms  {call.op}  {call.shapes}{source}")
    return "\n".join(lines)
