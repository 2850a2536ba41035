"""What storing feature maps channels-last buys each convolution of mobilenet_v2, layer by layer.

Usage: python bench/channels_last.py [--runs 300]

Each of mobilenet_v2's kinds of layers (at 96 x 96 input: its stem, depthwise convolutions at
stride 1 and 2, expanding and projecting 1x1 convolutions), bound by the runtime's fused
convolution kernel with relu6 twice: over row-major maps, and with its input and out stored as
the ``channels_last`` pass stores them (a depthwise convolution channels-last in and out, an
expanding one out, a projecting one in). The two calls run alternately, 1 thread; prints
each one's median microseconds and the ratio of the medians (< 1: channels-last faster). The
outputs of the two are checked against each other first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime_py.kernels import KERNELS  # noqa: E402
from runtime_py.kernels.nn import stored_channels_last  # noqa: E402
from runtime_py.threads import set_blas_threads  # noqa: E402

# name -> (input shape, weight shape, stride, input channels-last, out channels-last)
LAYERS = {
    "stem 3 -> 32 s2": ((1, 3, 96, 96), (32, 3, 3, 3), 2, False, True),
    "depthwise 32 x 48 x 48": ((1, 32, 48, 48), (32, 1, 3, 3), 1, True, True),
    "project 32 -> 16 over 48 x 48": ((1, 32, 48, 48), (16, 32, 1, 1), 1, True, False),
    "expand 16 -> 96 over 48 x 48": ((1, 16, 48, 48), (96, 16, 1, 1), 1, False, True),
    "depthwise 96 x 48 x 48 s2": ((1, 96, 48, 48), (96, 1, 3, 3), 2, True, True),
    "project 96 -> 24 over 24 x 24": ((1, 96, 24, 24), (24, 96, 1, 1), 1, True, False),
    "expand 24 -> 144 over 24 x 24": ((1, 24, 24, 24), (144, 24, 1, 1), 1, False, True),
    "depthwise 144 x 24 x 24": ((1, 144, 24, 24), (144, 1, 3, 3), 1, True, True),
    "depthwise 144 x 24 x 24 s2": ((1, 144, 24, 24), (144, 1, 3, 3), 2, True, True),
    "depthwise 192 x 12 x 12": ((1, 192, 12, 12), (192, 1, 3, 3), 1, True, True),
    "expand 64 -> 384 over 6 x 6": ((1, 64, 6, 6), (384, 64, 1, 1), 1, False, True),
    "depthwise 384 x 6 x 6": ((1, 384, 6, 6), (384, 1, 3, 3), 1, True, True),
    "project 384 -> 64 over 6 x 6": ((1, 384, 6, 6), (64, 384, 1, 1), 1, True, False),
    "depthwise 576 x 6 x 6 s2": ((1, 576, 6, 6), (576, 1, 3, 3), 2, True, True),
}


def bound(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, stride: int,
          out: np.ndarray) -> Callable[[], None]:
    """The fused convolution + relu6 call over these arrays, with the scratch it asks for."""
    kernel = KERNELS["nee::convolution_act.out"]
    k = weight.shape[2]
    args = {"input": x, "weight": weight, "bias": bias, "stride": (stride,) * 2,
            "padding": (k // 2,) * 2, "dilation": (1, 1), "transposed": False,
            "output_padding": (0, 0), "groups": 1 if weight.shape[1] > 1 else weight.shape[0],
            "activation": "aten::hardtanh.out", "act_min_val": 0.0, "act_max_val": 6.0}
    scratch = np.empty(kernel.scratch(**args, out=out), np.uint8)
    return kernel.bind({**args, "out": out, "scratch": scratch})


def sides(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int, x_last: bool,
          out_last: bool) -> tuple[list[Callable[[], None]], list[np.ndarray]]:
    """The row-major and the channels-last call of one layer, and their outs."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    weight = rng.standard_normal(w_shape, dtype=np.float32)
    bias = rng.standard_normal(w_shape[0], dtype=np.float32)
    size = (x_shape[2] + 2 * (w_shape[2] // 2) - w_shape[2]) // stride + 1
    outs = [np.empty((1, w_shape[0], size, size), np.float32) for _ in range(2)]
    if out_last:
        outs[1] = stored_channels_last(outs[1])
    inputs = [x, stored_channels_last(x) if x_last else x]
    return [bound(i, weight, bias, stride, o) for i, o in zip(inputs, outs, strict=True)], outs


def paired_us(calls: list[Callable[[], None]], runs: int) -> list[float]:
    """Median microseconds of each call, run alternately."""
    times: list[list[float]] = [[], []]
    for _ in range(runs):
        for call, spent in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            spent.append(time.perf_counter() - start)
    return [statistics.median(t) * 1e6 for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    set_blas_threads(1)
    print(f"{'layer':32s} {'row-major us':>12s} {'channels-last us':>16s} {'ratio':>6s}")
    for name, layer in LAYERS.items():
        calls, outs = sides(*layer)
        for call in calls:
            call()
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4)
        first, last = paired_us(calls, args.runs)
        print(f"{name:32s} {first:12.1f} {last:16.1f} {last / first:6.2f}", flush=True)


if __name__ == "__main__":
    main()
