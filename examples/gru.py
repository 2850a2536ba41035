"""Small GRU sequence classifier (nn.GRU; torch.export unrolls it into core ATen ops)."""

from __future__ import annotations

import torch
from torch import nn


class Model(nn.Module):
    """Single-layer GRU over the sequence, linear head on the last hidden state."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, num_classes: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gru = nn.GRU(d_in, d_hidden, batch_first=True)
        self.head = nn.Linear(d_hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(x)
        return self.head(y[:, -1])


def example_inputs() -> tuple[torch.Tensor, ...]:
    """A batch of 2 sequences of 10 steps."""
    torch.manual_seed(1)
    return (torch.randn(2, 10, 16),)
