"""Graph verifier: structural invariants plus every property a pass has recorded as ensured.

Runs after every pass (``toolchain.pipeline.run_passes(verify_each=True)``, the default).
"""

from __future__ import annotations

import math

import numpy as np

from runtime_py.format import DELEGATE_CALL
from toolchain.ir import Graph, Node, Ref, Tensor, node_inputs, refs
from toolchain.passes.alias_views import VIEW_RULES


class VerifyError(AssertionError):
    """A pass broke a graph invariant; the message names the pass, tensor or node."""


def verify(graph: Graph, after: str = "") -> None:
    """Raise VerifyError listing the broken invariants (the first 20)."""
    problems = list(_problems(graph))
    if problems:
        where = f" after pass {after}" if after else ""
        raise VerifyError(f"graph invalid{where}:\n  " + "\n  ".join(problems[:20]))


def _problems(graph: Graph):
    yield from _tensor_problems(graph)
    defined = {n for n, t in graph.tensors.items() if t.kind in ("input", "const", "state")}
    for i, node in enumerate(graph.nodes):
        unknown = [n for v in node.args.values() for n in refs(v) if n not in graph.tensors]
        unknown += [n for n in node.outputs if n not in graph.tensors]
        if unknown:
            yield f"node {i} {node.op} names unknown tensors {unknown}"
            continue
        for name in node_inputs(node):
            if graph.storage_of(name) not in defined:
                yield f"node {i} {node.op} reads {name} before it is written"
        yield from _node_problems(graph, i, node)
        for out in node.outputs:
            if out in defined:
                yield f"node {i} {node.op} writes {out}, which is already defined"
            defined.update((out, graph.storage_of(out)))
    for name in graph.outputs:
        if graph.storage_of(name) not in defined:
            yield f"graph output {name} is never written"
    yield from _delegate_problems(graph)
    names = graph.output_names
    if names and (len(names) != len(graph.outputs) or len(set(names)) != len(names)):
        yield f"output names {names} are not one distinct name per output {graph.outputs}"


def _delegate_problems(graph: Graph):
    """Each delegate call matches its delegate, whose reference program reads only the
    call's inputs, constants and its own earlier results, and writes the call's outputs."""
    calls = [n for n in graph.nodes if n.op == DELEGATE_CALL]
    if [n.args["delegate"] for n in calls] != list(range(len(graph.delegates))):
        yield f"delegate calls {[n.args['delegate'] for n in calls]} do not call each of the " \
              f"{len(graph.delegates)} delegates once, in order"
        return
    for call, d in zip(calls, graph.delegates, strict=True):
        where = f"delegate {call.args['delegate']} ({d.backend})"
        if [r.name for r in call.args["inputs"]] != d.inputs or call.outputs != d.outputs:
            yield f"{where}: call arguments differ from the delegate's inputs/outputs"
        known = {graph.storage_of(n) for n in d.inputs}
        for node in d.nodes:
            for name in node_inputs(node):
                if graph.storage_of(name) not in known and not graph.is_const(name):
                    yield f"{where}: {node.op} reads {name}, not an input or earlier result"
            known.update(graph.storage_of(o) for o in node.outputs)
        missing = [o for o in d.outputs if o not in known]
        if missing:
            yield f"{where}: outputs {missing} are not written by its reference program"


def _tensor_problems(graph: Graph):
    for name, t in graph.tensors.items():
        if t.kind == "const" and (t.data is None or t.data.shape != t.shape
                                  or t.data.dtype != np.dtype(t.dtype)):
            yield f"const {name} has no data matching {t.shape} {t.dtype}"
        if t.view_of is not None:
            yield from _view_problems(graph, t)


def _view_problems(graph: Graph, t: Tensor):
    root = graph.tensors.get(t.view_of)
    if root is None or root.view_of is not None:
        yield f"view {t.name} must point at a root storage, points at {t.view_of}"
        return
    if t.strides is None or len(t.strides) != len(t.shape):
        yield f"view {t.name} has strides {t.strides} for shape {t.shape}"
        return
    last = t.offset + sum((s - 1) * st for s, st in zip(t.shape, t.strides, strict=True))
    if math.prod(t.shape) and not (t.offset >= 0 and last < math.prod(root.shape)):
        yield f"view {t.name} reaches elements [{t.offset}, {last}] outside {root.name}"


def _node_problems(graph: Graph, i: int, node: Node):
    where = f"node {i} {node.op}"
    if "views_aliased" in graph.ensured and node.op in VIEW_RULES:
        yield f"{where}: view op left after views_aliased"
    if "out_variant" in graph.ensured and node.out_names:
        bound = [node.args.get(k) for k in node.out_names]
        if bound != [Ref(o) for o in node.outputs]:
            yield f"{where}: out args {bound} do not match outputs {node.outputs}"
    read = {graph.storage_of(n) for n in node_inputs(node)}
    for out in node.outputs:
        t = graph.tensors[out]
        if t.view_of is not None and not (t.view_of in read and t.is_contiguous
                                          and t.offset == 0) and not graph.is_layout(out):
            yield f"{where}: output {out} is a view but neither a whole in-place input nor " \
                "its own storage in another dim order"
    if "supported" in graph.ensured and not node.out_names:
        yield f"{where}: not an out-variant call after check_supported"
