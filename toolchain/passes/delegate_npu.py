"""Pass: move the calls the board's NPU can run into compiled partitions (delegates).

Rewrites: nothing without ``Graph.npu`` (a board with an NPU). With it, every call the NPU does
    not take gets ``cpu_reason`` (the constraint it failed); the others are clustered into runs
    without cycles, each compiled by the NPU's compiler (toolchain/delegates/ethos_u) and
    replaced by one ``nee::delegate_call`` node whose ``Graph.delegates`` entry keeps the run as
    its reference program, its internal tensors in a workspace of their own.
Requires: "scratch_planned" (the reference program's workspace holds its kernels' scratch).
Ensures: "delegated": every call left in ``Graph.nodes`` that is not a delegate call carries
    its reason when an NPU is set.
"""

from __future__ import annotations

from toolchain.ir import Graph


def delegate_npu(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if graph.npu is not None:
        from toolchain.delegates.ethos_u import delegate

        graph = delegate(graph)
    graph.ensured.add("delegated")
    return graph
