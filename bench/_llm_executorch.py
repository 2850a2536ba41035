"""ExecuTorch side of bench/llm.py: run by a python whose venv has executorch (not the project's).

Usage (normally through ``bench/llm.py --executorch``):
    /tmp/et-venv/bin/python bench/_llm_executorch.py --example examples/llama.py \
        --prompt 1,2,3 --new-tokens 64 --repeats 5 --threads 1

Exports the example's model twice with static shapes, a ``prefill`` method (L = the prompt's
length) and a ``decode`` method (L = 1), lowers both with the XNNPACK partitioner
(``to_edge_transform_and_lower``) and ``to_executorch`` with the KV cache buffers kept as
mutable state shared by the two methods (``MemoryPlanningPass(share_mutable_buffers=True)``).
Then times greedy decoding (prefill once, then one ``decode`` call per token) against torch
eager's same loop on the model's own cache, alternately, in this process. Prints one JSON line
(the last line of stdout); on failure {"error": reason}. Imports only torch and executorch (the
example is loaded by path), so the project's own packages need not be installed there.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import time
import traceback


def load_example(path: str):
    spec = importlib.util.spec_from_file_location("llama_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lower(mod, model, prompt_len: int):
    """The ExecuTorch program (its bytes) with methods prefill and decode sharing the cache,
    and a summary of what stayed outside the XNNPACK delegate."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    start = torch.tensor([0])
    programs = {"prefill": torch.export.export(model, (torch.zeros(1, prompt_len,
                                                                   dtype=torch.int64), start)),
                "decode": torch.export.export(model, (torch.zeros(1, 1, dtype=torch.int64),
                                                      start))}
    mod.reset(model)  # export ran forward: the eager cache is not zero any more
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
    outside: dict[str, int] = {}
    delegated = 0
    for node in edge.exported_program("decode").graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(getattr(node.target, "__name__", node.target))
        if "executorch_call_delegate" in name:
            delegated += 1
        elif name != "getitem":
            outside[name] = outside.get(name, 0) + 1
    et_program = edge.to_executorch(ExecutorchBackendConfig(
        emit_mutable_buffer_names=True,
        memory_planning_pass=MemoryPlanningPass(alloc_mutable_buffers=True,
                                                share_mutable_buffers=True)))
    return et_program.buffer, {"delegate_calls": delegated, "ops_outside_delegate": outside}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", required=True)
    parser.add_argument("--prompt", required=True, help="token ids, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    try:
        print(json.dumps(measure(args)))
    except Exception as e:  # the parent prints the reason
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))


def measure(args: argparse.Namespace) -> dict:
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    torch.set_num_threads(args.threads)
    _unsafe_reset_threadpool(args.threads)  # ExecuTorch's own pool (XNNPACK): all cores else
    prompt = [int(t) for t in args.prompt.split(",")]
    n = args.new_tokens
    mod = load_example(args.example)
    model = mod.Model()
    start = time.perf_counter()
    buffer, delegation = lower(mod, model, len(prompt))
    export_s = time.perf_counter() - start
    # load_program does not keep the bytes alive: ``buffer`` is held until the end of measure.
    program = Runtime.get().load_program(buffer)
    prefill, decode = program.load_method("prefill"), program.load_method("decode")
    prompt_t, zero = torch.tensor([prompt]), torch.tensor([0])

    def et_run() -> tuple[list[int], float, float]:
        # No reset: the prefill rewrites positions 0..L-1 and the mask hides later ones
        # until a decode step overwrites them (the same reasoning as NEE's padded buckets).
        t0 = time.perf_counter()
        token = int(prefill.execute([prompt_t, zero])[0][0, -1].argmax())
        prefill_s = time.perf_counter() - t0
        ids, pos = [token], len(prompt)
        t0 = time.perf_counter()
        while len(ids) < n:
            out = decode.execute([torch.tensor([[token]]), torch.tensor([pos])])[0]
            token = int(out[0, -1].argmax())
            ids.append(token)
            pos += 1
        return ids, prefill_s, (n - 1) / (time.perf_counter() - t0)

    def eager_run() -> tuple[list[int], float, float]:
        with torch.no_grad():
            mod.reset(model)
            t0 = time.perf_counter()
            token = int(model(prompt_t, zero)[0, -1].argmax())
            prefill_s = time.perf_counter() - t0
            ids, pos = [token], len(prompt)
            t0 = time.perf_counter()
            while len(ids) < n:
                token = int(model(torch.tensor([[token]]), torch.tensor([pos]))[0, -1].argmax())
                ids.append(token)
                pos += 1
            return ids, prefill_s, (n - 1) / (time.perf_counter() - t0)

    et_run(), eager_run()  # warm-up
    et, eager = [], []
    for i in range(args.repeats):
        for fn, out in (((et_run, et), (eager_run, eager)) if i % 2 == 0
                        else ((eager_run, eager), (et_run, et))):
            out.append(fn())
    reference = mod.eager_generate(model, prompt, n)
    mismatched = [i for i, (ids, _, _) in enumerate(et) if ids != reference]
    return {
        "executorch_version": importlib.metadata.version("executorch"),
        "torch_version": torch.__version__,
        "export_s": export_s,
        "methods": sorted(program.method_names),
        "prefill_note": f"method 'prefill' static L={len(prompt)} (the prompt's length), "
                        f"decode method static L=1, KV cache shared as mutable state",
        "delegation": delegation,
        "et_tps": [r[2] for r in et],
        "eager_tps": [r[2] for r in eager],
        "ratios": [a[2] / b[2] for a, b in zip(et, eager, strict=True)],
        "et_prefill_ms": [r[1] * 1e3 for r in et],
        "eager_prefill_ms": [r[1] * 1e3 for r in eager],
        "ids": et[-1][0] if not mismatched else et[mismatched[0]][0],
        "mismatched_runs": mismatched,
        "eager_same": all(ids == reference for ids, _, _ in eager),
    }


if __name__ == "__main__":
    main()
