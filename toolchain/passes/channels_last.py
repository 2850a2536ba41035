"""Pass: store the feature maps around depthwise convolutions channels-last.

Rewrites: feature maps joined by elementwise ops (ELEMENTWISE: same-shaped operands and out)
    form groups; a group whose maps are float32 (N, C, H, W) activations of at least
    MIN_POSITIONS positions per image, each written by a convolution or an elementwise op and
    read only by convolutions (as their input), elementwise ops and means over H and W, where
    every convolution is depthwise (undilated) or ungrouped and one at least depthwise, has each
    map become a whole view of a new root ``<name>:nhwc`` of shape (N, H, W, C), with that
    layout's strides. The kernels see the layout in the strides: a depthwise convolution then
    runs its channels-last ``einsum`` with no transposing copy in or out, the products of the
    others read or write (positions, channels) matrices (``runtime_py.kernels.nn``), and
    elementwise kernels run over the (N, H, W, C) views. The layout is a choice the runtime may
    decline (it then binds the map row-major over the same bytes, ``loader.layout_views``, where
    its BLAS loses in those orientations), so the scratch of the calls touched is sized again
    for the larger of the two layouts' needs (``add_scratch.size_scratch``).
Requires: "scratch_planned"; runs after the delegate passes (it sees the CPU's calls only) and
    before write_state and reuse_inputs. Not in a symbolic export (one program for all sizes).
Ensures: nothing later passes rely on.
"""

from __future__ import annotations

from toolchain.ir import (
    SCRATCH_ARG,
    Graph,
    Node,
    Tensor,
    contiguous_strides,
    node_inputs,
    refs,
)
from toolchain.passes.add_scratch import size_scratch
from toolchain.passes.fuse_activation import ACTIVATIONS

# Feature maps of fewer positions per image stay channels-first: there a product writing a
# (positions, channels) matrix is slower than one writing (channels, positions) (1 thread,
# 3 x 3 positions, mobilenet_v2's 1x1 layers: 1.08-1.4x its time; 36 positions and more:
# 0.9-1.06x), and such maps' depthwise layers are small. Whole models (Haswell kernels, 4
# rounds of 30 pairs), 16 against 9 (3 x 3 maps too): mobilenet_v2 0.988, mobilenet_v3_small
# 0.982, efficientnet_b0 0.984; against 64 (no 6 x 6 maps): 0.994, 0.986, 0.979.
MIN_POSITIONS = 16

CONVOLUTIONS = frozenset({"aten::convolution.out", "nee::convolution_act.out"})
ELEMENTWISE = ACTIVATIONS | {f"aten::{op}.{overload}" for op in ("add", "sub", "mul", "div")
                             for overload in ("out", "Scalar_out")}
MEANS = frozenset({"aten::mean.out"})  # read a map: over H and W only


def channels_last(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if not graph.static_shapes:  # one program for every size: no layout chosen for one
        return graph
    producers, readers = graph.producers(), graph.readers()
    viewed = {t.view_of for t in graph.tensors.values()}
    touched: dict[int, Node] = {}
    for group in _groups(graph):
        nodes = {id(n): n for name in group
                 for n in [producers.get(name), *readers.get(name, [])] if n is not None}
        if all(_candidate(graph, graph.tensors[n], viewed) and n in producers for n in group) \
                and _eligible(graph, group, list(nodes.values())):
            for name in group:
                _store_channels_last(graph, graph.tensors[name])
            touched.update(nodes)
    for node in touched.values():  # enough for either layout: the runtime picks one
        old = node.args.get(SCRATCH_ARG)
        size_scratch(graph, node, graph.tensors[old.name].nbytes if old else 0)
    return graph


def _groups(graph: Graph) -> list[list[str]]:
    """The 4-D tensors, grouped by the elementwise ops joining same-shaped ones (a group with
    an input, constant or state among them stays as it is)."""
    parent: dict[str, str] = {n: n for n, t in graph.tensors.items() if len(t.shape) == 4}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for node in graph.nodes:
        if node.op in ELEMENTWISE and node.outputs[0] in parent:
            shape = graph.tensors[node.outputs[0]].shape
            for name in node_inputs(node):
                if graph.tensors[name].shape == shape:
                    parent[root(name)] = root(node.outputs[0])
    groups: dict[str, list[str]] = {}
    for name in parent:
        groups.setdefault(root(name), []).append(name)
    return list(groups.values())


def _eligible(graph: Graph, group: list[str], nodes: list[Node]) -> bool:
    """Every node touching the group's maps takes the layout, one of them a depthwise
    convolution."""
    members = set(group)
    kinds = [_role(graph, node, members) for node in nodes]
    return None not in kinds and "depthwise" in kinds


def _candidate(graph: Graph, t: Tensor, viewed: set[str | None]) -> bool:
    """A float32 4-D activation owning its storage, no view of it, not a graph output, of at
    least MIN_POSITIONS positions per image."""
    return (t.kind == "activation" and t.dtype == "float32" and t.view_of is None
            and t.name not in viewed and t.name not in graph.outputs
            and t.shape[2] * t.shape[3] >= MIN_POSITIONS)


def _role(graph: Graph, node: Node, members: set[str]) -> str | None:
    """How ``node`` takes the group's maps: "depthwise", "dense" (an ungrouped convolution),
    "elementwise" or "mean"; None where it cannot (another op, a map as a convolution's
    weight, a dilated or grouped convolution, a mean over other dims)."""
    touching = {k for k, v in node.args.items() for n in refs(v) if n in members}
    if node.op in ELEMENTWISE:
        return "elementwise"
    if node.op in MEANS:
        dims = {d % 4 for d in _values(node.args.get("dim")) if isinstance(d, int)}
        return "mean" if touching == {"self"} and dims == {2, 3} else None
    if node.op not in CONVOLUTIONS or not touching <= {"input", "out"}:
        return None
    return _convolution_kind(graph, node)


def _convolution_kind(graph: Graph, node: Node) -> str | None:
    """"depthwise" (undilated along W: the channels-last einsum's condition), "dense"
    (ungrouped) or None: not a 2-D convolution, transposed, grouped, or dilated depthwise."""
    x, out = (graph.tensors[node.args[k].name] for k in ("input", "out"))
    groups, dilation = node.args.get("groups", 1), node.args.get("dilation", (1,))
    if len(x.shape) != 4 or node.args.get("transposed"):
        return None
    if groups == 1:
        return "dense"
    undilated = all(d == 1 for d in _values(dilation))
    return "depthwise" if groups == x.shape[1] == out.shape[1] and undilated else None


def _values(value: object) -> tuple:
    """An int-list argument as a tuple (one value as a tuple of one)."""
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def _store_channels_last(graph: Graph, t: Tensor) -> None:
    """Make ``t`` a whole (N, H, W, C)-ordered view of a new root."""
    n, c, h, w = t.shape
    root = Tensor(f"{t.name}:nhwc", (n, h, w, c), t.dtype, t.kind, tier=t.tier)
    graph.tensors[root.name] = root
    s_n, s_h, s_w, s_c = contiguous_strides(root.shape)
    t.view_of, t.strides, t.offset = root.name, (s_n, s_c, s_h, s_w), 0
