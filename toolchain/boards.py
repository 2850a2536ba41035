"""Board recipes (boards/*.toml): CPU, threads, memory tiers, flash, NPU configuration and
supported dtypes.

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

# The CPU cores a recipe may name: Arm's product names, lower case, and Espressif's Xtensa LX7.
# A closed list so that a typo is an error with the closest name, not a new architecture.
CPU_ARCHITECTURES = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "cortex-m85",
                     "cortex-a53", "cortex-a55", "cortex-a72", "cortex-a76", "xtensa-lx7",
                     "x86-64")

CPU_DELEGATES = ("xnnpack",)  # toolchain/delegates/<name>: CPU delegates a recipe may ask for
_TOP_KEYS = ("name", "description", "dtypes", "scratch_limit", "threads", "cpu_delegate", "cpu",
             "memory",
             "flash", "npu")
_CPU_KEYS = ("architecture", "cores", "clock_mhz")
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
class Cpu:
    """The board's application CPU: the cores that run NEE's kernels."""

    architecture: str  # one of CPU_ARCHITECTURES, e.g. "cortex-a76"
    cores: int
    clock_hz: int  # the recipe's clock_mhz in Hz


@dataclass(frozen=True)
class Board:
    """A board recipe: tiers fastest first; ``npu`` is None for a board without an NPU, ``cpu``
    and ``threads`` None when the recipe does not give them (every shipped recipe has a cpu)."""

    name: str
    description: str
    tiers: tuple[Tier, ...]
    npu: Npu | None
    dtypes: tuple[str, ...]
    scratch_limit: int | None = None  # max workspace bytes a kernel call may ask for
    flash: int | None = None  # bytes of flash holding the bundle's weights; None: they share
    # the slowest memory tier with the activations placed there (a Linux board's DRAM)
    cpu: Cpu | None = None
    threads: int | None = None  # how many threads the runtime should use here; at most cores
    cpu_delegate: str | None = None  # a CPU delegate (CPU_DELEGATES) the CPU calls go to


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


def recipe_source(name_or_path: str) -> str:
    """Where the recipe ``load_board(name_or_path)`` reads is: a shipped file or the path."""
    return str(_source(name_or_path))


def size_text(n: int) -> str:
    """Bytes in the largest binary unit that holds them exactly: 393216 -> '384 KiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def clock_text(hz: int) -> str:
    mhz = hz / 1e6
    return f"{mhz / 1000:g} GHz" if mhz >= 1000 else f"{mhz:g} MHz"


def board_row(board: Board) -> tuple[str, ...]:
    """One recipe as ``nee-boards`` lists it: name, CPU, tiers, flash, NPU, dtypes."""
    cpu = (f"{board.cpu.architecture} {board.cpu.cores}x{clock_text(board.cpu.clock_hz)}"
           if board.cpu else "-")
    tiers = ", ".join(f"{t.name} {size_text(t.capacity)}" for t in board.tiers)
    flash = size_text(board.flash) if board.flash is not None else "-"
    npu = board.npu.target if board.npu else "-"
    return board.name, cpu, tiers, flash, npu, ", ".join(board.dtypes)


