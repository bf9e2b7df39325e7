"""What the benchmark reports print with: aligned text tables, markdown tables, goal rows and MiB figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MiB = 1 << 20


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def goal(goal: str, value: str, ok: bool) -> dict[str, Any]:
    """One goal row of a result dict: what was aimed at, the value measured, PASS or not."""
    return {"goal": goal, "value": value, "pass": bool(ok)}


def goals_table(goals: Sequence[dict[str, Any]]) -> list[str]:
    """The report's closing lines: a blank line, `GOALS`, and the goals as a table."""
    rows = [[g["goal"], g["value"], "PASS" if g["pass"] else "FAIL"] for g in goals]
    return ["", "GOALS", table(["goal", "value", "result"], rows)]


def run_header(title: str, m: dict[str, Any]) -> list[str]:
    """The first two lines of a report: what ran when, and on which machine under what load."""
    return [
        f"{title} ({m['mode']}) — {m['started_at']}, commit {m['git_commit']}",
        f"{m['cpu_count']} CPUs ({m['available_cpus']} available), Python {m['python']}, "
        f"{m['platform']}; load average {m['loadavg_start']} at start, {m['loadavg_end']} at end",
    ]


def mib(v: float | None) -> str:
    """`v` bytes in whole MiB, or `-`."""
    return "-" if v is None else f"{v / MiB:,.0f}"


def ratio(v: float | None) -> str:
    """A ratio as `1.23x`, or `-`."""
    return "-" if v is None else f"{v:.2f}x"


def print_markdown_table(
    title: str, header: list[str], rows: list[Any], cells: Callable[[Any], list[str]]
) -> None:
    """Print a markdown table: `cells(row)` gives a row's cells; a row holding an
    `error` prints as it is."""
    print(f"\n{title}")
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|")
    for r in rows:
        line = [str(r)] if isinstance(r, dict) and "error" in r else cells(r)
        print("| " + " | ".join(line) + " |")
