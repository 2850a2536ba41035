"""Bad files and bad inputs give clear NEE errors, never tracebacks from deep inside."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from roundtrip import run_both

from runtime_py import kernels
from runtime_py.errors import BundleError, InputError, MissingKernelsError
from runtime_py.fbs.ArgKind import ArgKind
from runtime_py.loader import load_bundle
from runtime_py.program import Program
from toolchain.export import export
from toolchain.serialize.bundle import write_bundle, write_to


@pytest.fixture
def mlp(exported):
    return exported("mlp")


def _write(tmp_path, data: bytes):
    path = tmp_path / "bad.nee"
    path.write_bytes(data)
    return path


def test_missing_file_names_path(tmp_path):
    with pytest.raises(BundleError, match="no such file"):
        Program.load(tmp_path / "nope.nee")


@pytest.mark.parametrize("data", [b"", b"NEE", b"\0" * 11])
def test_tiny_files_are_rejected(tmp_path, data):
    with pytest.raises(BundleError, match="Hint"):
        Program.load(_write(tmp_path, data))


def test_non_nee_file_is_rejected_by_identifier(tmp_path):
    with pytest.raises(BundleError, match="not a NEE bundle"):
        Program.load(_write(tmp_path, b"PK\x03\x04" + bytes(100)))


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95, 0.999])
def test_truncated_bundle_is_rejected(tmp_path, mlp, keep):
    data = mlp.path.read_bytes()
    with pytest.raises(BundleError, match=r"truncated|damaged|corrupt"):
        Program.load(_write(tmp_path, data[: int(len(data) * keep)]))


def test_corrupted_bytes_never_escape_as_other_errors(tmp_path, mlp):
    data = mlp.path.read_bytes()
    rng = random.Random(0)
    head = int.from_bytes(data[:4], "little") + 4
    for _ in range(150):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(12, head)] = rng.randrange(256)
        with contextlib.suppress(BundleError):
            Program.load(_write(tmp_path, bytes(mutated)))


def test_wrong_input_shape_names_the_input(mlp):
    program = Program.load(mlp.path)
    name = program.inputs[0].name
    with pytest.raises(InputError, match=rf"input {name}: expected float32\[4, 16\], found "
                                         rf"float32\[2, 16\]"):
        program.run(np.zeros((2, 16), np.float32))


def test_wrong_input_dtype_and_count(mlp):
    program = Program.load(mlp.path)
    with pytest.raises(InputError, match="found float64"):
        program.run(mlp.inputs[0].astype(np.float64))
    with pytest.raises(InputError, match="expected 1"):
        program.run(*mlp.inputs, *mlp.inputs)
    with pytest.raises(InputError, match="numpy array"):
        program.run(mlp.inputs[0].tolist())


def test_all_missing_kernels_are_listed(mlp, monkeypatch):
    needed = sorted({op for op, _ in mlp.result.kernels})
    assert len(needed) >= 2
    for op in needed[:2]:
        monkeypatch.delitem(kernels.KERNELS, op)
    with pytest.raises(MissingKernelsError) as info:
        Program.load(mlp.path)
    assert all(op in str(info.value) for op in needed[:2])


def _repack(path, tmp_path, name: str):
    """Decode ``path``, let the caller mutate the tables, and write them back as ``name``."""
    loaded = load_bundle(path)
    blobs = [bytes(loaded.data[loaded.segment_base + s.offset:][:s.size])
             for s in loaded.bundle.segments]
    target = tmp_path / name

    def write():
        with target.open("wb") as file:
            write_to(file, loaded.bundle, blobs)
        return target

    return loaded.bundle, write


def test_repacking_unchanged_tables_keeps_a_valid_bundle(tmp_path, exported):
    _, write = _repack(exported("cnn").path, tmp_path, "same.nee")
    assert Program.load(write()).run(*exported("cnn").inputs)


def test_overlapping_plan_is_rejected_at_load(tmp_path, exported):
    bundle, write = _repack(exported("cnn").path, tmp_path, "overlap.nee")
    a, b = [buf for buf in bundle.plan.buffers if buf.size][:2]
    b.offset, b.firstStep, b.endStep = a.offset, a.firstStep, a.endStep
    with pytest.raises(BundleError, match="disjoint bytes while both are live"):
        Program.load(write())


def test_outputs_must_cover_their_elements_once(tmp_path):
    """A node output stored channels-last (a view of a root of its own) loads; the same view
    with strides that overlap elements (inside its storage) is refused, naming the tensor."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8),
                                torch.nn.Conv2d(8, 4, 1))
    write_bundle(export(model, (torch.randn(1, 3, 8, 8),)), tmp_path / "cl.nee")
    bundle, write = _repack(tmp_path / "cl.nee", tmp_path, "strides.nee")
    t = next(t for t in bundle.tensors if t.aliasOf >= 0 and list(t.strides)[1] == 1)
    Program.load(write())
    _, c, h, w = t.shape
    t.strides = [c * h * w, 1, w * c // 2, c]  # rows overlap
    with pytest.raises(BundleError, match=f"output {t.name}.*row-major in some order"):
        Program.load(write())


def test_arguments_a_kernel_does_not_take_are_rejected_at_load(tmp_path, exported):
    bundle, write = _repack(exported("mlp").path, tmp_path, "args.nee")
    node = next(n for n in bundle.nodes if n.op.startswith("aten::"))
    node.args[0].name = "no_such_argument"
    with pytest.raises(BundleError, match="arguments the runtime's kernel takes"):
        Program.load(write())


def test_scratch_smaller_than_the_kernel_needs_is_rejected_at_load(exported, monkeypatch):
    path = exported("cnn").path
    op = next(n.op for n in load_bundle(path).bundle.nodes
              if any(a.name == "scratch" for a in n.args))
    kernel = kernels.KERNELS[op]
    monkeypatch.setitem(kernels.KERNELS, op, dataclasses.replace(
        kernel, scratch=lambda **args: kernel.scratch(**args) + (1 << 30)))
    with pytest.raises(BundleError, match="a scratch of at least"):
        Program.load(path)


class PickColumns(torch.nn.Module):
    def forward(self, x, idx):
        return x[:, idx] * 2  # aten::index.Tensor with indices [None, idx]


def test_optional_tensor_lists_round_trip_and_bad_flags_are_rejected(tmp_path):
    run_both(PickColumns(), torch.randn(3, 5), torch.tensor([4, 0, 2]), tmp_path=tmp_path)
    bundle, write = _repack(tmp_path / "m.nee", tmp_path, "flags.nee")
    arg = next(a for n in bundle.nodes for a in n.args if a.kind == ArgKind.OptionalTensorList)
    assert list(arg.ints) == [0, 1]
    arg.ints = [1, 1]  # two tensors flagged, one stored
    with pytest.raises(BundleError, match="0/1 flags, one per entry"):
        Program.load(write())


@pytest.mark.parametrize("names", [["a", "a"], ["a"], ["a", ""]])
def test_bad_output_names_are_rejected_at_load(tmp_path, names):
    path = tmp_path / "two.nee"
    write_bundle(export(_TwoOutputs(), (torch.ones(2),)), path)
    bundle, write = _repack(path, tmp_path, "names.nee")
    bundle.outputNames = names
    with pytest.raises(BundleError, match="2 distinct non-empty names"):
        Program.load(write())


def test_bundles_without_output_names_use_the_tensor_names(tmp_path, exported):
    bundle, write = _repack(exported("mlp").path, tmp_path, "old.nee")
    bundle.outputNames = None  # as written before the field existed
    (tensor,) = [bundle.tensors[k].name for k in bundle.outputs]
    assert [s.name for s in Program.load(write()).outputs] == [tensor]


class _TwoOutputs(torch.nn.Module):
    def forward(self, x):
        return {"double": x * 2, "half": x / 2}


def test_bad_quantization_parameters_are_all_listed_at_load(tmp_path):
    from toolchain.modules import load_file
    from toolchain.quantize.options import Int8Options

    module = load_file(Path(__file__).resolve().parents[1] / "examples" / "mlp.py")
    path = tmp_path / "mlp_int8.nee"
    samples = module.calibration_inputs()[:2]
    write_bundle(export(module.Model(), module.example_inputs(),
                        quantize=Int8Options(samples)), path)
    bundle, write = _repack(path, tmp_path, "bad_quant.nee")
    quantized = [t for t in bundle.tensors if t.quantization is not None]
    per_channel = next(t for t in quantized if t.quantization.axis == 0)
    per_channel.quantization.scale = [1.0, -1.0, *per_channel.quantization.scale[2:]]
    quantized[0].quantization.zeroPoint = [300]
    float_tensor = next(t for t in bundle.tensors if t.dtype == 0)
    float_tensor.quantization = quantized[0].quantization
    with pytest.raises(BundleError, match="quantization parameters") as error:
        Program.load(write())
    for problem in ("scales [", "zero points [300]", "dtype float32"):
        assert problem in str(error.value)
