"""Attention as one kernel: ``torch.nn.functional.scaled_dot_product_attention`` in eval.

softmax(q @ k^T * scale + mask) @ v with the query scaled into scratch, the scores in scratch and
two BLAS matmuls per call. Under grouped-query attention (or a single key/value head) the
query heads sharing a key/value head are one (group * L, E) matrix of the scaled query copy, so
one matmul per key/value head serves the whole group: K/V are never repeated. The softmax
normalises after the value matmul (one divide per output element, not per score).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime_py.kernels import Bound, Kernel, linalg, long_loops, rules
from runtime_py.kernels._common import FLOAT, ONE, Workspace, f32, workspace_bytes

_LOWEST = f32(np.finfo(np.float32).min)


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


def causal_bias(length: int, source: int) -> np.ndarray:
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
        bias = causal_bias(*scores.shape[-2:])
    elif attn_mask is None:
        return None
    elif attn_mask.dtype == np.bool_:
        masked = ws.take(attn_mask.shape, np.bool_)

        def hide() -> None:
            np.logical_not(attn_mask, masked)
            np.copyto(scores, -np.inf, where=masked)

        return hide
    else:
        bias = attn_mask

    def add() -> None:
        np.add(scores, bias, scores)

    return add


def scaled_dot_product_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                                 attn_mask: np.ndarray | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False, out: np.ndarray,
                                 scratch: np.ndarray | None = None) -> Bound:
    """softmax(query @ key^T * scale + mask) @ value over dims -2/-1, batch dims broadcast;
    rows whose keys are all masked give 0, as torch does (so does every row without keys)."""
    if not key.shape[-2]:
        return functools.partial(out.fill, 0)
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
    factor = f32(1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    ones = np.ones((key.shape[-2], 1), np.float32)  # row sums as one BLAS matrix-vector product
    similarities, sums, weighted = (linalg.product(q, key_t, scores),
                                    linalg.product(rows, ones, stat),
                                    linalg.product(scores, value, context))

    def run() -> None:
        np.multiply(query, factor, q_copy)
        similarities()
        if mask:
            mask()
        np.maximum.reduce(rows, axis=1, keepdims=True, out=stat, initial=-np.inf)
        np.maximum(stat, _LOWEST, out=stat)  # all -inf rows: exp gives 0, not nan
        np.subtract(rows, stat, rows)
        np.exp(rows, rows)
        sums()
        np.maximum(stat, ONE, out=stat)  # sums are >= 1 (the max's term) or 0 (all masked)
        weighted()
        np.divide(out_rows, stat, out_rows)

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


def _heads(shape: tuple[int, ...], groups: int) -> tuple[int, ...]:
    """Key/value batch dims with the heads (dim -3) repeated ``groups`` times, as under GQA."""
    return (*shape[:-1], shape[-1] * groups) if groups > 1 and shape else shape


def _check(query: np.ndarray, key: np.ndarray, value: np.ndarray,
           attn_mask: np.ndarray | None = None, dropout_p: float = 0.0, is_causal: bool = False,
           *, scale: float | None = None, enable_gqa: bool = False, out: np.ndarray,
           **_: object) -> None:
    """query (..., L, E), key (..., S, E), value (..., S, Ev) of one float dtype give (..., L,
    Ev), batch dims broadcasting (key/value heads repeated under GQA); a bool or float mask
    broadcasts to (..., L, S); no dropout; not both a mask and is_causal. Without keys (S = 0)
    torch gives zeros of the queries' shape, whatever E and the keys' batch dims."""
    inputs = {"query": rules.tensor(query, "query"), "key": rules.tensor(key, "key"),
              "value": rules.tensor(value, "value"), "attn_mask": attn_mask}
    if (query.dtype != rules.FLOAT32 or key.dtype != query.dtype or value.dtype != query.dtype
            or min(query.ndim, key.ndim, value.ndim) < 2 or key.shape[-2] != value.shape[-2]
            or (query.shape[-1] != key.shape[-1] and key.shape[-2])):
        rules.refuse(inputs, "not float32 (..., L, E), (..., S, E), (..., S, Ev)")
    if rules.number(dropout_p, "dropout_p"):
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference only)")
    if scale is not None:
        rules.number(scale, "scale")
    if not key.shape[-2]:  # torch: zeros of the queries' shape, whatever the keys' batch
        rules.expect(out, (*query.shape[:-1], value.shape[-1]), query.dtype, inputs)
        return
    groups = _groups(query, key, enable_gqa)
    try:
        lead = np.broadcast_shapes(query.shape[:-2], _heads(key.shape[:-2], groups),
                                   _heads(value.shape[:-2], groups))
    except ValueError:
        rules.refuse(inputs, "batch dims that do not broadcast")
    if attn_mask is not None:
        if is_causal:
            raise ValueError("attn_mask and is_causal cannot both be set")
        rules.tensor(attn_mask, "attn_mask", frozenset({rules.BOOL, query.dtype}))
        if not rules.broadcasts_to(attn_mask.shape, (*lead, query.shape[-2], key.shape[-2])):
            rules.refuse(inputs, "a mask not broadcasting to (..., L, S)")
    rules.expect(out, (*lead, query.shape[-2], value.shape[-1]), query.dtype, inputs)
    if not rules.broadcasts_to(value.shape[:-2], _scores_shape(query, key, groups)[:-2]):
        raise NotImplementedError("values broadcasting beyond the queries' and keys' batch")


KERNELS: dict[str, Kernel] = {
    "nee::scaled_dot_product_attention.out": Kernel.prepared(scaled_dot_product_attention, FLOAT,
                                                             scratch=_scratch, check=_check),
}
