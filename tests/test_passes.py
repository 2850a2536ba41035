"""Graph passes: each rewrite is checked on small models, end to end against torch."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
from roundtrip import run_both
from torch import nn

from runtime_py.kernels import KERNELS
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.ir import Node, Ref
from toolchain.passes.alias_views import reshape_strides
from toolchain.passes.check_supported import close_ops
from toolchain.pipeline import PASSES
from toolchain.verify import VerifyError, verify

SHAPES = [(2, 3, 4), (1, 3, 1, 4), (4, 1, 6), (2, 2, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_reshape_strides_agree_with_torch(shape):
    for perm in itertools.permutations(range(len(shape))):
        t = torch.empty(shape).permute(perm)
        numel = t.numel()
        for new in [(numel,), (t.shape[0], -1), (-1, t.shape[-1]), (1, numel, 1)]:
            target = tuple(torch.empty(numel).view(new).shape)
            try:
                want = t.view(target).stride()
            except RuntimeError:
                want = None
            assert reshape_strides(tuple(t.shape), t.stride(), target) == want, (perm, new)


class Views(nn.Module):
    def forward(self, x):
        a = x.permute(0, 2, 1)  # non-contiguous view
        b = a.reshape(2, -1)  # needs a copy: not expressible as strides
        c = x[:, 1:3, ::2] + x.select(1, 0)[:, :3].unsqueeze(1).expand(2, 2, 3)
        d, e = torch.split(x, [1, 3], dim=1)
        return b * 2, c, d.flatten(), e.sum(1), x.transpose(0, 2), torch.relu(x).clone()


def test_views_alias_and_copy_only_when_needed(tmp_path):
    result = run_both(Views(), torch.randn(2, 4, 6), tmp_path=tmp_path)
    ops = [n.op for n in result.graph.nodes]
    # Only the reshapes of non-contiguous data (the permute, the split slice) copy; the clone
    # of contiguous relu(x) is an alias.
    assert ops.count("aten::clone.out") == 2
    assert sum(t.view_of is not None for t in result.graph.tensors.values()) >= 6


class ConvBn(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)
        self.bn.weight.data.uniform_(0.5, 2)
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return self.lin(y) + self.lin.weight.t().sum(0)  # a constant-only subexpression


def test_batchnorm_folds_and_constants_fold(tmp_path):
    result = run_both(ConvBn(), torch.randn(1, 3, 8, 8), tmp_path=tmp_path)
    ops = [n.op for n in result.graph.nodes]
    assert not any("batch_norm" in op for op in ops)
    assert not any(op.startswith("aten::sum") for op in ops)  # folded at export
    weights = [t for t in result.graph.tensors.values() if t.kind == "const" and t.view_of]
    assert all(0 in t.element_strides() for t in weights)  # only broadcasts stay views


@pytest.mark.parametrize(("rows", "blocked"), [(9, True), (1, False), (32, False)])
def test_weights_of_few_row_products_keep_their_layout(tmp_path, rows, blocked):
    """A (768, 768) linear weight read by 2-12 rows stays (N, K), the layout the row-blocked
    kernel reads (its transpose a view); other row counts read a contiguous (K, N) copy."""
    torch.manual_seed(0)
    result = run_both(nn.Linear(768, 768), torch.randn(rows, 768), tmp_path=tmp_path, rtol=1e-4,
                      atol=1e-5)
    node = next(n for n in result.graph.nodes if n.op == "aten::addmm.out")
    weight = result.graph.tensors[node.args["mat2"].name]
    assert (weight.view_of is not None) is blocked
    assert weight.element_strides() == ((1, 768) if blocked else (768, 1))
    assert ("scratch" in node.args) is blocked  # its transposed operands


def test_activation_fuses_into_conv(tmp_path):
    if "nee::convolution_act.out" not in KERNELS:
        pytest.skip("fused conv kernel not registered")
    result = run_both(ConvBn(), torch.randn(1, 3, 8, 8), tmp_path=tmp_path)
    ops = [n.op for n in result.graph.nodes]
    assert "nee::convolution_act.out" in ops and "aten::relu.out" not in ops


class Residual(nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x) * 3
        z = torch.tanh(y) + y
        return torch.relu(z - 1)


def test_inplace_reuse_shrinks_the_plan(tmp_path):
    if not any(k.inplace for k in KERNELS.values()):
        pytest.skip("no in-place kernels registered")
    result = run_both(Residual(), torch.randn(64, 64), tmp_path=tmp_path)
    aliases = [t for t in result.graph.tensors.values()
               if t.view_of and t.kind == "activation"]
    assert aliases
    assert len(result.requests) < len(result.graph.nodes) + 1


class Bessel(nn.Module):
    def forward(self, x):
        y = torch.special.bessel_j0(x) + 1
        for _ in range(2):  # one source line, two calls
            y = torch.special.bessel_j0(y)
        y = torch.special.bessel_j0(y)
        y = torch.special.bessel_j0(y)
        y = torch.special.bessel_j0(y)
        return nn.functional.max_pool3d(y[None, None], 1)


def test_unsupported_ops_are_grouped_with_counts_first_lines_and_related_ops():
    assert "aten::special_bessel_j0.out" not in KERNELS
    with pytest.raises(ExportError) as info:
        export(Bessel(), (torch.randn(3, 3, 3),))
    message = str(info.value)
    assert message.startswith("7 operator call(s) of 2 kind(s)")
    bessel = (r"  aten::special_bessel_j0.out \(6 calls\)\n"
              r"(    at \S+test_passes\.py:\d+: .*bessel_j0\(.*\n){3}"
              r"    \.\.\. and 2 more source line\(s\)\n")
    assert re.search(bessel, message), message  # no supported op is related to it
    pool = (r"  aten::max_pool3d_with_indices.out \(1 call, from max_pool3d\); supported ops "
            r"close to it: aten::max_pool2d_with_indices.out")
    assert re.search(pool, message), message


class Double(nn.Module):
    def forward(self, x):
        return x * 2


def test_unsupported_dtype_fails_at_export_not_at_load():
    with pytest.raises(ExportError, match=r"aten::mul\.out on float64 \(1 call\); this kernel "
                                          r"supports .*\n    at \S+test_passes\.py:\d+"):
        export(Double(), (torch.randn(3, dtype=torch.float64),))


def test_verifier_catches_broken_graphs():
    result = export(nn.Linear(4, 2), (torch.randn(1, 4),))
    graph = result.graph
    graph.nodes.insert(0, Node("aten::relu.out", {"self": Ref(graph.outputs[0]),
                                                  "out": Ref("ghost")}, ["ghost"], "", ["out"]))
    with pytest.raises(VerifyError, match="unknown tensors"):
        verify(graph)
    graph.nodes[0].outputs, graph.nodes[0].args["out"] = [graph.inputs[0]], Ref(graph.inputs[0])
    with pytest.raises(VerifyError, match="before it is written"):
        verify(graph)


def test_pipeline_is_one_literal_list_of_documented_passes():
    names = [p.__name__ for p in PASSES]
    assert names[-1] == "check_supported"
    for p in PASSES:
        doc = (p.__module__ and __import__(p.__module__, fromlist=["_"]).__doc__) or ""
        assert all(word in doc for word in ("Rewrites:", "Requires:", "Ensures:")), p.__name__


class Pools(nn.Module):
    def forward(self, x):
        y, idx = nn.functional.max_pool2d(x, 2, return_indices=True)
        return nn.functional.max_pool2d(x, 3, 1, 1), y, idx


def test_unread_pool_indices_are_dropped(tmp_path):
    result = run_both(Pools(), torch.randn(1, 2, 6, 6), tmp_path=tmp_path)
    ops = sorted(n.op for n in result.graph.nodes)
    assert ops == ["aten::max_pool2d_with_indices.out", "nee::max_pool2d.out"]


class SelfOverlap(nn.Module):
    def forward(self, x):
        y = torch.relu(x)  # an activation storage that dies at the add below
        return nn.functional.hardswish(y + y.t())  # other arg: another view of y


def test_inplace_never_overwrites_a_storage_read_through_another_view(tmp_path):
    result = run_both(SelfOverlap(), torch.randn(16, 16), tmp_path=tmp_path)
    add = next(n for n in result.graph.nodes if n.op == "aten::add.out")
    assert result.graph.tensors[add.outputs[0]].view_of is None


class ConvBnBn(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 4, 1)
        self.bn1, self.bn2 = nn.BatchNorm2d(4), nn.BatchNorm2d(4)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        y = self.bn1(self.conv(x))
        return self.bn2(y), y * 2  # y has two readers: bn2 must not fold into the conv


def test_batchnorm_chain_folds_only_where_the_conv_output_is_private(tmp_path):
    result = run_both(ConvBnBn(), torch.randn(1, 2, 4, 4), tmp_path=tmp_path)
    ops = [n.op for n in result.graph.nodes]
    assert sum("batch_norm" in op for op in ops) == 1


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))  # 3-D input: addmm, then a reshape


def test_activation_fuses_through_the_reshape_of_a_linear_layer(tmp_path):
    result = run_both(FeedForward(), torch.randn(2, 5, 8), tmp_path=tmp_path)
    ops = [(n.op, n.args.get("activation")) for n in result.graph.nodes]
    assert ops == [("nee::addmm_act.out", "aten::gelu.out"), ("aten::addmm.out", None)]


def test_close_ops_are_only_related_ones():
    assert "aten::full.out" in close_ops("aten::full_like.out")
    assert "aten::max_pool2d_with_indices.out" in close_ops("aten::max_pool3d_with_indices.out")
    assert "aten::tanh.out" not in close_ops("aten::any.out")
    assert "aten::scalar_tensor.out" not in close_ops("aten::slice_scatter.out")
    assert close_ops("aten::special_bessel_j0.out") == []


class InvertedResidual(nn.Module):
    """A stem, a depthwise 3x3, an expanding 1x1, a depthwise 3x3 at stride 2 with relu6, a
    projecting 1x1,
    a residual block over 6 x 6 and one over 3 x 3 (below MIN_POSITIONS), a dilated
    depthwise and a grouped convolution."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.dw0 = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.expand = nn.Conv2d(8, 24, 1)
        self.dw = nn.Conv2d(24, 24, 3, 2, 1, groups=24)
        self.project = nn.Conv2d(24, 8, 1)
        self.dw6 = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.small = nn.Conv2d(8, 8, 3, 2, 1, groups=8)
        self.dilated = nn.Conv2d(8, 8, 3, 1, 2, 2, groups=8)
        self.grouped = nn.Conv2d(8, 8, 3, 1, 1, groups=2)

    def forward(self, x):
        y = nn.functional.relu6(self.dw(nn.functional.relu6(self.expand(self.dw0(self.stem(x))))))
        y = self.project(y)
        y = y + self.dw6(y)
        z = self.small(y)
        return self.grouped(self.dilated(z)) + z, torch.sigmoid(self.dw6(y))


