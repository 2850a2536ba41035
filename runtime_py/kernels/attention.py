"""Attention as one kernel: ``torch.nn.functional.scaled_dot_product_attention`` in eval.

softmax(q @ k^T * scale + mask) @ v with the query scaled into scratch, the scores in scratch and
two BLAS matmuls per call. Under grouped-query attention (or a single key/value head) the
query heads sharing a key/value head are one (group * L, E) matrix of the scaled query copy, so
one matmul per key/value head serves the whole group: K/V are never repeated. The softmax
normalises after the value matmul (one divide per output element, not per score).
"""

from __future__ import annotations

import math

import numpy as np

from runtime_py.kernels import Bound, Kernel, long_loops
from runtime_py.kernels._common import FLOAT, Workspace, workspace_bytes

_LOWEST = np.finfo(np.float32).min


def _groups(query: np.ndarray, key: np.ndarray, enable_gqa: bool) -> int:
    """Query heads per key/value head (dim -3) folded into one matmul: Hq // Hkv under GQA or
    when key/value have one head (broadcast), else 1."""
    hq, hkv = (a.shape[-3] if a.ndim > 2 else 1 for a in (query, key))
    if hq == hkv or hq == 1:
        return 1
    if hq % hkv or not (enable_gqa or hkv == 1):
        raise ValueError(f"{hq} query heads cannot share {hkv} key/value heads "
                         f"(enable_gqa={enable_gqa})")
    return hq // hkv


def _scores_shape(query: np.ndarray, key: np.ndarray, groups: int) -> tuple[int, ...]:
    """Shape of the score matrices, the query heads of a group as one stack of rows."""
    q_lead = (*query.shape[:-3], query.shape[-3] // groups) if groups > 1 else query.shape[:-2]
    rows = groups * query.shape[-2]
    return (*np.broadcast_shapes(q_lead, key.shape[:-2]), rows, key.shape[-2])


def _causal_bias(length: int, source: int) -> np.ndarray:
    """(length, source) additive mask, 0 where key j <= query i else -inf (torch's top-left
    aligned causal mask), as a strided view of a length + source - 1 vector."""
    line = np.zeros(length + source - 1, np.float32)
    line[length:] = -np.inf
    return np.lib.stride_tricks.sliding_window_view(line, source)[::-1]


def _masking(scores: np.ndarray, attn_mask: np.ndarray | None, is_causal: bool,
             ws: Workspace) -> Bound | None:
    """The call applying the mask to ``scores`` (in the (N..., Hq, L, S) layout), if any: a bool
    mask sets -inf where it is False (via its negation in scratch), a float one is added."""
    if is_causal:
        if attn_mask is not None:
            raise ValueError("attn_mask and is_causal cannot both be set")
        bias = _causal_bias(*scores.shape[-2:])
    elif attn_mask is None:
        return None
    elif attn_mask.dtype == np.bool_:
        masked = ws.take(attn_mask.shape, np.bool_)

        def hide() -> None:
            np.logical_not(attn_mask, out=masked)
            np.copyto(scores, -np.inf, where=masked)

        return hide
    else:
        bias = attn_mask

    def add() -> None:
        np.add(scores, bias, out=scores)

    return add


def scaled_dot_product_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                                 attn_mask: np.ndarray | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False, out: np.ndarray,
                                 scratch: np.ndarray | None = None) -> Bound:
    """softmax(query @ key^T * scale + mask) @ value over dims -2/-1, batch dims broadcast;
    rows whose keys are all masked give 0, as torch does."""
    if dropout_p:
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference only)")
    groups = _groups(query, key, enable_gqa)
    ws = Workspace(scratch)
    q = q_copy = ws.take(query.shape, np.float32)
    scores = ws.take(_scores_shape(query, key, groups), np.float32)
    rows = scores.reshape(math.prod(scores.shape[:-1]), scores.shape[-1])
    stat = ws.take((rows.shape[0], 1), np.float32)
    mask = _masking(scores.reshape(*out.shape[:-1], key.shape[-2]), attn_mask, is_causal, ws)
    if groups > 1:  # (..., Hkv, groups * L, E): a group's query heads stacked
        q = q.reshape(*query.shape[:-3], -1, groups * query.shape[-2], query.shape[-1])
    key_t = np.swapaxes(key, -1, -2)
    context = out.reshape(*scores.shape[:-1], out.shape[-1])
    out_rows = out.reshape(-1, out.shape[-1])
    factor = np.float32(1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    ones = np.ones((key.shape[-2], 1), np.float32)  # row sums as one BLAS matrix-vector product

    def run() -> None:
        np.multiply(query, factor, out=q_copy)
        np.matmul(q, key_t, out=scores)
        if mask:
            mask()
        np.maximum.reduce(rows, axis=1, keepdims=True, out=stat, initial=-np.inf)
        np.maximum(stat, _LOWEST, out=stat)  # all -inf rows: exp gives 0, not nan
        np.subtract(rows, stat, out=rows)
        np.exp(rows, out=rows)
        np.matmul(rows, ones, out=stat)
        np.maximum(stat, 1, out=stat)  # sums are >= 1 (the max's term) or 0 (all masked)
        np.matmul(scores, value, out=context)
        np.divide(out_rows, stat, out=out_rows)

    return long_loops(run)


def _scratch(query: np.ndarray, key: np.ndarray, attn_mask: np.ndarray | None = None, *,
             enable_gqa: bool = False, **_: object) -> int:
    """Scaled query, scores, row statistic and a bool mask's negation."""
    scores = _scores_shape(query, key, _groups(query, key, enable_gqa))
    regions = [(query.shape, "float32"), (scores, "float32"), ((math.prod(scores[:-1]), 1),
                                                                "float32")]
    if attn_mask is not None and attn_mask.dtype == np.bool_:
        regions.append((attn_mask.shape, "bool"))
    return workspace_bytes(*regions)


KERNELS: dict[str, Kernel] = {
    "nee::scaled_dot_product_attention.out": Kernel.prepared(scaled_dot_product_attention, FLOAT,
                                                             scratch=_scratch),
}
