"""Capture handles every node kind torch.export emits, or names the node it cannot handle."""

from __future__ import annotations

import pytest
import torch
from roundtrip import run_both
from torch import nn

from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.export.capture import export_program, to_graph


class NoOpConversions(nn.Module):
    """Casts and copies that change nothing (torch.export leaves asserts or aliases)."""

    def forward(self, x):
        y = x.to(torch.float32).to(x.device).float().type_as(x)
        return y.contiguous().detach().clone() + torch.ops.aten.alias(x)


class RMSNorm(nn.Module):
    """Llama's RMSNorm with its dtype casts."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


class SizeArithmetic(nn.Module):
    def forward(self, x):
        b, n = x.shape[0], x.size(-1)
        torch._check(b == 2)
        return x.view(b, n // 2, 2) * (n // 2)


class NoGradAndDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        with torch.no_grad():
            y = self.drop(x) * 2
        torch._assert_async(x.abs().sum() >= 0)
        return y


class NonTensorArgs(nn.Module):
    def forward(self, x, scale: float = 2.0, mode=None):
        return x * scale if mode is None else x


class ConstantOutputs(nn.Module):
    def forward(self, x):
        return x + 1, None, 3


class NestedOutputs(nn.Module):
    def forward(self, x):
        a, b = torch.split(x, [1, 3], dim=-1)
        values, indices = x.max(dim=-1)
        return {"parts": (a * 2, b.relu()), "max": (values, indices),
                "chunk": x.chunk(2, -1)[1] + 1}


class Fills(nn.Module):
    def forward(self, x):
        return (torch.zeros_like(x) + x, x.new_ones(3) * 2, torch.full_like(x, 7.0) - x,
                torch.ones(2, 4) + x)


class Passthrough(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x):
        return x, self.table, x * self.table


CASES = [
    (NoOpConversions(), (torch.randn(2, 4),)),
    (RMSNorm(), (torch.randn(2, 3, 8),)),
    (SizeArithmetic(), (torch.randn(2, 6),)),
    (NoGradAndDropout(), (torch.randn(3, 4),)),
    (NonTensorArgs(), (torch.randn(3), 3.0)),
    (ConstantOutputs(), (torch.randn(3),)),
    (NestedOutputs(), (torch.randn(2, 4),)),
    (Fills(), (torch.randn(2, 4),)),
    (Passthrough(), (torch.randn(4),)),
]


@pytest.mark.parametrize(("model", "inputs"), CASES, ids=[type(m).__name__ for m, _ in CASES])
def test_node_kinds_export_and_match_eager(model, inputs, tmp_path):
    result = run_both(model, *inputs, tmp_path=tmp_path)
    ops = {n.op for n in result.graph.nodes}
    assert not any("assert" in op or "alias" in op or "like" in op for op in ops), ops


def test_non_tensor_inputs_are_baked_in():
    result = export(NonTensorArgs(), (torch.randn(3), 3.0))
    assert len(result.graph.inputs) == 1


def test_shape_only_fills_become_broadcast_constants():
    graph = export(Fills(), (torch.randn(2, 4),)).graph
    full = [t for t in graph.tensors.values() if t.view_of and graph.is_const(t.name)]
    assert full and all(set(t.strides) == {0} for t in full)
    assert not any(n.op.startswith("aten::full") for n in graph.nodes)


class MutatesParameter(nn.Module):  # a buffer would be fine: it becomes state
    def __init__(self):
        super().__init__()
        self.count = nn.Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


class MutatesInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class Item(nn.Module):
    def forward(self, x):
        return x * x.max().item()


class Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (x,))


class Complex(nn.Module):
    def forward(self, x):
        return torch.view_as_real(torch.view_as_complex(x) * 2)


class Fft(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


ERRORS = [
    (MutatesParameter(), r"no in-place update .* found updates of parameter_mutation count"),
    (MutatesInput(), r"found updates of user_input_mutation x"),
    (Item(), r"node _local_scalar_dense .*test_capture\.py:\d+: return x \* x\.max\(\)\.item\(\)"
             r".*symbolic"),
    (Cond(), r"node cond \(cond\) at \S*test_capture\.py:\d+: .*control flow"),
    (Complex(), r"complex64"),
    (Fft(), r"node _fft_r2c .*test_capture\.py:\d+: return torch\.fft\.rfft\(x\)\.abs\(\).*"
            r"found torch\.complex64 from fft_rfft.*no complex tensors"),
]


@pytest.mark.parametrize(("model", "pattern"), ERRORS, ids=[type(m).__name__ for m, _ in ERRORS])
def test_unsupported_node_kinds_are_export_errors(model, pattern):
    x = torch.randn(3, 2) if isinstance(model, Complex) else torch.randn(3)
    with pytest.raises(ExportError, match=pattern):
        export(model, (x,))


def test_a_node_the_converter_does_not_know_names_node_target_and_line():
    ep = export_program(RMSNorm(), (torch.randn(2, 8),))
    node = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.rsqrt.default)
    del node.meta["val"]
    with pytest.raises(ExportError, match=r"node rsqrt \(rsqrt\.default\) at \S*test_capture\.py"
                                          r":\d+: h = h \* torch\.rsqrt"):
        to_graph(ep)


def test_an_hf_decoder_returning_its_cache_gets_a_remedy():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32)
    with pytest.raises(ExportError, match="use_cache=False"):
        export(transformers.LlamaModel(config), (torch.randint(0, 64, (1, 4)),))