def test_channels_last_feature_maps(tmp_path):
    """The maps between convolutions around a depthwise one, of at least MIN_POSITIONS
    positions, also those joined to them by elementwise ops, are stored channels-last (whole
    (N, H, W, C) views of roots of their own); maps joined to a graph output (dw6's second
    result, through sigmoid), smaller maps and those of dilated or grouped convolutions stay
    row-major; the program matches torch."""
    from toolchain.passes.channels_last import MIN_POSITIONS

    result = run_both(InvertedResidual(), torch.randn(1, 3, 24, 24), tmp_path=tmp_path,
                      rtol=1e-4, atol=1e-5)
    graph = result.graph
    last = {n for n in graph.tensors if graph.is_layout(n)}
    producer = graph.producers()
    shapes = sorted(graph.tensors[n].shape for n in last)
    # stem, dw0, expand and dw; the residual block's project, dw6 and their sum, joined by add
    assert shapes == [(1, 8, 6, 6)] * 3 + [(1, 8, 12, 12)] * 2 + [(1, 24, 6, 6), (1, 24, 12, 12)]
    for name in last:
        t, root = graph.tensors[name], graph.tensors[graph.tensors[name].view_of]
        assert root.shape == (t.shape[0], *t.shape[2:], t.shape[1]) and not root.view_of
        assert producer[name].op in ("aten::convolution.out", "nee::convolution_act.out",
                                     "aten::add.out")
        assert t.shape[2] * t.shape[3] >= MIN_POSITIONS


