"""``nee-run --verify``: run the test vectors a bundle carries (``nee-export --bundle-io``) and
hold the outputs against the model's, within the stored tolerance."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_py.errors import BundleError
from runtime_py.program import Program


@dataclass(frozen=True)
class OutputCheck:
    """One output of one vector: its largest error and whether every element was within
    ``atol + rtol * |want|``."""

    vector: str  # its index, and its method in a bundle of several
    output: str
    max_abs_error: float
    atol: float
    rtol: float
    passed: bool

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISMATCH"
        return (f"vector {self.vector} {self.output}: max |error| {self.max_abs_error:.3g} "
                f"(allowed {self.atol:.3g} + {self.rtol:.3g} * |want|) {verdict}")


def verify(program: Program) -> list[OutputCheck]:
    """Run every bundled vector of every method, each from a reset state; one check per
    output. BundleError if there are none."""
    checks = []
    for name in program.methods:
        method = program.method(name)
        for i, v in enumerate(method.loaded.bundle.testVectors or []):
            inputs = [_array(method, k, s.shape, s.dtype) for k, s in zip(
                v.inputs, method.inputs, strict=True)]
            program.reset()
            got = method.run(*inputs)
            label = f"{i}" if len(program.methods) == 1 else f"{i} of {name}"
            for spec, g, k in zip(method.outputs, got, v.outputs, strict=True):
                want = _array(method, k, spec.shape, spec.dtype)
                checks.append(_check(label, spec.name, g, want, v.rtol, v.atol))
    if not checks:
        raise BundleError(f"{program.path}: test vectors", "vectors stored at export",
                          "none", "export with nee-export --bundle-io")
    return checks


def _array(program: Program, segment: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return program.segment(int(segment)).view(dtype).reshape(shape)


def _check(i: str, name: str, got: np.ndarray, want: np.ndarray, rtol: float,
           atol: float) -> OutputCheck:
    got, want = got.astype(np.float64), want.astype(np.float64)
    error = np.abs(got - want)
    both_nan = np.isnan(got) & np.isnan(want)
    within = (error <= atol + rtol * np.abs(want)) | both_nan
    worst = float(np.max(np.where(both_nan, 0.0, error), initial=0.0))
    return OutputCheck(i, name, worst, atol, rtol, bool(within.all()))
