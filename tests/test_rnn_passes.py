"""Recurrent models: batch_steps (one input projection per sequence) and fuse_rnn_cells (one
call per GRU or LSTM step), each checked against eager and against the graph they rewrite."""

from __future__ import annotations

import pytest
import torch
from roundtrip import run_both
from torch import nn

from examples.gru import GRUCell
from examples.gru import Model as HandWrittenGru

CELL, LSTM_CELL = "nee::gru_cell.out", "nee::lstm_cell.out"
ADDMM = "aten::addmm.out"


class NnRnn(nn.Module):
    """torch's own GRU or LSTM (batch first or time major), a head on the last state."""

    def __init__(self, kind: type[nn.Module] = nn.GRU, batch_first: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = kind(6, 8, batch_first=batch_first)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, state = self.rnn(x)
        return self.head((state[0] if isinstance(state, tuple) else state)[-1])


class LstmCellLoop(nn.Module):
    """``nn.LSTMCell`` stepped over the sequence, returning both final states."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cell = nn.LSTMCell(6, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = c = torch.zeros(x.shape[0], 8)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
        return h, c


class Leaky(HandWrittenGru):
    """The hand-written GRU also returning the last step's update gate z (read outside the
    cell): that step cannot fuse."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.zeros(x.shape[0], self.d_hidden)
        for t in range(x.shape[1] - 1):
            h = self.cell(x[:, t], h)
        xr, xz, xn = self.cell.x2h(x[:, -1]).chunk(3, dim=-1)
        hr, hz, hn = self.cell.h2h(h).chunk(3, dim=-1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return self.head((1 - z) * n + z * h), z


class FirstSteps(nn.Module):
    """The input projection of only some steps: nothing to batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cell = GRUCell(6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0], 8)
        for t in range(2):
            h = self.cell(x[:, t], h)
        return h


def _ops(result) -> list[str]:
    return [n.op for n in result.graph.nodes]


def test_hand_written_gru_projects_the_sequence_once_and_fuses_every_step(tmp_path):
    model, x = HandWrittenGru(), torch.randn(2, 10, 16)
    result = run_both(model, x, tmp_path=tmp_path)
    ops = _ops(result)
    # each weight once, though every step transposes W_hh (+ the first step's folded gates)
    parameters = sum(p.numel() * 4 for p in model.parameters())
    assert parameters < result.graph.weight_bytes() < parameters * 1.05
    # one input projection, then per step the hidden projection (none at step 0: h = 0 folds)
    # and the cell, then the head
    assert ops.count(CELL) == 10 and ops.count(ADDMM) == 1 + 9 + 1
    assert set(ops) == {ADDMM, CELL}


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(("kind", "cell"), [(nn.GRU, CELL), (nn.LSTM, LSTM_CELL)])
def test_nn_rnns_fuse_every_step(tmp_path, kind: type[nn.Module], cell: str,
                                 batch_first: bool):
    x = torch.randn(2, 7, 6) if batch_first else torch.randn(7, 2, 6)
    ops = _ops(run_both(NnRnn(kind, batch_first), x, tmp_path=tmp_path))
    assert ops.count(cell) == 7
    assert not {"aten::sigmoid.out", "aten::tanh.out"} & set(ops)


def test_lstm_cell_loop_projects_once_and_fuses_every_step(tmp_path):
    ops = _ops(run_both(LstmCellLoop(), torch.randn(3, 5, 6), tmp_path=tmp_path))
    assert ops.count(LSTM_CELL) == 5 and not {"aten::sigmoid.out", "aten::tanh.out"} & set(ops)


def test_a_cell_whose_gate_is_read_elsewhere_is_left_as_it_is(tmp_path):
    ops = _ops(run_both(Leaky(), torch.randn(2, 5, 16), tmp_path=tmp_path))
    assert ops.count(CELL) == 4 and ops.count("aten::sigmoid.out") == 2


def test_projections_of_some_steps_only_stay_per_step(tmp_path):
    ops = _ops(run_both(FirstSteps(), torch.randn(2, 5, 6), tmp_path=tmp_path))
    assert ops.count(ADDMM) == 2 + 1 and ops.count(CELL) == 2  # 2 inputs, 1 hidden (step 1)


class Stacked(nn.Module):
    """A multi-layer / bidirectional / bias-free torch RNN returning every output and state."""

    def __init__(self, kind: type[nn.Module], **options: object) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn = kind(6, 8, **options)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, state = self.rnn(x)
        return y, *(state if isinstance(state, tuple) else (state,))


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
@pytest.mark.parametrize(("options", "shape", "cells"), [
    ({"num_layers": 2}, (5, 1, 6), 10),
    ({"bidirectional": True, "batch_first": True}, (1, 5, 6), 10),
    ({"num_layers": 2, "bidirectional": True}, (4, 3, 6), 16),
    ({"bias": False, "batch_first": True}, (2, 4, 6), 4),
])
def test_stacked_bidirectional_and_bias_free_rnns_fuse_every_step(
        tmp_path, kind: type[nn.Module], options: dict, shape: tuple[int, ...], cells: int):
    ops = _ops(run_both(Stacked(kind, **options), torch.randn(*shape), tmp_path=tmp_path))
    assert sum(op.endswith("_cell.out") for op in ops) == cells
    assert not {"aten::sigmoid.out", "aten::tanh.out"} & set(ops)
