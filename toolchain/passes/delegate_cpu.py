"""Pass: move the calls the board's CPU delegate can run into partitions (delegates).

Rewrites: nothing without ``Graph.cpu_delegate``. With ``"xnnpack"``, every call left on the CPU
that TFLite can express is clustered into runs, each written as .tflite
(toolchain/delegates/xnnpack) and replaced by one ``nee::delegate_call`` node whose
``Graph.delegates`` entry keeps the run as its reference program; the calls it cannot take get
``cpu_reason``.
Requires: "scratch_planned" (the reference program's workspace holds its kernels' scratch).
Ensures: "cpu_delegated": with a CPU delegate, every call left in ``Graph.nodes`` that is not a
    delegate call carries its reason.
"""

from __future__ import annotations

from toolchain.ir import Graph


def delegate_cpu(graph: Graph) -> Graph:
    """Apply the rewrite described in the module docstring."""
    if graph.cpu_delegate == "xnnpack":
        from toolchain.delegates.xnnpack import delegate

        graph = delegate(graph)
    graph.ensured.add("cpu_delegated")
    return graph