def test_channels_last_scratch_fits_both_layouts(monkeypatch):
    """The calls around channels-last maps get a scratch at least as large as row-major maps
    need (the runtime may bind them row-major) and as their channels-last kernels ask."""
    from runtime_py.kernels import KERNELS
    from toolchain.passes import channels_last
    from toolchain.passes.add_scratch import _placeholder

    x = torch.randn(1, 3, 24, 24)
    graph = export(InvertedResidual(), (x,)).graph
    monkeypatch.setattr(channels_last, "MIN_POSITIONS", 1 << 62)
    row_major = export(InvertedResidual(), (x,)).graph

    def scratch(g):
        return {n.outputs[0]: g.tensors[n.args["scratch"].name].nbytes
                for n in g.nodes if "scratch" in n.args}

    sizes, wanted = scratch(graph), scratch(row_major)
    assert sizes.keys() == wanted.keys() and all(sizes[k] >= wanted[k] for k in sizes)
    for node in graph.nodes:
        if "scratch" in node.args:
            args = {k: _placeholder(graph, v) for k, v in node.args.items() if k != "scratch"}
            assert sizes[node.outputs[0]] >= KERNELS[node.op].scratch(**args)


def test_verifier_refuses_a_view_output_that_is_no_layout(tmp_path):
    """A node output viewing part of a storage, or with gaps, is no layout of its own."""
    result = export(InvertedResidual(), (torch.randn(1, 3, 24, 24),))
    graph = result.graph
    name = next(n for n in graph.tensors if graph.is_layout(n))
    graph.tensors[name].offset = 1
    with pytest.raises(VerifyError, match="neither a whole in-place input nor"):
        verify(graph)
    graph.tensors[name].offset = 0
    graph.tensors[name].strides = tuple(2 * s for s in graph.tensors[name].strides)
    with pytest.raises(VerifyError, match="neither a whole in-place input nor"):
        verify(graph)


