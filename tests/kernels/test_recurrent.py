"""nee::gru_cell.out and nee::lstm_cell.out vs torch's GRU and LSTM cells (the same
projections)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_harness import check_rules, planned_scratch, random

from runtime_py.kernels import KERNELS

NAME, LSTM = "nee::gru_cell.out", "nee::lstm_cell.out"
TOL = {"rtol": 1e-5, "atol": 1e-6}


def torch_gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor,
                   hidden: torch.Tensor) -> torch.Tensor:
    """torch's GRU cell (as ``torch.nn.GRUCell`` computes it) from its two projections."""
    i_r, i_z, i_n = input_gates.chunk(3, -1)
    h_r, h_z, h_n = hidden_gates.chunk(3, -1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * hidden


def torch_lstm_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch's LSTM cell (as ``torch.nn.LSTMCell`` computes it) from its summed projections:
    (h', c')."""
    i, f, g, o = gates.chunk(4, -1)
    new_cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(new_cell), new_cell


def test_the_references_are_torchs_cells() -> None:
    gru, lstm = torch.nn.GRUCell(5, 4), torch.nn.LSTMCell(5, 4)
    x, h, c = random((3, 5)), random((3, 4)), random((3, 4))
    with torch.no_grad():
        gates = (torch.nn.functional.linear(x, gru.weight_ih, gru.bias_ih),
                 torch.nn.functional.linear(h, gru.weight_hh, gru.bias_hh))
        torch.testing.assert_close(torch_gru_cell(*gates, h), gru(x, h))
        summed = (torch.nn.functional.linear(x, lstm.weight_ih, lstm.bias_ih)
                  + torch.nn.functional.linear(h, lstm.weight_hh, lstm.bias_hh))
        torch.testing.assert_close(torch_lstm_cell(summed, c), lstm(x, (h, c)))


def _strided_gates(lead: tuple[int, ...], hidden: int) -> torch.Tensor:
    """Gates (..., 3H) as a step of a longer sequence's projection: rows strided."""
    return random((*lead[:-1], lead[-1], 4, 3 * hidden), scale=3)[..., 1, :]


CASES = {
    "2d": lambda: (random((2, 96), scale=3), random((2, 96), scale=3), random((2, 32))),
    "3d": lambda: (random((1, 3, 12), scale=3), random((1, 3, 12), scale=3), random((1, 3, 4))),
    "strided": lambda: (_strided_gates((2,), 8), _strided_gates((2,), 8), random((2, 8))),
    "saturating": lambda: (random((2, 24), scale=60), random((2, 24), scale=60),
                           random((2, 8))),
}


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gru_cell(case: str, scratch: bool) -> None:
    input_gates, hidden_gates, hidden = CASES[case]()
    want = torch_gru_cell(input_gates, hidden_gates, hidden).numpy()
    args = {"input_gates": input_gates.numpy(), "hidden_gates": hidden_gates.numpy(),
            "hidden": hidden.numpy()}
    kernel = KERNELS[NAME]
    out = np.full(want.shape, np.nan, np.float32)
    kernel.bind({**args, "out": out, **(planned_scratch(kernel, args) if scratch else {})})()
    np.testing.assert_allclose(out, want, **TOL)
    check_rules(NAME, args, {"out": out}, **TOL)


@pytest.mark.parametrize(("change", "why"), [
    ({"input_gates": np.zeros((2, 95), np.float32)}, "gates"),
    ({"hidden_gates": np.zeros((3, 96), np.float32)}, "gates"),
    ({"hidden": np.zeros((2, 32), np.float64)}, "float32"),
    ({"out": np.zeros((2, 96), np.float32)}, "give out"),
])
def test_gru_cell_rule_refuses(change: dict, why: str) -> None:
    args = {"input_gates": np.zeros((2, 96), np.float32),
            "hidden_gates": np.zeros((2, 96), np.float32),
            "hidden": np.zeros((2, 32), np.float32), "out": np.zeros((2, 32), np.float32)}
    with pytest.raises(ValueError, match=why):
        KERNELS[NAME].bind({**args, **change})


LSTM_CASES = {
    "2d": lambda: (random((2, 128), scale=3), random((2, 32))),
    "3d": lambda: (random((1, 3, 16), scale=3), random((1, 3, 4))),
    "strided": lambda: (_strided_gates((2,), 16), random((2, 12))),  # (2, 48): H = 12
    "saturating": lambda: (random((2, 32), scale=60), random((2, 8))),
}


@pytest.mark.parametrize("scratch", [False, True])
@pytest.mark.parametrize("case", sorted(LSTM_CASES))
def test_lstm_cell(case: str, scratch: bool) -> None:
    gates, cell = LSTM_CASES[case]()
    want = [t.numpy() for t in torch_lstm_cell(gates, cell)]
    args = {"gates": gates.numpy(), "cell": cell.numpy()}
    kernel = KERNELS[LSTM]
    outs = {key: np.full(w.shape, np.nan, np.float32) for key, w in zip(("out", "cell_out"),
                                                                       want, strict=True)}
    kernel.bind({**args, **outs, **(planned_scratch(kernel, args) if scratch else {})})()
    for got, w in zip(outs.values(), want, strict=True):
        np.testing.assert_allclose(got, w, **TOL)
    check_rules(LSTM, args, outs, **TOL)
