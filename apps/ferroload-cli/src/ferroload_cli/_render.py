"""Output of the `ferroload` command: rich tables for people, JSON for machines.

Progress bars are not drawn here: commands pass `progress=` to the library, which draws
them (one library, tqdm, on stderr).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Longest cell a human table shows (longer values are cut with `…`).
CELL = 60

# What a terminal would act on rather than show: C0 controls but tab and newline (escape
# sequences start with ESC), DEL, C1 controls, and the bidirectional overrides that can
# reorder what a line seems to say. Text from a dataset (names, columns, values, errors
# quoting them) is written by strangers.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")  # fmt: skip


def printable(text: str) -> str:
    """`text` safe to print: every character a terminal would act on shown as an escape
    (`\\x1b`, `\\u202e`); tabs and newlines kept.

    Examples:
        >>> printable("evil\x1b[2Jname")
        'evil\\x1b[2Jname'
    """
    return _UNSAFE.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def _console(*, stderr: bool) -> Console:
    con = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not con.is_terminal:  # pipes and files: no wrapping at 80 columns
        con = Console(stderr=stderr, highlight=False, soft_wrap=False, width=200)
    return con


out = _console(stderr=False)


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout (bytes shown as their length)."""
    text = json.dumps(jsonable(value), indent=2, ensure_ascii=False)
    # JSON escapes C0 controls itself; C1 controls and bidi overrides only occur inside
    # strings, where a \\u escape means the same character
    sys.stdout.write(_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")
    sys.stdout.flush()


def jsonable(value: Any) -> Any:
    """`value` with everything JSON cannot hold turned into something it can."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return jsonable(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return jsonable(tolist())
    return str(value)


def cell(value: Any) -> str:
    """One table cell: None as empty, newlines flattened, long text cut, controls escaped."""
    text = "" if value is None else str(value)
    text = printable(text.replace("\n", " "))
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None
) -> None:
    """Print a table: a header, then one line per row (as text: never rich markup)."""
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for h in headers:
        t.add_column(Text(cell(h)))
    for row in rows:
        t.add_row(*(Text(cell(v)) for v in row))
    out.print(t)


def pairs(items: Sequence[tuple[str, Any]]) -> None:
    """Print `key: value` lines, keys aligned."""
    t = Table.grid(padding=(0, 1))
    t.add_column(style="bold")
    t.add_column()
    for k, v in items:
        t.add_row(k + ":", Text("" if v is None else printable(str(v))))
    out.print(t)


def line(text: str = "") -> None:
    """Print one line of text on stdout (no markup; controls escaped)."""
    out.print(printable(text), markup=False)


def count(n: int, noun: str = "sample") -> str:
    """`1 sample`, `2 samples`, `1,024 samples`."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def size(n: int | None) -> str:
    """Bytes for people: `512 B`, `1.5 KiB`, …"""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
