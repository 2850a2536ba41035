"""Recurrent-cell kernels: a GRU or LSTM step's gate math in one call (found in a graph by
``toolchain/passes/fuse_rnn_cells.py``).

``nee::gru_cell.out(input_gates, hidden_gates, hidden, *, out)``: the gates are the two
projections (input_gates = x W_ih^T + b_ih, hidden_gates = h W_hh^T + b_hh, each (..., 3H) in
torch's chunk order r, z, n) and ``hidden`` the previous state h (..., H):
r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r h_n), out = (1 - z) n + z h.
Ten numpy calls on small arrays instead of the decomposed graph's ~20 (numpy's per-call cost
dominates at recurrent sizes): r and z in one pass over their adjacent chunks (written as two
contiguous blocks: a strided operand costs numpy ~3x the call), and each sigmoid as a division
by 1 + exp(-a) rather than a reciprocal and a product.

``nee::lstm_cell.out(gates, cell, *, out, cell_out)``: ``gates`` (..., 4H) is the sum of both
projections in torch's chunk order i, f, g, o and ``cell`` the previous cell state c (..., H):
c' = sigmoid(f) c + sigmoid(i) tanh(g) into ``cell_out``, h' = sigmoid(o) tanh(c') into
``out``. Nine numpy calls (the decomposed graph: ~18).
"""

from __future__ import annotations

import numpy as np

from runtime_py.kernels import Bound, Kernel, rules
from runtime_py.kernels._common import FLOAT, ONE, Workspace, workspace_bytes


def gru_cell(input_gates: np.ndarray, hidden_gates: np.ndarray, hidden: np.ndarray, *,
             out: np.ndarray, scratch: np.ndarray | None = None) -> Bound:
    """One GRU step from its gate projections (module docstring)."""
    lead, h = out.shape[:-1], out.shape[-1]
    ws = Workspace(scratch)
    rz = ws.take((2, *lead, h), out.dtype)  # 1 + exp(-(i + h)) for r, then z: each contiguous
    n = ws.take(out.shape, out.dtype)
    both_in, both_hidden = (g[..., :2 * h].reshape((*lead, 2, h), copy=False)
                            for g in (input_gates, hidden_gates))
    sums = np.moveaxis(rz, 0, -2)  # rz seen as (..., 2, H), the gates' order
    r, z = rz
    i_n, h_n = input_gates[..., 2 * h:], hidden_gates[..., 2 * h:]

    def run() -> None:
        np.add(both_in, both_hidden, sums)
        np.negative(rz, rz)
        np.exp(rz, rz)
        np.add(rz, ONE, rz)
        np.divide(h_n, r, n)
        np.add(n, i_n, n)
        np.tanh(n, n)
        np.subtract(hidden, n, out)  # (1 - z) n + z h = n + z (h - n)
        np.divide(out, z, out)
        np.add(out, n, out)

    return run


def _gru_scratch(hidden: np.ndarray, **_: object) -> int:
    return workspace_bytes(((2, *hidden.shape), "float32"), (hidden.shape, "float32"))


def _check_gru(input_gates: np.ndarray, hidden_gates: np.ndarray, hidden: np.ndarray, *,
               out: np.ndarray, **_: object) -> None:
    """Float32 gates (..., 3H) and hidden (..., H) of one shape but the last dim give (..., H)."""
    inputs = {"input_gates": rules.tensor(input_gates, "input_gates"),
              "hidden_gates": rules.tensor(hidden_gates, "hidden_gates"),
              "hidden": rules.tensor(hidden, "hidden")}
    gates = (*hidden.shape[:-1], 3 * hidden.shape[-1]) if hidden.ndim else None
    if (input_gates.shape != gates or hidden_gates.shape != gates
            or {a.dtype for a in (input_gates, hidden_gates, hidden)} != {rules.FLOAT32}):
        rules.refuse(inputs, "float32 gates (..., 3H) and hidden (..., H), leading dims equal")
    rules.expect(out, hidden.shape, hidden.dtype, inputs)


def lstm_cell(gates: np.ndarray, cell: np.ndarray, *, out: np.ndarray, cell_out: np.ndarray,
              scratch: np.ndarray | None = None) -> Bound:
    """One LSTM step from its summed gates (module docstring)."""
    lead, h = out.shape[:-1], out.shape[-1]
    ws = Workspace(scratch)
    inverse = ws.take((4, *lead, h), out.dtype)  # 1 + exp(-gate), per gate contiguous
    candidate = ws.take(out.shape, out.dtype)
    spread = np.moveaxis(inverse, 0, -2)  # seen as (..., 4, H), the gates' order
    by_gate = gates.reshape((*lead, 4, h), copy=False)
    i, f, _, o = inverse
    g = gates[..., 2 * h:3 * h]

    def run() -> None:
        np.negative(by_gate, spread)
        np.exp(inverse, inverse)
        np.add(inverse, ONE, inverse)
        np.tanh(g, candidate)
        np.divide(candidate, i, candidate)
        np.divide(cell, f, cell_out)
        np.add(cell_out, candidate, cell_out)
        np.tanh(cell_out, out)
        np.divide(out, o, out)

    return run


def _lstm_scratch(cell: np.ndarray, **_: object) -> int:
    return workspace_bytes(((4, *cell.shape), "float32"), (cell.shape, "float32"))


def _check_lstm(gates: np.ndarray, cell: np.ndarray, *, out: np.ndarray,
                cell_out: np.ndarray, **_: object) -> None:
    """Float32 gates (..., 4H) and cell (..., H) of one shape but the last dim give out and
    cell_out (..., H)."""
    inputs = {"gates": rules.tensor(gates, "gates"), "cell": rules.tensor(cell, "cell")}
    if (not cell.ndim or gates.shape != (*cell.shape[:-1], 4 * cell.shape[-1])
            or {gates.dtype, cell.dtype} != {rules.FLOAT32}):
        rules.refuse(inputs, "float32 gates (..., 4H) and cell (..., H), leading dims equal")
    rules.expect(out, cell.shape, cell.dtype, inputs)
    rules.expect(cell_out, cell.shape, cell.dtype, inputs, "cell_out")


KERNELS: dict[str, Kernel] = {
    "nee::gru_cell.out": Kernel.prepared(gru_cell, FLOAT, scratch=_gru_scratch, check=_check_gru),
    "nee::lstm_cell.out": Kernel.prepared(lstm_cell, FLOAT, scratch=_lstm_scratch,
                                          check=_check_lstm),
}
