"""Where NEE's numpy backend loses to ExecuTorch's XNNPACK delegate, layer by layer, in the model.

Usage: python bench/layers.py [--models mobilenet_v2,...] [--runs 100] (needs
``pip install executorch==1.5.1``)

Times each zoo model's layers where they run, inside the whole model, at 1 thread: NEE's numpy
program by its per-call profile (``Program.profile``, each call's median over ``--runs``), and
ExecuTorch's XNNPACK delegate by its own per-operator events (ETDump, read with ExecuTorch's
Inspector: each operator's median). Pairs the layers with weights in execution order (NEE's
convolutions and linear layers, XNNPACK's convolutions and fully-connected operators, which
include the 1x1 convolutions) and prints each pair's times and NEE / XNNPACK, then the sums by
kind (depthwise; 1x1 over at most FEW_POSITIONS or more output positions; other convolutions;
linear) and over each whole run. The two runs differ in what a layer includes: NEE's fused
activations are in its call, XNNPACK's too; NEE's separate copies, pads and adds are not in
any layer, nor are XNNPACK's transposes.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FEW_POSITIONS = 64  # 1x1 convolutions over at most this many output positions are "few"
WEIGHTED = ("convolution", "addmm", "linear", "mm")  # NEE ops with a weight (their names')
XNN_WEIGHTED = ("Convolution", "Fully Connected")  # XNNPACK operators with a weight


def dims(text: str) -> list[int]:
    """'1x96x48x48' -> [1, 96, 48, 48]."""
    return [int(v) for v in text.split("x")]


def kind_of(shapes: str) -> str:
    """The kind of a NEE convolution or linear call from its profile ``shapes``
    ("input 1x96x48x48, weight 96x1x3x3, bias 96 -> 1x96x24x24")."""
    args = dict(part.split(" ", 1) for part in shapes.split(" -> ")[0].split(", "))
    out = dims(shapes.split(" -> ")[1])
    if "input" not in args or len(out) != 4:
        return "linear"
    c_in, weight = dims(args["input"])[1], dims(args["weight"])
    if weight[1] == 1 and weight[0] == c_in > 1:
        return "depthwise"
    if weight[2:] == [1, 1]:
        return "1x1 few" if out[2] * out[3] <= FEW_POSITIONS else "1x1 many"
    return "conv"


def nee_layers(model, inputs, folder: Path, runs: int) -> tuple[list[tuple[str, str, float]],
                                                                float]:
    """(kind, shapes, median seconds) of each weighted call of NEE's numpy program, and the
    median sum of all its calls."""
    from runtime_py.program import Program
    from toolchain.export import export
    from toolchain.serialize.bundle import write_bundle

    path = folder / "model.nee"
    write_bundle(export(model, inputs, name="model"), path)
    program = Program.load(path, threads=1)
    arrays = [t.numpy() for t in inputs]
    for _ in range(5):
        program.run(*arrays)
    profiles = [program.profile(*arrays) for _ in range(runs)]
    layers = [(kind_of(call.shapes), call.shapes, statistics.median(p[i][1] for p in profiles))
              for i, (call, _) in enumerate(profiles[0])
              if call.op.split("::")[-1].split(".")[0].removesuffix("_act") in WEIGHTED]
    return layers, statistics.median(sum(t for _, t in p) for p in profiles)


def xnnpack_layers(model, inputs, folder: Path, runs: int) -> tuple[list[tuple[str, float]],
                                                                    float]:
    """(operator name, median seconds) of each weighted XNNPACK operator, and the median time
    of the whole method, from ETDump."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools import Inspector
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings import portable_lib

    lowered = to_edge_transform_and_lower(torch.export.export(model, inputs),
                                          partitioner=[XnnpackPartitioner()]).to_executorch()
    buffer = lowered.buffer  # the loaded program does not keep its buffer alive
    method = portable_lib._load_for_executorch_from_buffer(buffer, enable_etdump=True,
                                                           debug_buffer_size=0)
    for _ in range(5 + runs):
        method.forward(list(inputs))
    dump = folder / "model.etdp"
    method.write_etdump_result_to_file(str(dump))
    frame = Inspector(etdump_path=str(dump)).to_dataframe()
    ops = [(row.event_name, row.raw[5:]) for row in frame.itertuples()
           if row.is_delegated_op and row.event_name.startswith(XNN_WEIGHTED)]
    whole = next(row.raw[5:] for row in frame.itertuples() if row.event_name == "Method::execute")
    return ([(name, statistics.median(raw) / 1e3) for name, raw in ops],
            statistics.median(whole) / 1e3)


def ratio(nee: float, xnn: float) -> str:
    """NEE / XNNPACK, 7 wide; "-" where ETDump's whole-microsecond clock read 0."""
    return f"{nee / xnn:7.2f}" if xnn else f"{'-':>7}"


def report(name: str, runs: int) -> None:
    """Print the paired layers of zoo model ``name`` and the sums by kind."""
    from toolchain.cli import _load_target

    module, factory = _load_target(f"{ROOT}/examples/{name}.py:Model")
    model, inputs = factory().eval(), module.example_inputs()
    with tempfile.TemporaryDirectory() as tmp:
        nee, nee_total = nee_layers(model, inputs, Path(tmp), runs)
        xnn, xnn_total = xnnpack_layers(model, inputs, Path(tmp), runs)
    print(f"\n{name}: {len(nee)} NEE layers, {len(xnn)} XNNPACK operators with weights")
    if len(nee) != len(xnn):
        print("  counts differ: not paired")
        return
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    print(f"  {'NEE call':62} {'NEE us':>7} {'XNNPACK operator':>34} {'us':>6} {'NEE/XNN':>7}")
    for (kind, shapes, t_nee), (op, t_xnn) in zip(nee, xnn, strict=True):
        print(f"  {shapes[:62]:62} {t_nee * 1e6:7.1f} {op[:34]:>34} {t_xnn * 1e6:6.1f} "
              f"{ratio(t_nee, t_xnn)}")
        for key in (kind, "layers"):
            sums[key][0] += t_nee
            sums[key][1] += t_xnn
    sums["whole run"] = [nee_total, xnn_total]
    print(f"  {'sum':12} {'NEE us':>8} {'XNN us':>8} {'NEE/XNN':>7}")
    for key, (t_nee, t_xnn) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
        print(f"  {key:12} {t_nee * 1e6:8.0f} {t_xnn * 1e6:8.0f} {ratio(t_nee, t_xnn)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2")
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()

    from executorch.extension.pybindings import portable_lib
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    portable_lib._unsafe_reset_threadpool(1)
    for name in args.models.split(","):
        report(name, args.runs)


if __name__ == "__main__":
    main()
