"""Bundled test vectors: ``--bundle-io`` stores the example inputs and the model's outputs with
a measured tolerance; ``nee-run --verify`` runs them and fails (status 3) beyond it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from bundle_fuzz import repacked
from click.testing import CliRunner

from runtime_py.cli import VERIFY_FAILED
from runtime_py.cli import main as run_main
from runtime_py.errors import BundleError
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from runtime_py.verify import verify
from toolchain.export import export
from toolchain.export.bundle_io import ATOL, RTOL
from toolchain.serialize.bundle import write_bundle


@pytest.fixture(scope="module")
def cnn_io(exported, tmp_path_factory):
    ex = exported("cnn")
    result = export(ex.model, ex.torch_inputs, name="cnn", bundle_io=True)
    path = tmp_path_factory.mktemp("io") / "cnn.nee"
    write_bundle(result, path)
    return ex, result, path


def test_the_vectors_hold_the_example_inputs_and_torchs_outputs(cnn_io):
    ex, result, path = cnn_io
    (vector,) = result.vectors
    np.testing.assert_array_equal(vector.inputs[0], ex.inputs[0])
    np.testing.assert_array_equal(vector.outputs[0], ex.expected[0])
    assert vector.rtol == RTOL and ATOL <= vector.atol < 1e-4
    with Program.load(path) as program:
        (check,) = verify(program)
    assert check.passed and check.max_abs_error <= vector.atol


def test_verify_passes_with_status_0_and_fails_with_status_3(cnn_io, tmp_path):
    _, result, path = cnn_io
    done = CliRunner().invoke(run_main, [str(path), "--verify"])
    assert done.exit_code == 0, done.output
    assert "verify: 1 of 1 output(s) within tolerance" in done.output
    (vector,) = result.vectors
    wrong = dataclasses.replace(vector, outputs=(vector.outputs[0] + 10 * vector.atol,))
    write_bundle(dataclasses.replace(result, vectors=(wrong,)), tmp_path / "wrong.nee")
    done = CliRunner().invoke(run_main, [str(tmp_path / "wrong.nee"), "--verify"])
    assert done.exit_code == VERIFY_FAILED, done.output
    assert "MISMATCH" in done.output and "verify: 0 of 1" in done.output


def test_verify_without_vectors_names_the_export_option(exported):
    done = CliRunner().invoke(run_main, [str(exported("mlp").path), "--verify"])
    assert done.exit_code == 1 and "nee-export --bundle-io" in done.output


def test_verify_takes_no_inputs(cnn_io):
    done = CliRunner().invoke(run_main, [str(cnn_io[2]), "--verify", "--random"])
    assert done.exit_code == 2 and "--verify runs the bundle's own vectors" in done.output


def _segment_of_another_size(b):
    b.testVectors[0].outputs = [b.testVectors[0].inputs[0]]


def _negative_tolerance(b):
    b.testVectors[0].atol = -1.0


def _missing_output(b):
    b.testVectors[0].outputs = []


@pytest.mark.parametrize(("mutate", "message"), [
    (_segment_of_another_size, r"vector 0 output 0: segment \d+ of 12288 bytes for 40"),
    (_negative_tolerance, r"vector 0: tolerance rtol 1e-05, atol -1.0"),
    (_missing_output, r"vector 0: 0 output segment\(s\) for 1 output\(s\)"),
])
def test_loader_checks_the_vectors(cnn_io, tmp_path, mutate, message):
    path = tmp_path / "bad.nee"
    path.write_bytes(repacked(cnn_io[2].read_bytes(), mutate))
    with pytest.raises(BundleError, match=message):
        load_bundle(path)
