"""Pass: write each state tensor's new value (a buffer the model updates, e.g. a KV cache)
back into the state.

Rewrites: the trailing graph outputs named in ``Graph.state_updates`` are the states' new
    values. When a new value is made by an in-place-safe kernel (``Kernel.inplace``) reading
    the whole state tensor, and nothing reads the state after that call (nor is an output a
    view of it), the call's output becomes a whole view of the state: the call updates it in
    place (a KV cache's index_put writes its new rows only, and no second cache is planned).
    Otherwise a ``copy`` at the end of the program writes the value into the state, after a
    ``clone`` of any output that views the old state. The update outputs are then dropped.
Requires: "out_variant"; runs after every pass that adds, removes or reorders nodes except
    reuse_inputs (an in-place update must see the final readers).
Ensures: "state_written": no pending state update; each state write is a whole view of it.
"""

from __future__ import annotations

from runtime_py.kernels import KERNELS
from toolchain.ir import Graph, Node, Ref, Tensor, contiguous_strides, node_inputs
from toolchain.passes.reuse_inputs import alias_output

COPY, CLONE = "aten::copy.out", "aten::clone.out"


def write_state(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    values, count = graph.state_values(), len(graph.state_updates)
    graph.outputs = graph.outputs[:len(graph.outputs) - count]
    graph.output_names = graph.output_names[:len(graph.output_names) - count]
    producers = graph.producers()
    for state, value in zip(graph.state_updates, values, strict=True):
        node = producers.get(value)
        if node is not None and _in_place(graph, node, state):
            alias_output(graph, value, state)
        else:
            _copy_back(graph, state, value)
    graph.state_updates = []
    graph.ensured.add("state_written")
    return graph


def _in_place(graph: Graph, node: Node, state: str) -> bool:
    """``node`` may write its single output over ``state``: its kernel allows it, it reads the
    whole state through one argument and no later node reads the state."""
    kernel = KERNELS.get(node.op)
    out = graph.tensors[node.outputs[0]]
    if kernel is None or not kernel.inplace or len(node.outputs) != 1 or out.view_of:
        return False
    reads = [n for n in node_inputs(node) if graph.storage_of(n) == state]
    step = graph.nodes.index(node)
    later = any(graph.storage_of(n) == state for later in graph.nodes[step + 1:]
                for n in node_inputs(later))
    whole = len(reads) == 1 and graph.tensors[reads[0]].is_contiguous and \
        graph.tensors[reads[0]].offset == 0 and graph.tensors[reads[0]].shape == out.shape
    shown = any(graph.storage_of(o) == state for o in graph.outputs)
    return whole and not later and not shown and out.dtype == graph.tensors[state].dtype


def _copy_back(graph: Graph, state: str, value: str) -> None:
    """Append ``copy(state, value)`` writing a whole view of the state, after a clone of each
    output viewing the old state (the copy would overwrite it)."""
    for k, name in enumerate(graph.outputs):
        if graph.storage_of(name) == state:
            kept = f"{name}:kept"
            graph.tensors[kept] = Tensor(kept, graph.tensors[name].shape,
                                         graph.tensors[name].dtype, "activation")
            graph.nodes.append(Node(CLONE, {"self": Ref(name), "out": Ref(kept)}, [kept],
                                    source=f"output {name} before the update of state {state}",
                                    out_names=["out"]))
            graph.outputs[k] = kept
    t = graph.tensors[state]
    name = f"{state}:written"
    graph.tensors[name] = Tensor(name, t.shape, t.dtype, "activation", view_of=state,
                                 strides=contiguous_strides(t.shape))
    graph.nodes.append(Node(COPY, {"self": Ref(state), "src": Ref(value), "out": Ref(name)},
                            [name], source=f"update of state {state}", out_names=["out"]))
