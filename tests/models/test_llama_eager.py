"""examples/llama.py in torch eager: its KV cache decodes as full recomputation does, a prompt
padded at its end changes no logit of the real positions nor of the next decode step (what a
bucketed export relies on), torch.export records every cache update as a buffer mutation, and
eager_generate refuses a request longer than the context."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export.graph_signature import OutputKind

from toolchain.modules import load_file

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llama.py"
PROMPT = [17, 4000, 123, 9, 2048]


@pytest.fixture(scope="module")
def llama():
    return load_file(LLAMA)


@pytest.fixture(scope="module")
def model(llama):
    return llama.Model()


def cache_names(model: torch.nn.Module) -> set[str]:
    return {name for name, _ in model.named_buffers() if name.endswith(("k_cache", "v_cache"))}


@torch.no_grad()
def test_cached_greedy_decoding_equals_full_recomputation(llama, model) -> None:
    cached = llama.eager_generate(model, PROMPT, 32)
    seq = list(PROMPT)
    for _ in range(32):
        llama.reset(model)
        logits = model(torch.tensor([seq]), torch.tensor([0]))
        seq.append(int(logits[0, -1].argmax()))
    assert cached == seq[len(PROMPT):]
    assert len(set(cached)) >= 5, f"greedy decoding collapsed: {cached}"


@torch.no_grad()
def test_padding_at_the_end_changes_no_real_position(llama, model) -> None:
    n = len(PROMPT)
    llama.reset(model)
    want_prefill = model(torch.tensor([PROMPT]), torch.tensor([0]))
    want_next = model(torch.tensor([[7]]), torch.tensor([n]))

    llama.reset(model)
    padded = model(torch.tensor([[*PROMPT, 0, 0, 0]]), torch.tensor([0]))
    assert padded.shape == (1, 8, model.lm_head.out_features)
    # The pad tokens' keys and values now sit at positions 5..7 of every cache.
    assert all(buf[:, :, n:8].abs().sum() > 0 for name, buf in model.named_buffers()
               if name in cache_names(model))
    got_next = model(torch.tensor([[7]]), torch.tensor([n]))

    torch.testing.assert_close(padded[:, :n], want_prefill, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_next, want_next, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_seq"])
def test_export_records_every_cache_update_as_a_buffer_mutation(llama, model, dynamic) -> None:
    # torch.export.export keeps index_copy_ in place and lists no mutation; the functional
    # core-ATen program (index_put) returns each updated cache as a BUFFER_MUTATION output.
    shapes = llama.dynamic_shapes() if dynamic else None
    ep = torch.export.export(model, llama.example_inputs(), dynamic_shapes=shapes)
    core = ep.run_decompositions(torch.export.default_decompositions())
    mutated = [spec.target for spec in core.graph_signature.output_specs
               if spec.kind == OutputKind.BUFFER_MUTATION]
    assert sorted(mutated) == sorted(cache_names(model))
    assert len(mutated) == 2 * len(model.layers)
    ops = {n.target for n in core.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.index_put.default in ops


def test_eager_generate_refuses_more_than_the_context(llama, model) -> None:
    with pytest.raises(ValueError, match="exceeds the model's context"):
        llama.eager_generate(model, PROMPT, model.max_seq_len - len(PROMPT) + 1)
    assert len(llama.eager_generate(model, [1] * (model.max_seq_len - 1), 1)) == 1
