"""Board recipes as a checked format: every shipped recipe has a CPU and threads, NPU recipes
carry a valid Npu, every problem of a recipe is named by its key in one error, and the Vela
names boards.py writes out match the installed Vela."""

from __future__ import annotations

import configparser
from importlib import resources

import pytest

from toolchain.boards import (
    CPU_ARCHITECTURES,
    VELA_AXI1_ARENA_MODES,
    VELA_DRAM_AXI1_CONFIGS,
    VELA_MEMORY_MODES,
    VELA_SYSTEM_CONFIGS,
    VELA_TARGETS,
    Cpu,
    Npu,
    available_boards,
    load_board,
)
from toolchain.errors import ExportError

NPU_BOARDS = {"cortex-m55-ethos-u55", "corstone-300-ethos-u55", "corstone-320-ethos-u85",
              "imx93-ethos-u65"}

VALID = """\
name = "npu-board"
dtypes = ["int8"]

[[memory]]
name = "sram"
size = 4096

[npu]
target = "ethos-u55-128"
system_config = "Ethos_U55_High_End_Embedded"
memory_mode = "Shared_Sram"
clock_mhz = 500
"""


def _load(tmp_path, text: str):
    path = tmp_path / "x.toml"
    path.write_text(text)
    return load_board(str(path))


def _fails(tmp_path, text: str) -> str:
    with pytest.raises(ExportError) as e:
        _load(tmp_path, text)
    return str(e.value)


@pytest.mark.parametrize("name", available_boards())
def test_shipped_recipes_have_an_npu_exactly_when_named_for_one(name):
    board = load_board(name)
    assert (board.npu is not None) == (name in NPU_BOARDS)
    if board.npu is not None:
        assert isinstance(board.npu, Npu) and board.npu.target in VELA_TARGETS
        family = board.npu.target.split("-")[1].upper()
        assert board.npu.system_config.startswith(f"Ethos_{family}_")
        assert board.npu.memory_mode in VELA_MEMORY_MODES and board.npu.clock_hz > 0
        assert "int8" in board.dtypes and [t.name for t in board.tiers] == ["sram", "dram"]


def test_a_valid_recipe_loads_with_the_clock_in_hz(tmp_path):
    board = _load(tmp_path, VALID.replace("clock_mhz = 500", "clock_mhz = 487.5"))
    assert board.npu == Npu("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram",
                            487_500_000, sram_tier="sram", dram_tier="sram")  # the only tier
    assert _load(tmp_path, VALID.split("[npu]")[0]).npu is None


@pytest.mark.parametrize(("text", "key", "hint"), [
    (VALID.replace('dtypes =', 'dtype = ["int8"]\ndtypes ='), "dtype", "did you mean 'dtypes'"),
    (VALID.replace("size = 4096", "size = 4096\nszie = 1"), "memory[0].szie",
     "did you mean 'size'"),
    (VALID.replace("clock_mhz", "clock_mhz = 1\nclock"), "npu.clock", "did you mean 'clock_mhz'"),
])
def test_an_unknown_key_is_named_with_the_closest_known_one(tmp_path, text, key, hint):
    message = _fails(tmp_path, text)
    assert f"x.toml: key {key}: expected one of the keys" in message
    assert "found an unknown key" in message and hint in message


def test_a_bad_target_lists_vela_targets_and_the_closest(tmp_path):
    message = _fails(tmp_path, VALID.replace('"ethos-u55-128"', '"ethos-u55-100"'))
    assert "key npu.target: expected one of ['ethos-u55-32'," in message
    assert "found 'ethos-u55-100'. Hint: did you mean 'ethos-u55-" in message


