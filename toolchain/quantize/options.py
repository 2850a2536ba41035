"""Options of int8 export (no torch or torchao import: the CLI and export() build them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolchain.errors import ExportError

OBSERVERS = ("minmax", "histogram")
# Requantization per target, name -> (conv's rounding, fully connected's, add/sub/mul/mean's
# scheme). "double" is MultiplyByQuantizedMultiplier as TFLite Micro and Vela's TFLite path do
# it; "single" its single-rounding build (TOSA/ExecuTorch-Arm); "litert" what LiteRT's
# reference kernels do since 2025 (fully-connected rescales in double precision); "xnnpack"
# what LiteRT's XNNPACK path does (float32 scales rounded to even, XNNPACK's add/sub).
ROUNDINGS = {"double": ("double", "double", "tflite"), "single": ("single", "single", "tflite"),
             "litert": ("double", "float", "tflite"),
             "xnnpack": ("xnnpack", "xnnpack", "xnnpack")}

Sample = tuple[Any, ...]


def board_rounding(npu: object, cpu_delegate: str | None) -> str:
    """The rounding an export uses unless told: the one of the backend that runs the int8
    calls, so that the partitions' reference programs compute what it computes ("xnnpack"
    where XNNPACK takes the CPU's calls and no NPU does; "double", TFLite Micro's and Vela's,
    elsewhere)."""
    return "xnnpack" if cpu_delegate == "xnnpack" and npu is None else "double"


@dataclass(frozen=True)
class Int8Options:
    """What ``export(..., quantize=...)`` needs: calibration samples (input tuples), held-out
    samples for the accuracy report, the activation observer and the requantization rounding
    (a key of ROUNDINGS; None: the board's, ``board_rounding``)."""

    calibration: Sequence[Sample]
    evaluation: Sequence[Sample] = field(default_factory=tuple)
    observer: str = "minmax"
    rounding: str | None = None

    def __post_init__(self) -> None:
        if self.observer not in OBSERVERS:
            raise ExportError("observer", f"one of {list(OBSERVERS)}", repr(self.observer),
                              "minmax follows the calibration data's extremes; histogram "
                              "ignores rare outliers")
        if self.rounding is not None and self.rounding not in ROUNDINGS:
            raise ExportError("rounding", f"one of {list(ROUNDINGS)}", repr(self.rounding),
                              "double matches TFLite Micro and Vela")
        if not self.calibration:
            raise ExportError("calibration data", "at least one input tuple", "none",
                              "add calibration_inputs() to the model file or pass "
                              "--calibration DIR")


def split_samples(samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """Every fourth sample held out for the accuracy report (when there are at least four)."""
    samples = list(samples)
    if len(samples) < 4:
        return samples, []
    held = set(range(3, len(samples), 4))
    return ([s for i, s in enumerate(samples) if i not in held],
            [s for i, s in enumerate(samples) if i in held])
