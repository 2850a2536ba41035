"""Pass: store the feature maps around depthwise convolutions channels-last.

Rewrites: a float32 (N, C, H, W) activation of at least MIN_POSITIONS positions per image that
    a convolution writes and only convolutions read (as their input), each of them depthwise
    (undilated) or ungrouped, at least one depthwise, becomes a whole view of a new root
    ``<name>:nhwc`` of shape (N, H, W, C), with that layout's strides. The kernels see the
    layout in the strides: a depthwise convolution then runs its channels-last ``einsum`` with
    no transposing copy in or out, and the products of the others read or write (positions,
    channels) matrices (``runtime_py.kernels.nn``). The layout is a choice the runtime may
    decline (it then binds the map row-major over the same bytes, ``loader.layout_views``, where
    its BLAS loses in those orientations), so the scratch of the calls touched is sized again
    for the larger of the two layouts' needs (``add_scratch.size_scratch``).
Requires: "scratch_planned"; runs after the delegate passes (it sees the CPU's calls only) and
    before write_state and reuse_inputs. Not in a symbolic export (one program for all sizes).
Ensures: nothing later passes rely on.
"""

from __future__ import annotations

from toolchain.ir import SCRATCH_ARG, Graph, Node, Ref, Tensor, contiguous_strides, refs
from toolchain.passes.add_scratch import size_scratch

# Feature maps of fewer positions per image stay channels-first: there a product writing a
# (positions, channels) matrix is slower than one writing (channels, positions) (1 thread,
# 3 x 3 positions, mobilenet_v2's 1x1 layers: 1.08-1.4x its time; 36 positions and more:
# 0.9-1.06x), and such maps' depthwise layers are small.
MIN_POSITIONS = 16

CONVOLUTIONS = ("aten::convolution.out", "nee::convolution_act.out")


def channels_last(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if not graph.static_shapes:  # one program for every size: no layout chosen for one
        return graph
    producers, readers = graph.producers(), graph.readers()
    viewed = {t.view_of for t in graph.tensors.values()}
    touched: dict[int, Node] = {}
    for name in [n for n, t in graph.tensors.items() if _candidate(graph, t, viewed)]:
        nodes = [producers.get(name), *readers.get(name, [])]
        if _eligible(graph, name, nodes):
            _store_channels_last(graph, graph.tensors[name])
            touched.update((id(node), node) for node in nodes)
    for node in touched.values():  # enough for either layout: the runtime picks one
        old = node.args.get(SCRATCH_ARG)
        size_scratch(graph, node, graph.tensors[old.name].nbytes if old else 0)
    return graph


def _candidate(graph: Graph, t: Tensor, viewed: set[str | None]) -> bool:
    """A float32 4-D activation owning its storage, no view of it, not a graph output."""
    return (t.kind == "activation" and t.dtype == "float32" and len(t.shape) == 4
            and t.view_of is None and t.name not in viewed and t.name not in graph.outputs
            and t.shape[2] * t.shape[3] >= MIN_POSITIONS)


def _eligible(graph: Graph, name: str, nodes: list[Node | None]) -> bool:
    """Written by a convolution into out, read by convolutions as their input only, each
    depthwise or ungrouped, one at least depthwise."""
    producer, *readers = nodes
    if producer is None or not readers or producer.args.get("out") != Ref(name):
        return False
    if any([k for k, v in r.args.items() if name in refs(v)] != ["input"] for r in readers):
        return False
    kinds = [_kind(graph, node) for node in nodes]
    return None not in kinds and "depthwise" in kinds


def _kind(graph: Graph, node: Node) -> str | None:
    """"depthwise" (undilated along W: the channels-last einsum's condition), "dense"
    (ungrouped) or None: not a 2-D convolution, grouped, or dilated depthwise."""
    if node.op not in CONVOLUTIONS or node.args.get("transposed"):
        return None
    x, out = (graph.tensors[node.args[k].name] for k in ("input", "out"))
    groups, dilation = node.args.get("groups", 1), node.args.get("dilation", (1,))
    if len(x.shape) != 4:
        return None
    if groups == 1:
        return "dense"
    undilated = all(d == 1 for d in (dilation if isinstance(dilation, list | tuple)
                                     else (dilation,)))
    return "depthwise" if groups == x.shape[1] == out.shape[1] and undilated else None


def _store_channels_last(graph: Graph, t: Tensor) -> None:
    """Make ``t`` a whole (N, H, W, C)-ordered view of a new root."""
    n, c, h, w = t.shape
    root = Tensor(f"{t.name}:nhwc", (n, h, w, c), t.dtype, t.kind, tier=t.tier)
    graph.tensors[root.name] = root
    s_n, s_h, s_w, s_c = contiguous_strides(root.shape)
    t.view_of, t.strides, t.offset = root.name, (s_n, s_c, s_h, s_w), 0
