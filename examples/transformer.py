"""One pre-norm Transformer encoder layer with hand-written causal self-attention.

Tokens (int64 ids) -> embedding + learned positions -> LN -> causal MHA -> residual ->
LN -> GELU FFN -> residual -> LN -> vocabulary logits. d_model 128, 4 heads, sequence 32.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head attention via matmul/softmax with a boolean causal mask."""

    def __init__(self, d_model: int, nhead: int) -> None:
        super().__init__()
        self.nhead = nhead
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.nhead, d // self.nhead).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // self.nhead))
        pos = torch.arange(t, device=x.device)
        future = pos[None, :] > pos[:, None]
        scores = scores.masked_fill(future, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Model(nn.Module):
    """Token embedding + one encoder layer + LM head."""

    def __init__(self, vocab: int = 100, d_model: int = 128, nhead: int = 4,
                 seq_len: int = 32, d_ff: int = 256) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, nhead)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        x = x + self.attn(self.ln1(x))
        x = x + self.ff(self.ln2(x))
        return self.head(self.ln_f(x))


def example_inputs() -> tuple[torch.Tensor, ...]:
    """One sequence of 32 token ids."""
    torch.manual_seed(1)
    return (torch.randint(0, 100, (1, 32)),)
