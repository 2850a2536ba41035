"""Pass: fold inference batch norm into the convolution that feeds it.

Rewrites: ``convolution(x, W, b)`` -> ``_native_batch_norm_legit_no_training(., gamma, beta, mean,
    var, eps)`` becomes one ``convolution(x, W', b')`` with ``W' = W * s``, ``b' = (b - mean) * s
    + beta``, ``s = gamma / sqrt(var + eps)`` per output channel, computed in float64 at export.
    Readers of the batch norm's output read the convolution's instead; new constants are added
    (shared weights are never modified in place).
Requires: captured graph (functional ops); conv weight, bias and all BN parameters constant; the
    conv output read only by the BN; the BN's saved-statistics outputs unused.
Ensures: no batch norm directly after a foldable convolution remains.
"""

from __future__ import annotations

import numpy as np

from toolchain.ir import Graph, Node, Ref, Tensor

CONV = "aten::convolution.default"
BATCH_NORM = "aten::_native_batch_norm_legit_no_training.default"


def fold_batchnorm(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    readers, producer = graph.readers(), graph.producers()
    folded: set[int] = set()
    for bn in graph.nodes:
        conv = producer.get(bn.args["input"].name) if bn.op == BATCH_NORM else None
        if conv is not None and _foldable(graph, conv, bn, readers):
            _fold(graph, conv, bn)
            readers[conv.outputs[0]] = readers.get(bn.outputs[0], [])  # conv now feeds those
            folded.add(id(bn))
    graph.nodes = [n for n in graph.nodes if id(n) not in folded]
    return graph


def _const(graph: Graph, value: object) -> np.ndarray | None:
    if value is None:
        return None
    t = graph.tensors[value.name] if isinstance(value, Ref) else None
    return t.data if t is not None and t.kind == "const" and t.view_of is None else None


def _foldable(graph: Graph, conv: Node, bn: Node, readers: dict[str, list[Node]]) -> bool:
    params = [bn.args.get(k) for k in ("weight", "bias", "running_mean", "running_var")]
    return (
        conv.op == CONV
        and not conv.args.get("transposed", False)
        and readers.get(conv.outputs[0]) == [bn] and conv.outputs[0] not in graph.outputs
        and not any(readers.get(o) or o in graph.outputs for o in bn.outputs[1:])
        and _const(graph, conv.args["weight"]) is not None
        and (conv.args.get("bias") is None or _const(graph, conv.args["bias"]) is not None)
        and all(p is None or _const(graph, p) is not None for p in params)
    )


def _fold(graph: Graph, conv: Node, bn: Node) -> None:
    weight = _const(graph, conv.args["weight"]).astype(np.float64)
    c_out = weight.shape[0]
    gamma, beta, mean, var = (
        _const(graph, bn.args.get(k)) if bn.args.get(k) is not None else default
        for k, default in (("weight", np.ones(c_out)), ("bias", np.zeros(c_out)),
                           ("running_mean", np.zeros(c_out)), ("running_var", np.ones(c_out)))
    )
    bias = _const(graph, conv.args.get("bias"))
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + bn.args["eps"])
    new_w = weight * scale.reshape(-1, *([1] * (weight.ndim - 1)))
    new_b = ((bias if bias is not None else 0.0) - mean) * scale + beta
    dtype = graph.tensors[conv.outputs[0]].dtype
    stem = conv.args["weight"].name.removesuffix("_weight")
    conv.args["weight"] = _new_const(graph, f"{stem}_weight_bn_folded", new_w.astype(dtype))
    conv.args["bias"] = _new_const(graph, f"{stem}_bias_bn_folded", new_b.astype(dtype))
    for name in bn.outputs[1:]:
        del graph.tensors[name]
    del graph.tensors[bn.outputs[0]]
    graph.rename(bn.outputs[0], conv.outputs[0])


def _new_const(graph: Graph, name: str, data: np.ndarray) -> Ref:
    graph.tensors[name] = Tensor(name, data.shape, str(data.dtype), "const",
                                 np.ascontiguousarray(data))
    return Ref(name)
