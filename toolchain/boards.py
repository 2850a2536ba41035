"""Board recipes (boards/*.toml): memory tiers, flash, NPU configuration and supported dtypes.

The shipped recipes install as the package ``toolchain.recipes`` and are found by name; a
user's own recipe is given by path. A recipe is checked as a whole: one ExportError lists every
problem, each naming its key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from runtime_py.format import DTYPES
from toolchain.errors import ExportError
from toolchain.memory_plan.types import Tier

RECIPES = resources.files("toolchain.recipes")

# ethos-u-vela 5.2.0's accelerators (`vela --help`) and the section names of its shipped
# Arm/vela.ini, written out so that recipes load without Vela installed
# (tests/test_board_recipes.py checks them against the installed Vela).
VELA_TARGETS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                "ethos-u65-256", "ethos-u65-512", "ethos-u85-128", "ethos-u85-256",
                "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")
VELA_SYSTEM_CONFIGS = ("Ethos_U55_Deep_Embedded", "Ethos_U55_High_End_Embedded",
                       "Ethos_U65_Embedded", "Ethos_U65_Mid_End", "Ethos_U65_High_End",
                       "Ethos_U65_Client_Server", "Ethos_U85_SYS_Flash_Low",
                       "Ethos_U85_SYS_Flash_High", "Ethos_U85_SYS_DRAM_Low",
                       "Ethos_U85_SYS_DRAM_Mid", "Ethos_U85_SYS_DRAM_High")
VELA_MEMORY_MODES = ("Sram_Only", "Shared_Sram", "Dedicated_Sram", "Dedicated_Sram_256KB",
                     "Dedicated_Sram_384KB", "Dedicated_Sram_512KB")
# The system configs wiring AXI1 to DRAM (the others wire it to flash) and the memory modes
# placing the arena on AXI1: Vela rejects an arena in flash, so those modes need those configs.
VELA_DRAM_AXI1_CONFIGS = ("Ethos_U65_Mid_End", "Ethos_U65_High_End", "Ethos_U65_Client_Server",
                          "Ethos_U85_SYS_DRAM_Low", "Ethos_U85_SYS_DRAM_Mid",
                          "Ethos_U85_SYS_DRAM_High")
VELA_AXI1_ARENA_MODES = ("Dedicated_Sram", "Dedicated_Sram_256KB", "Dedicated_Sram_384KB",
                         "Dedicated_Sram_512KB")

_TOP_KEYS = ("name", "description", "dtypes", "scratch_limit", "memory", "flash", "npu")
_MEMORY_KEYS = ("name", "size")
_NPU_KEYS = ("target", "system_config", "memory_mode", "clock_mhz")
_MISSING = object()


@dataclass(frozen=True)
class Npu:
    """An Arm Ethos-U NPU as Vela compiles for it."""

    target: str  # Vela --accelerator-config, e.g. "ethos-u55-128"
    system_config: str  # a [System_Config.<name>] of Vela's shipped Arm/vela.ini
    memory_mode: str  # a [Memory_Mode.<name>] of Vela's shipped Arm/vela.ini
    clock_hz: int  # the NPU clock on this board: estimated time = Vela's cycles / clock_hz
    sram_tier: str = "sram"  # the board's fastest tier, where the NPU's SRAM use goes
    dram_tier: str = "dram"  # its slowest, for the NPU's arena in Dedicated_Sram modes


@dataclass(frozen=True)
class Board:
    """A board recipe: tiers fastest first; ``npu`` is None for a board without an NPU."""

    name: str
    description: str
    tiers: tuple[Tier, ...]
    npu: Npu | None
    dtypes: tuple[str, ...]
    scratch_limit: int | None = None  # max workspace bytes a kernel call may ask for
    flash: int | None = None  # bytes of flash holding the bundle's weights; None: they share
    # the slowest memory tier with the activations placed there (a Linux board's DRAM)


def available_boards() -> list[str]:
    """Names of the shipped recipes."""
    return sorted(p.name.removesuffix(".toml") for p in RECIPES.iterdir()
                  if p.name.endswith(".toml"))


def load_board(name_or_path: str) -> Board:
    """A shipped recipe by name, or a recipe .toml by path."""
    source = _source(name_or_path)
    try:
        with source.open("rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ExportError(f"board recipe {source}", "TOML with [[memory]] entries (name, size)",
                          f"{type(e).__name__}: {e}", "see boards/*.toml for examples") from e
    reader = _Reader()
    board = reader.board(raw, Path(name_or_path).stem)
    if reader.problems:
        raise _recipe_error(source, reader.problems)
    if board.npu is None:
        return board
    npu = dataclasses.replace(board.npu, sram_tier=board.tiers[0].name,
                              dram_tier=board.tiers[-1].name)
    return dataclasses.replace(board, npu=npu)


def _source(name_or_path: str) -> Traversable:
    path = Path(name_or_path)
    if path.suffix:
        if not path.is_file():
            raise ExportError(f"board recipe {name_or_path!r}", "an existing .toml file",
                              "no such file", f"or name a shipped board: {available_boards()}")
        return path
    source = RECIPES / f"{name_or_path}.toml"
    if not source.is_file():
        raise _unknown_board(name_or_path)
    return source


def _unknown_board(name: str) -> ExportError:
    known = available_boards()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ExportError(f"board {name!r}", f"one of {known} or a path to a recipe .toml",
                       "no such recipe", f"{hint}a recipe of your own is given by its path")


@dataclass(frozen=True)
class _Problem:
    key: str
    expected: str
    found: str
    hint: str = ""

    def line(self) -> str:
        text = f"key {self.key}: expected {self.expected}, found {self.found}"
        return f"{text}; {self.hint}" if self.hint else text


def _recipe_error(source: Traversable, problems: list[_Problem]) -> ExportError:
    if len(problems) == 1:
        (p,) = problems
        return ExportError(f"board recipe {source}: key {p.key}", p.expected, p.found, p.hint)
    lines = "".join(f"\n  {p.line()}" for p in problems)
    return ExportError(f"board recipe {source}", "a valid recipe",
                       f"{len(problems)} problems:{lines}")


def _did_you_mean(found: Any, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(found, options, n=1) if isinstance(found, str) else []
    return f"did you mean {close[0]!r}?" if close else ""


def _is_text(v: Any) -> bool:
    return isinstance(v, str)


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _is_positive_int(v: Any) -> bool:
    return type(v) is int and v > 0


def _is_clock(v: Any) -> bool:
    """A finite number of MHz that is at least 1 Hz."""
    return type(v) in (int, float) and math.isfinite(v * 1e6) and round(v * 1e6) > 0


class _Reader:
    """Reads one parsed recipe, noting every problem instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[_Problem] = []

    def note(self, key: str, expected: str, found: str, hint: str = "") -> None:
        self.problems.append(_Problem(key, expected, found, hint))

    def board(self, raw: dict[str, Any], default_name: str) -> Board:
        self.keys(raw, _TOP_KEYS, "")
        name = self.get(raw, "name", "", _is_name, "a non-empty string", default_name)
        description = self.get(raw, "description", "", _is_text, "a string", "")
        dtypes = self.dtypes(raw.get("dtypes", ["float32"]))
        limit = self.get(raw, "scratch_limit", "", _is_positive_int, "a positive integer (bytes)",
                         None)
        tiers = self.tiers(raw.get("memory"))
        flash = self.flash(raw["flash"]) if "flash" in raw else None
        npu = self.npu(raw["npu"], dtypes) if "npu" in raw else None
        return Board(name, description, tiers, npu, dtypes, limit, flash)

    def keys(self, table: dict[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
        for key in table:
            if key not in allowed:
                self.note(prefix + key, f"one of the keys {list(allowed)}", "an unknown key",
                          _did_you_mean(key, allowed))

    def get(self, table: dict[str, Any], key: str, prefix: str, check: Callable[[Any], bool],
            expected: str, default: Any = _MISSING) -> Any:
        """``table[key]`` if ``check`` passes; else notes the problem and returns None."""
        if key not in table:
            if default is _MISSING:
                self.note(prefix + key, expected, "nothing")
                return None
            return default
        if not check(table[key]):
            self.note(prefix + key, expected, repr(table[key]))
            return None
        return table[key]

    def choice(self, table: dict[str, Any], key: str, options: tuple[str, ...]) -> str | None:
        """``table[key]`` if it is one of ``options``; else notes the problem and the closest."""
        value = table.get(key, _MISSING)
        if value in options:
            return value
        self.note(f"npu.{key}", f"one of {list(options)}",
                  "nothing" if value is _MISSING else repr(value), _did_you_mean(value, options))
        return None

    def dtypes(self, value: Any) -> tuple[str, ...]:
        if not (isinstance(value, list) and value):
            self.note("dtypes", f"a non-empty list of dtype names from {list(DTYPES)}",
                      repr(value))
            return ()
        for i, dtype in enumerate(value):
            if not (isinstance(dtype, str) and dtype in DTYPES):
                self.note(f"dtypes[{i}]", f"a dtype name from {list(DTYPES)}", repr(dtype),
                          _did_you_mean(dtype, DTYPES))
        return tuple(d for d in value if isinstance(d, str) and d in DTYPES)

    def tiers(self, entries: Any) -> tuple[Tier, ...]:
        if not (isinstance(entries, list) and entries
                and all(isinstance(e, dict) for e in entries)):
            self.note("memory", "a non-empty list of [[memory]] tables (name, size)",
                      "nothing" if entries is None else repr(entries))
            return ()
        tiers = tuple(self.tier(entry, f"memory[{i}].") for i, entry in enumerate(entries))
        read = tuple(t for t in tiers if t is not None)
        twice = [name for name, n in Counter(t.name for t in read).items() if n > 1]
        if twice:
            self.note("memory", "[[memory]] tiers with distinct names", f"{twice} more than once")
        return read

    def tier(self, entry: dict[str, Any], prefix: str) -> Tier | None:
        self.keys(entry, _MEMORY_KEYS, prefix)
        name = self.get(entry, "name", prefix, _is_name, "a non-empty string")
        size = self.get(entry, "size", prefix, _is_positive_int, "a positive integer (bytes)")
        return None if name is None or size is None else Tier(name, size)

    def flash(self, table: Any) -> int | None:
        if not isinstance(table, dict):
            self.note("flash", "a table with the key 'size'", repr(table))
            return None
        self.keys(table, ("size",), "flash.")
        return self.get(table, "size", "flash.", _is_positive_int, "a positive integer (bytes)")

    def npu(self, table: Any, dtypes: tuple[str, ...]) -> Npu | None:
        if not isinstance(table, dict):
            self.note("npu", f"a table with the keys {list(_NPU_KEYS)}", repr(table))
            return None
        self.keys(table, _NPU_KEYS, "npu.")
        if dtypes and "int8" not in dtypes:
            self.note("dtypes", "a list with 'int8' on a board with an [npu]", repr(list(dtypes)),
                      "the NPU runs int8 programs")
        target = self.choice(table, "target", VELA_TARGETS)
        system = self.choice(table, "system_config", VELA_SYSTEM_CONFIGS)
        mode = self.choice(table, "memory_mode", VELA_MEMORY_MODES)
        mhz = self.get(table, "clock_mhz", "npu.", _is_clock, "a positive number (MHz)")
        if target and system:
            self.family(target, system)
        if system and mode:
            self.axi1(system, mode)
        if None in (target, system, mode, mhz):
            return None
        return Npu(target, system, mode, round(mhz * 1e6))

    def family(self, target: str, system: str) -> None:
        """Vela's system configs are per NPU family: Ethos_U55_* for ethos-u55-*, and so on."""
        prefix = "Ethos_" + target.split("-")[1].upper() + "_"
        if not system.startswith(prefix):
            fitting = tuple(c for c in VELA_SYSTEM_CONFIGS if c.startswith(prefix))
            self.note("npu.system_config", f"a system config for {target}: one of "
                      f"{list(fitting)}", repr(system), _did_you_mean(system, fitting))

    def axi1(self, system: str, mode: str) -> None:
        if mode in VELA_AXI1_ARENA_MODES and system not in VELA_DRAM_AXI1_CONFIGS:
            self.note("npu.memory_mode", f"Sram_Only or Shared_Sram with {system}", repr(mode),
                      f"{mode} keeps the arena on AXI1, which {system} wires to flash; "
                      "Dedicated_Sram modes need a DRAM system config")