def test_every_problem_of_a_recipe_is_listed_in_one_error(tmp_path):
    text = (VALID.replace('name = "npu-board"', 'name = ""\ncolour = "red"')
            .replace('dtypes = ["int8"]', 'dtypes = ["int8", "int4"]')
            .replace("size = 4096", "size = 0")
            .replace('"Shared_Sram"', '"Shared_SRAM"')
            .replace("clock_mhz = 500", "clock_mhz = -1"))
    message = _fails(tmp_path, text)
    lines = [
        "key colour: expected one of the keys",
        "key name: expected a non-empty string, found ''",
        "key dtypes[1]: expected a dtype name from",
        "key memory[0].size: expected a positive integer (bytes), found 0",
        "key npu.memory_mode: expected one of ['Sram_Only',",
        "found 'Shared_SRAM'; did you mean 'Shared_Sram'?",
        "key npu.clock_mhz: expected a positive number (MHz), found -1",
    ]
    assert "expected a valid recipe, found 6 problems:" in message
    assert all(line in message for line in lines), message
    assert len(message.splitlines()) == 7


def test_missing_npu_keys_memory_and_duplicate_tiers_are_named(tmp_path):
    text = VALID.replace('clock_mhz = 500\n', "") + '[[memory]]\nname = "sram"\nsize = 8\n'
    message = _fails(tmp_path, text)
    assert "key npu.clock_mhz: expected a positive number (MHz), found nothing" in message
    assert "key memory: expected [[memory]] tiers with distinct names" in message
    message = _fails(tmp_path, 'name = "empty"\n')
    assert "key memory: expected a non-empty list of [[memory]] tables" in message


def test_system_config_must_match_the_target_family(tmp_path):
    message = _fails(tmp_path, VALID.replace('"ethos-u55-128"', '"ethos-u85-256"'))
    assert "key npu.system_config: expected a system config for ethos-u85-256: one of " \
           "['Ethos_U85_SYS_Flash_Low'," in message
    assert "found 'Ethos_U55_High_End_Embedded'" in message


def test_dedicated_sram_needs_dram_on_axi1(tmp_path):
    message = _fails(tmp_path, VALID.replace('"Shared_Sram"', '"Dedicated_Sram"'))
    assert "key npu.memory_mode: expected Sram_Only or Shared_Sram with " \
           "Ethos_U55_High_End_Embedded, found 'Dedicated_Sram'" in message


def test_an_npu_board_must_run_int8(tmp_path):
    message = _fails(tmp_path, VALID.replace('dtypes = ["int8"]', 'dtypes = ["float32"]'))
    assert "key dtypes: expected a list with 'int8' on a board with an [npu]" in message


def test_vela_names_match_the_installed_vela():
    pytest.importorskip("ethosu")
    from ethosu.vela.architecture_features import Accelerator

    ini = configparser.ConfigParser()
    ini.read_string((resources.files("ethosu") / "config_files/Arm/vela.ini").read_text())
    sections = {kind: [s.split(".", 1)[1] for s in ini.sections() if s.startswith(kind + ".")]
                for kind in ("System_Config", "Memory_Mode")}
    assert list(VELA_TARGETS) == [a.value for a in Accelerator]
    assert list(VELA_SYSTEM_CONFIGS) == sections["System_Config"]
    assert list(VELA_MEMORY_MODES) == sections["Memory_Mode"]
    dram = [c for c in VELA_SYSTEM_CONFIGS if ini[f"System_Config.{c}"]["axi1_port"] == "Dram"]
    assert list(VELA_DRAM_AXI1_CONFIGS) == dram
    axi1 = [m for m in VELA_MEMORY_MODES if _mode_value(ini, m, "arena_mem_area") == "Axi1"]
    assert list(VELA_AXI1_ARENA_MODES) == axi1


def _mode_value(ini: configparser.ConfigParser, mode: str, key: str) -> str:
    """A memory mode's setting, following Vela's ``inherit=`` between sections."""
    section = ini[f"Memory_Mode.{mode}"]
    if key in section:
        return section[key]
    return _mode_value(ini, section["inherit"].split(".", 1)[1], key)


