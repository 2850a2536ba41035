"""Small GRU sequence classifier with the cell math written out over time steps.

(``nn.GRU`` exports too, with a torch warning about its ``_flat_weights`` attributes; both
export to one input projection for the sequence and one fused call per step:
toolchain/passes/batch_steps.py and fuse_rnn_cells.py.)
"""

from __future__ import annotations

import torch
from torch import nn


class GRUCell(nn.Module):
    """PyTorch's GRU cell: reset r, update z, candidate n; h' = (1 - z) n + z h."""

    def __init__(self, d_in: int, d_hidden: int) -> None:
        super().__init__()
        self.x2h = nn.Linear(d_in, 3 * d_hidden)
        self.h2h = nn.Linear(d_hidden, 3 * d_hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        xr, xz, xn = self.x2h(x).chunk(3, dim=-1)
        hr, hz, hn = self.h2h(h).chunk(3, dim=-1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1 - z) * n + z * h


class Model(nn.Module):
    """GRU over the sequence (batch first), linear head on the last hidden state."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, num_classes: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.d_hidden = d_hidden
        self.cell = GRUCell(d_in, d_hidden)
        self.head = nn.Linear(d_hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0], self.d_hidden)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return self.head(h)


def example_inputs() -> tuple[torch.Tensor, ...]:
    """A batch of 2 sequences of 10 steps."""
    torch.manual_seed(1)
    return (torch.randn(2, 10, 16),)


def calibration_inputs() -> list[tuple[torch.Tensor, ...]]:
    """16 seeded batches like example_inputs(), for nee-export --quantize int8."""
    generator = torch.Generator().manual_seed(2)
    return [(torch.randn(2, 10, 16, generator=generator),) for _ in range(16)]