def board_table(boards: list[Board]) -> str:
    """The rows of ``boards`` under a header, in aligned columns."""
    rows = [("board", "cpu (cores x clock)", "memory (fastest first)", "flash", "npu",
             "dtypes"), *(board_row(b) for b in boards)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def describe_board(board: Board, source: str = "") -> str:
    """Every field of a recipe, one per line."""
    def both(n: int) -> str:
        return f"{size_text(n)} ({n} B)"

    cpu = board.cpu
    width = max(len(t.name) for t in board.tiers) if board.tiers else 0
    tiers = [f"{t.name.ljust(width)}  {both(t.capacity)}" for t in board.tiers]
    lines = [
        ("source", source),
        ("description", board.description or "-"),
        ("cpu", f"{cpu.architecture}, {cpu.cores} core{'s' if cpu.cores > 1 else ''} at "
                f"{clock_text(cpu.clock_hz)}" if cpu else "- (not given)"),
        ("threads", str(board.threads) if board.threads is not None else "- (not given)"),
        ("cpu_delegate", board.cpu_delegate or "- (the numpy kernels)"),
        ("memory", tiers[0] if tiers else "-"),
        *(("", tier) for tier in tiers[1:]),
        ("flash", both(board.flash) if board.flash is not None else
         f"- (the weights share the {board.tiers[-1].name} tier with the activations)"
         if board.tiers else "-"),
        ("scratch_limit", both(board.scratch_limit) if board.scratch_limit is not None
         else "- (none)"),
    ]
    npu = board.npu
    if npu is None:
        lines.append(("npu", "-"))
    else:
        lines += [("npu", npu.target), ("", f"system_config {npu.system_config}"),
                  ("", f"memory_mode {npu.memory_mode}"),
                  ("", f"clock {clock_text(npu.clock_hz)}"),
                  ("", f"SRAM use in {npu.sram_tier}, DRAM use in {npu.dram_tier}")]
    lines.append(("dtypes", ", ".join(board.dtypes)))
    key_width = max(len(key) for key, _ in lines)
    body = [f"  {key.ljust(key_width)}  {value}".rstrip() for key, value in lines
            if key != "source" or value]
    return "\n".join([f"board {board.name}", *body])


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
    """The closest of ``options`` to ``found``, ignoring case ('Cortex-A76' -> 'cortex-a76')."""
    if not isinstance(found, str):
        return ""
    by_lower = {o.lower(): o for o in options}
    close = difflib.get_close_matches(found.lower(), by_lower, n=1)
    return f"did you mean {by_lower[close[0]]!r}?" if close else ""


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
        cpu = self.cpu(raw["cpu"]) if "cpu" in raw else None
        threads = self.threads(raw)
        tiers = self.tiers(raw.get("memory"))
        flash = self.flash(raw["flash"]) if "flash" in raw else None
        npu = self.npu(raw["npu"], dtypes) if "npu" in raw else None
        delegate = self.get(raw, "cpu_delegate", "", lambda v: v in CPU_DELEGATES,
                            f"one of {list(CPU_DELEGATES)}", None)
        return Board(name, description, tiers, npu, dtypes, limit, flash, cpu, threads, delegate)

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

    def choice(self, table: dict[str, Any], key: str, options: tuple[str, ...],
               prefix: str = "npu.") -> str | None:
        """``table[key]`` if it is one of ``options``; else notes the problem and the closest."""
        value = table.get(key, _MISSING)
        if value in options:
            return value
        self.note(prefix + key, f"one of {list(options)}",
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

    def cpu(self, table: Any) -> Cpu | None:
        if not isinstance(table, dict):
            self.note("cpu", f"a table with the keys {list(_CPU_KEYS)}", repr(table))
            return None
        self.keys(table, _CPU_KEYS, "cpu.")
        architecture = self.choice(table, "architecture", CPU_ARCHITECTURES, "cpu.")
        cores = self.get(table, "cores", "cpu.", _is_positive_int, "a positive integer")
        mhz = self.get(table, "clock_mhz", "cpu.", _is_clock, "a positive number (MHz)")
        if None in (architecture, cores, mhz):
            return None
        return Cpu(architecture, cores, round(mhz * 1e6))

    def threads(self, raw: dict[str, Any]) -> int | None:
        """``threads``, held against ``cpu.cores`` when those are valid (even if another key of
        [cpu] is not, so that one error lists both)."""
        threads = self.get(raw, "threads", "", _is_positive_int, "a positive integer", None)
        cores = raw["cpu"].get("cores") if isinstance(raw.get("cpu"), dict) else None
        if threads is not None and _is_positive_int(cores) and threads > cores:
            self.note("threads", f"a positive integer at most cpu.cores ({cores})",
                      repr(threads), "one thread per core at most")
            return None
        return threads

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