def test_flash_is_a_checked_table(tmp_path):
    assert _load(tmp_path, VALID + "[flash]\nsize = 4194304\n").flash == 4194304
    assert _load(tmp_path, VALID).flash is None
    text = _fails(tmp_path, VALID + "[flash]\nszie = 1\n")
    assert "flash.szie" in text and "did you mean 'size'" in text and "flash.size" in text
    assert "flash.size: expected a positive integer (bytes), found 0" in _fails(
        tmp_path, VALID + "[flash]\nsize = 0\n")


# Boards whose weights live in a flash of their own; the others hold them in DRAM beside the
# activations (Linux boards, and the Corstone FVPs, which use DDR as their flash).
FLASH_BOARDS = {"cortex-m55-ethos-u55", "esp32-s3"}


@pytest.mark.parametrize("name", available_boards())
def test_shipped_recipes_have_a_cpu_threads_and_flash_where_the_weights_live(name):
    board = load_board(name)
    assert isinstance(board.cpu, Cpu) and board.cpu.architecture in CPU_ARCHITECTURES
    assert board.cpu.cores > 0 and board.cpu.clock_hz >= 1_000_000
    assert board.threads is not None and 1 <= board.threads <= board.cpu.cores
    assert (board.flash is not None) == (name in FLASH_BOARDS)


@pytest.mark.parametrize("name", available_boards())
def test_shipped_recipes_note_their_sources(name):
    """Each recipe's comments say where its numbers come from, or that they are assumed."""
    text = (resources.files("toolchain.recipes") / f"{name}.toml").read_text()
    comments = " ".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "[cpu]" in text and "assumed" in comments.lower()


def test_a_cpu_and_threads_load_and_may_be_left_out(tmp_path):
    board = _load(tmp_path, 'threads = 2\n' + VALID
                  + '[cpu]\narchitecture = "cortex-m55"\ncores = 2\nclock_mhz = 487.5\n')
    assert board.cpu == Cpu("cortex-m55", 2, 487_500_000) and board.threads == 2
    board = _load(tmp_path, VALID)
    assert board.cpu is None and board.threads is None
    assert _load(tmp_path, "threads = 3\n" + VALID).threads == 3  # no [cpu] to hold it against


def test_every_cpu_problem_is_listed_in_one_error(tmp_path):
    text = ("threads = 0\n" + VALID
            + '[cpu]\narchitecture = "Cortex-A76"\ncores = 0\nclock_mhz = "fast"\nclok = 1\n')
    message = _fails(tmp_path, text)
    lines = [
        "key threads: expected a positive integer, found 0",
        "key cpu.clok: expected one of the keys ['architecture', 'cores', 'clock_mhz'], found an "
        "unknown key; did you mean 'clock_mhz'?",
        "key cpu.architecture: expected one of ['cortex-m4',",
        "found 'Cortex-A76'; did you mean 'cortex-a76'?",
        "key cpu.cores: expected a positive integer, found 0",
        "key cpu.clock_mhz: expected a positive number (MHz), found 'fast'",
    ]
    assert "expected a valid recipe, found 5 problems:" in message
    assert all(line in message for line in lines), message


def test_threads_beyond_the_cores_are_named_beside_other_cpu_problems(tmp_path):
    text = ("threads = 4\n" + VALID
            + '[cpu]\narchitecture = "cortex-m5"\ncores = 2\nclock_mhz = 400\n')
    message = _fails(tmp_path, text)
    assert "found 2 problems:" in message
    assert "key cpu.architecture: expected one of" in message and "found 'cortex-m5'" in message
    assert "key threads: expected a positive integer at most cpu.cores (2), found 4; one " \
           "thread per core at most" in message


def test_cpu_must_be_a_table(tmp_path):
    message = _fails(tmp_path, VALID.replace('name = "npu-board"',
                                             'name = "npu-board"\ncpu = "cortex-m55"'))
    assert "key cpu: expected a table with the keys ['architecture', 'cores', 'clock_mhz'], " \
           "found 'cortex-m55'" in message
