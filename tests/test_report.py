"""``nee-export`` in CI: the JSON report, the gates and the exit statuses (0 exported, 2 usage,
3 unsupported model, 4 over budget or a failed gate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime_py.cli import main as run_main
from runtime_py.loader import kernel_list, load_bundle
from toolchain.cli import ByteSize, export_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _export(tmp_path: Path, *args: str, target: str = f"{EXAMPLES}/cnn.py:Model"):
    report = tmp_path / "report.json"
    done = CliRunner().invoke(export_main, [target, "-o", str(tmp_path / "m.nee"), "--report",
                                            str(report), *args])
    return done, (json.loads(report.read_text()) if report.exists() else None)


def test_report_describes_the_bundle_and_passing_gates_exit_0(tmp_path):
    done, report = _export(tmp_path, "--max-arena", "1MiB", "--max-bundle", "100000")
    assert done.exit_code == 0, done.output
    loaded = load_bundle(tmp_path / "m.nee")
    assert report["status"] == "ok" and report["exit_code"] == 0 and report["error"] is None
    assert report["bundle"]["bytes"] == (tmp_path / "m.nee").stat().st_size
    assert report["bundle"]["weight_bytes"] == sum(s.size for s in loaded.bundle.segments)
    (arena,) = report["arenas"]
    assert arena["bytes"] == loaded.bundle.plan.arenas[0].size == arena["lower_bound"]
    assert [(k["op"], k["dtype"]) for k in report["kernels"]] == kernel_list(loaded)
    assert report["quantization"] is None and report["export_seconds"] > 0
    assert [(g["name"], g["value"], g["passed"]) for g in report["gates"]] == [
        ("max_arena_bytes", arena["bytes"], True),
        ("max_bundle_bytes", report["bundle"]["bytes"], True)]
    assert f"gate max_arena_bytes: {arena['bytes']} <= 1048576: ok" in done.output


def test_a_failed_gate_exits_4_and_still_writes_the_bundle(tmp_path):
    done, report = _export(tmp_path, "--max-arena", "100KiB")
    assert done.exit_code == 4, done.output
    gate = report["gates"][0]
    assert f"max_arena_bytes {gate['value']} (limit 102400)" in done.output
    assert gate["value"] == report["arenas"][0]["bytes"] > 102400
    assert report["status"] == "over budget" and gate["passed"] is False
    assert (tmp_path / "m.nee").exists()


def test_a_board_too_small_exits_4_with_the_error_in_the_report(tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text('name = "tiny"\n[[memory]]\nname = "sram"\nsize = 4096\n')
    done, report = _export(tmp_path, "--board", str(recipe))
    assert done.exit_code == 4, done.output
    assert report["status"] == "over budget" and "memory plan for board tiny" in report["error"]
    assert "bundle" not in report


def test_an_unsupported_model_exits_3(tmp_path):
    source = tmp_path / "fft.py"
    source.write_text("import torch\nclass Model(torch.nn.Module):\n"
                      "    def forward(self, x):\n        return torch.fft.rfft(x).abs()\n"
                      "def example_inputs():\n    return (torch.zeros(8),)\n")
    done, report = _export(tmp_path, target=f"{source}:Model")
    assert done.exit_code == 3, done.output
    assert report["status"] == "unsupported model" and "fft" in report["error"]


def test_quantized_export_reports_sqnr_and_partitions_and_gates_it(tmp_path):
    done, report = _export(tmp_path, "--quantize", "int8", "--board", "corstone-300-ethos-u55",
                           "--min-sqnr", "20")
    assert done.exit_code == 0, done.output
    (q,) = report["quantization"]
    assert q["sqnr_db"] > 20 and q["held_out"] and report["gates"][0]["value"] == q["sqnr_db"]
    parts = report["partitions"]
    assert parts["delegated_macs"] == parts["total_macs"] > 0
    (partition,) = parts["list"]
    assert partition["target"] == "ethos-u55-128" and partition["estimate"]["cycles"] > 0
    done, report = _export(tmp_path, "--quantize", "int8", "--min-sqnr", "200")
    assert done.exit_code == 4 and "min_sqnr_db" in done.output


@pytest.mark.parametrize(("args", "message"), [
    (["--min-sqnr", "30"], "--min-sqnr gates an int8 export"),
    (["--max-arena", "12 parsecs"], "is not a byte count like 4096, 512KiB or 8MiB"),
    (["--format", "tflite"], "--report, --bundle-io and the gates need --format nee"),
])
def test_usage_errors_exit_2(tmp_path, args, message):
    done, _ = _export(tmp_path, *args)
    assert done.exit_code == 2 and message in done.output


@pytest.mark.parametrize(("text", "count"), [("4096", 4096), ("512KiB", 524288),
                                             ("8 MiB", 8 << 20), ("100kB", 100_000)])
def test_byte_sizes(text, count):
    assert ByteSize().convert(text, None, None) == count


def test_bundle_io_from_the_command_line_verifies_on_the_runtime(tmp_path):
    done = CliRunner().invoke(export_main, [f"{EXAMPLES}/mlp.py:Model", "-o",
                                            str(tmp_path / "m.nee"), "--bundle-io"])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(run_main, [str(tmp_path / "m.nee"), "--verify"])
    assert done.exit_code == 0 and "within tolerance" in done.output
