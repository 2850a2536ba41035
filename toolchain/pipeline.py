"""The export pipeline: capture -> passes -> plan -> kernel list -> serialize.

``PASSES`` is the one literal, ordered list of graph passes. Ordering notes:
- fill_from_shape first: the calls it rewrites read their input for its shape only; cutting
  that false dependence lets fold_constants evaluate them.
- fold_batchnorm first: it matches functional conv -> batch_norm pairs on constant weights.
- fold_qdq before alias_views: it matches dequantize -> op -> quantize on functional ops and
  turns views between int8 values into views of the int8 tensors, which alias_views then
  aliases.
- batch_steps before alias_views: it rewrites functional selects and products, whose
  reshape/view/select alias_views then aliases.
- alias_views next: view ops have no kernels; later passes only see compute ops and aliases.
- to_out_variant after alias_views: view ops have no out overloads.
- fold_constants after to_out_variant: it evaluates calls with the runtime's out kernels.
- fuse_activation after fold_constants: folded producers are gone, so fusion sees real ones.
- fuse_rnn_cells after fold_constants (a first step's folded projection is final) and before
  add_scratch (its kernels have workspaces).
- drop_unused_outputs after fold_constants (a folded call's outputs are gone) and before
  add_scratch (the workspace is sized for the single-output kernel).
- npu_tables before add_scratch (the calls it writes need workspaces too) and after
  fold_constants (its constants are final).
- add_scratch after fusion: the workspace is sized for the final (fused) kernels.
- delegate_npu after add_scratch (a partition's reference program keeps its kernels' scratch)
  and before reuse_inputs (it reorders nodes and replaces runs of them by one call).
- delegate_cpu after delegate_npu (the CPU delegate takes what the NPU left), for the same
  reasons before reuse_inputs.
- channels_last after the delegate passes (it lays out the CPU's feature maps only; their
  tensors stay row-major for the delegates' writers) and after add_scratch (it sizes the
  scratch of the calls it touches again), before write_state and reuse_inputs (reuse_inputs
  aliases only row-major storage).
- write_state after every pass that changes the node list (an in-place state update needs the
  final readers) and before reuse_inputs (whose liveness must not see the update outputs).
- reuse_inputs after every pass that changes the node list: it reads final lifetimes.
- check_supported last: it checks the final kernel names against the runtime registry.
"""

from __future__ import annotations

from collections.abc import Callable

from toolchain.ir import Graph
from toolchain.passes.add_scratch import add_scratch
from toolchain.passes.alias_views import alias_views
from toolchain.passes.batch_steps import batch_steps
from toolchain.passes.channels_last import channels_last
from toolchain.passes.check_supported import check_supported
from toolchain.passes.delegate_cpu import delegate_cpu
from toolchain.passes.delegate_npu import delegate_npu
from toolchain.passes.drop_unused_outputs import drop_unused_outputs
from toolchain.passes.fill_from_shape import fill_from_shape
from toolchain.passes.fold_batchnorm import fold_batchnorm
from toolchain.passes.fold_constants import fold_constants
from toolchain.passes.fold_qdq import fold_qdq
from toolchain.passes.fuse_activation import fuse_activation
from toolchain.passes.fuse_rnn_cells import fuse_rnn_cells
from toolchain.passes.npu_tables import npu_tables
from toolchain.passes.reuse_inputs import reuse_inputs
from toolchain.passes.to_out_variant import to_out_variant
from toolchain.passes.write_state import write_state
from toolchain.verify import verify

Pass = Callable[[Graph], Graph]

PASSES: list[Pass] = [
    fill_from_shape,
    fold_batchnorm,
    fold_qdq,
    batch_steps,
    alias_views,
    to_out_variant,
    fold_constants,
    fuse_activation,
    fuse_rnn_cells,
    drop_unused_outputs,
    npu_tables,
    add_scratch,
    delegate_npu,
    delegate_cpu,
    channels_last,
    write_state,
    reuse_inputs,
    check_supported,
]


def run_passes(graph: Graph, *, verify_each: bool = True) -> Graph:
    """Run PASSES in order, verifying the graph after each one when ``verify_each``."""
    if verify_each:
        verify(graph, after="capture")
    for p in PASSES:
        graph = p(graph)
        if verify_each:
            verify(graph, after=p.__name__)
    return graph