@pytest.mark.parametrize(("setting", "small_kernel", "relaid"), [
    (None, False, True), (None, True, False), (True, True, True), (False, False, False)])
def test_runtime_binds_channels_last_maps_as_its_blas_prefers(tmp_path, monkeypatch, setting,
                                                              small_kernel, relaid):
    """The runtime binds the maps a bundle stores channels-last as such, or, where its BLAS has
    OpenBLAS's small-matrix kernel (or CHANNELS_LAST says so), row-major over the same bytes;
    the scratch fits either (no budgeted fallback), and the outputs agree."""
    from runtime_py import program as program_module
    from runtime_py.kernels import linalg
    from runtime_py.loader import layout_views
    from runtime_py.program import Program
    from toolchain.serialize.bundle import write_bundle

    model, x = InvertedResidual().eval(), torch.randn(1, 3, 24, 24)
    write_bundle(export(model, (x,)), tmp_path / "m.nee")
    monkeypatch.setattr(program_module, "CHANNELS_LAST", setting)
    monkeypatch.setattr(linalg, "SMALL_KERNEL", small_kernel)
    program = Program.load(tmp_path / "m.nee")
    views = layout_views(program.loaded.bundle)
    assert len(views) == 7
    assert all(program.tensors[i].flags.c_contiguous is not relaid for i in views)
    with torch.no_grad():
        want = model(x)
    for got, w in zip(program.run(x.numpy()), want, strict=True):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-4, atol=1e-5)
