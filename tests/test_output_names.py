"""Program outputs carry the names the model gives them: keys, fields, a hook, else output_i."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
import transformers

from runtime_py.program import Program
from toolchain.errors import ExportError
from toolchain.export import export
from toolchain.serialize.bundle import write_bundle

Pair = namedtuple("Pair", "low high")


class Returns(torch.nn.Module):
    """Returns whatever ``make(x)`` builds from the input."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def forward(self, x):
        return self.make(x)


CASES = [
    (lambda x: x + 1, ["output_0"]),
    (lambda x: (x + 1, x * 2), ["output_0", "output_1"]),
    (lambda x: [x + 1, None, x * 2], ["output_0", "output_2"]),  # constants are dropped
    (lambda x: {"logits": x.softmax(-1), "raw": x * 3}, ["logits", "raw"]),
    (lambda x: Pair(x - 1, x + 1), ["low", "high"]),
    (lambda x: {"a": (x + 1, x * 2), "b": x}, ["a.0", "a.1", "b"]),
    (lambda x: (x * 2, {"aux": x + 1}), ["output_0", "output_1.aux"]),
    (lambda x: {"same": (y := x * 2), "again": y, "input": x}, ["same", "again", "input"]),
]


@pytest.mark.parametrize(("make", "names"), CASES)
def test_output_names_follow_the_return_value(tmp_path, make, names):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    path = tmp_path / "m.nee"
    write_bundle(export(Returns(make), (x,)), path)
    program = Program.load(path)
    assert [s.name for s in program.outputs] == names
    assert [s.name for s in program.inputs] == ["x"]  # forward's argument name
    expected = [t for t in torch.utils._pytree.tree_leaves(make(x)) if t is not None]
    for got, want in zip(program.run(x.numpy()), expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


class Hooked(torch.nn.Module):
    def __init__(self, names) -> None:
        super().__init__()
        self.names = names

    def forward(self, x):
        return x + 1, x * 2

    def output_names(self):
        return self.names


def test_output_names_hook_wins(tmp_path):
    path = tmp_path / "m.nee"
    write_bundle(export(Hooked(["plus_one", "twice"]), (torch.ones(3),)), path)
    assert [s.name for s in Program.load(path).outputs] == ["plus_one", "twice"]


@pytest.mark.parametrize("names", [["one"], ["a", "a"], ["a", ""], ["a", 3]])
def test_bad_output_names_hook_is_a_clear_error(names):
    with pytest.raises(ExportError, match=r"Hooked.output_names\(\): expected 2 distinct"):
        export(Hooked(names), (torch.ones(3),))


def test_hf_model_outputs_are_named_by_their_fields():
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64)
    model = transformers.BertModel(config).eval()
    result = export(model, (torch.randint(0, 64, (1, 8)),))
    assert result.graph.output_names == ["last_hidden_state", "pooler_output"]
    assert result.graph.inputs == ["input_ids"]
