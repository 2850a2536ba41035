"""``nee-export --report``: what a CI job checks about an export, as JSON, and its gates.

The report describes the written bundle (read back with the runtime's loader, so it states what
the device gets): arenas per tier against capacity and lower bound, bundle and weight bytes, the
kernel list, delegated partitions with their estimates, int8 accuracy. Gates hold numbers of
the report against limits a CI job sets; a failed gate makes ``nee-export`` exit 4.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runtime_py.format import DELEGATE_CALL
from runtime_py.loader import LoadedBundle, kernel_list, shared_arenas, state_bytes
from toolchain.inspect import delegated_macs

REPORT_VERSION = 1


@dataclass(frozen=True)
class Gate:
    """A limit on one number of the report: ``value`` must be at most (or, for a ``min_``
    gate, at least) ``limit``."""

    name: str  # "max_arena_bytes", "max_weight_bytes", "max_bundle_bytes" or "min_sqnr_db"
    limit: float
    value: float | None = None
    passed: bool | None = None


GATES = {  # gate name -> how to read its value from a report
    "max_arena_bytes": lambda r: sum(a["bytes"] for a in r["arenas"]) + r["state_bytes"],
    "max_weight_bytes": lambda r: r["bundle"]["weight_bytes"],
    "max_bundle_bytes": lambda r: r["bundle"]["bytes"],
    "min_sqnr_db": lambda r: min((q["sqnr_db"] for q in r["quantization"] or []),
                                 default=math.nan),
}


def bundle_report(loaded: LoadedBundle, path: str | Path) -> dict[str, Any]:
    """The report's description of the bundle at ``path``."""
    b = loaded.bundle
    methods = loaded.methods()
    planned = [a for m in methods for a in (m.bundle.plan.arenas if m.bundle.plan else []) or []]
    arenas = [{"tier": tier, "bytes": size,  # the arenas all methods share
               "lower_bound": max(a.lowerBound for a in planned if a.tier == tier),
               "capacity": next(a.capacity for a in planned if a.tier == tier) or None}
              for tier, size in shared_arenas(methods).items()]
    return {
        "model": b.model, "producer": b.producer, "board": b.board or None,
        "bundle": {"path": str(path), "bytes": Path(path).stat().st_size,
                   "weight_bytes": sum(s.size for s in b.segments or [])},
        "arenas": arenas,
        "state_bytes": state_bytes(b),
        "methods": [{"name": m.method_name, "arenas": {a.tier: a.size for a in (
            m.bundle.plan.arenas if m.bundle.plan else []) or []}} for m in methods],
        "kernels": [{"op": op, "dtype": dtype} for op, dtype in kernel_list(loaded)],
        "partitions": _partitions(loaded),
        "quantization": [{"output": a.output, "sqnr_db": a.sqnrDb,
                          "max_abs_error": a.maxAbsError, "samples": a.samples,
                          "held_out": a.heldOut} for a in b.accuracy or []] or None,
    }


def _partitions(loaded: LoadedBundle) -> dict[str, Any]:
    b = loaded.bundle
    cpu = [n for n in b.nodes or [] if n.op != DELEGATE_CALL]
    delegated, total = delegated_macs(loaded)
    return {
        "delegated_calls": sum(len(d.nodes or []) for d in b.delegates or []),
        "cpu_calls": len(cpu), "delegated_macs": delegated, "total_macs": total,
        "cpu_reasons": [{"op": n.op, "source": n.source or None, "reason": n.cpuReason}
                        for n in cpu if n.cpuReason],
        "list": [_partition(d) for d in b.delegates or []],
    }


def _partition(d: Any) -> dict[str, Any]:
    e = d.estimate
    estimate = None if e is None else {
        "cycles": e.cycles, "clock_hz": e.clockHz, "ms": e.cycles / e.clockHz * 1e3,
        "macs": e.macs, "sram_bytes": e.sramBytes, "flash_bytes": e.flashBytes}
    return {"backend": d.backend, "target": d.target, "calls": len(d.nodes or []),
            "cpu_fallback": bool(d.cpuFallback), "estimate": estimate}


def checked(report: dict[str, Any], gates: list[Gate]) -> list[Gate]:
    """``gates`` with their values read from ``report`` and whether each passed (a missing
    value, e.g. an SQNR gate on a float export, fails)."""
    out = []
    for g in gates:
        value = GATES[g.name](report)
        ok = not math.isnan(value) and (value >= g.limit if g.name.startswith("min_")
                                        else value <= g.limit)
        out.append(Gate(g.name, g.limit, None if math.isnan(value) else value, ok))
    return out


def write_report(path: str | Path, status: str, exit_code: int, seconds: float,
                 body: dict[str, Any] | None = None, gates: list[Gate] = (),
                 error: str | None = None) -> None:
    """Write the JSON report: the outcome, the export time, the bundle's description (when a
    bundle was written) and the gates."""
    report = {"report_version": REPORT_VERSION, "status": status, "exit_code": exit_code,
              "error": error, "export_seconds": round(seconds, 3), **(body or {}),
              "gates": [asdict(g) for g in gates]}
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
