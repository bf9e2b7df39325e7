"""The building blocks of the generated benchmark page: formatting, markdown tables, each
result file's run facts (machine, commit, date, command) and its goals. No ferroload import."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_RECORDED = "not recorded"


@dataclass
class Result:
    """One `benchmarks/results/*.json` file: its name, the script it belongs to, its data."""

    name: str
    script: str
    data: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.data.get("meta")
        return meta if isinstance(meta, dict) else {}


@dataclass
class Section:
    """What one section adds to the page: markdown lines and the charts it draws."""

    lines: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)


def num(v: float | None, digits: int = 0) -> str:
    """`v` with thousands separators and `digits` decimals, or `-`."""
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def sig(v: float | None) -> str:
    """`v` with about three significant figures (1,234 / 12.3 / 0.123), or `-`."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2g}"


def times(v: float | None) -> str:
    """A ratio as `2.94x`, or `-`."""
    return "-" if v is None else f"{v:.2f}x"


def mb(v: float | None) -> str:
    """`v` bytes in MB (10^6 B) with one decimal, or `-`."""
    return "-" if v is None else f"{v / 1e6:,.1f}"


def over(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A markdown table: the first `left` columns left-aligned, the others right-aligned."""
    align = ["---"] * left + ["---:"] * (len(headers) - left)
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return [*out, ""]


def loadavg(v: Any) -> str:
    """A recorded load average (a list of 1/5/15-minute figures) as `1.05, 1.2, 1.3`."""
    if isinstance(v, list) and v:
        return ", ".join(f"{float(x):.2f}" for x in v)
    return NOT_RECORDED


def machine(meta: dict[str, Any]) -> str:
    """The machine a run was on, from whatever its meta recorded."""
    if meta.get("machine"):
        return str(meta["machine"])
    parts = []
    if "cpu_count" in meta:
        cpus = f"{meta['cpu_count']} CPUs"
        if "available_cpus" in meta:
            cpus += f" ({meta['available_cpus']} available)"
        parts.append(cpus)
    if meta.get("platform"):
        parts.append(str(meta["platform"]))
    if meta.get("python"):
        parts.append(f"Python {meta['python']}")
    return ", ".join(parts) if parts else NOT_RECORDED


def derived_command(r: Result) -> str:
    """The command that writes `r`'s file, derived from the script's flags and the file's
    name and mode (for results that did not record their command)."""
    meta = r.meta
    args = [f"uv run python benchmarks/{r.script}.py"]
    quick = meta.get("mode") == "quick"
    if quick:
        args.append("--quick")
    if meta.get("cold"):
        args.append("--cold")
    if r.script == "bench_appends" and "n" in r.data:
        args.append(f"--n {r.data['n']}")
    default = f"{r.script}_quick" if quick else r.script
    if r.name != default:
        args.append(f"--json benchmarks/results/{r.name}.json")
    return " ".join(args)


def run_facts(r: Result) -> list[str]:
    """The table of what, where and when: file, machine, commit, date, command, load."""
    meta = r.meta
    if meta.get("command"):
        command = f"`{meta['command']}`"
    elif not r.script:
        command = "not recorded (and no `bench_*.py` in `benchmarks/` matches the file's name)"
    else:
        command = f"`{derived_command(r)}` (not recorded in the file: derived by the report)"
    start = meta.get("loadavg_start", meta.get("loadavg_before"))
    end = meta.get("loadavg_end", meta.get("loadavg_after"))
    rows = [
        ["file", f"`benchmarks/results/{r.name}.json`"],
        ["machine", machine(meta)],
        ["commit", str(meta.get("git_commit") or meta.get("commit") or NOT_RECORDED)],
        ["date", str(meta.get("date") or meta.get("started_at") or NOT_RECORDED)],
        ["command", command],
        ["load average", f"{loadavg(start)} at start; {loadavg(end)} at end"],
    ]
    if meta.get("total_s") is not None:
        rows.append(["run time", f"{meta['total_s']:,.0f} s"])
    if meta.get("note"):
        rows.append(["note", str(meta["note"])])
    return md_table(["run", ""], rows, left=2)


def goal_value(g: dict[str, Any]) -> str:
    """A goal's measured value as the script recorded it (numbers with 3 figures)."""
    if "value" in g:
        v = g["value"]
        if isinstance(v, float):
            text = sig(v)
            if "limit" in g:
                text += f" (limit {sig(float(g['limit']))})"
            return text
        return str(v)
    if "max_over_min" in g:
        return f"max/min {sig(float(g['max_over_min']))}"
    return "-"


def goal_text(g: dict[str, Any]) -> str:
    """A goal's wording, or one built from its fields when the script recorded none."""
    if "goal" in g:
        return str(g["goal"])
    if "order" in g:
        return f"{g['order']}: time per sample flat from the smallest to the largest size"
    return ", ".join(f"{k}={v}" for k, v in sorted(g.items()) if k != "pass")


def goals(data: dict[str, Any]) -> list[str]:
    """The goals a run recorded (a list, or the one `goal`), as a table; [] if none."""
    found = data.get("goals")
    if found is None and isinstance(data.get("goal"), dict):
        found = [data["goal"]]
    if not isinstance(found, list) or not found:
        return []
    rows = [
        [goal_text(g), goal_value(g), "PASS" if g.get("pass") else "FAIL"]
        for g in found
        if isinstance(g, dict)
    ]
    return ["Goals:", "", *md_table(["goal", "value", "result"], rows, left=2)]


def image(name: str, alt: str) -> list[str]:
    """A markdown image of one chart, linked from docs/benchmarks.md."""
    return [f"![{alt}](images/benchmarks/{name})", ""]


def split_text(path: Path) -> dict[str, str]:
    """The prose file's parts by marker (`<!-- name -->` on a line of its own)."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        s = line.strip()
        if s.startswith("<!-- ") and s.endswith(" -->") and " " not in s[5:-4]:
            current = parts.setdefault(s[5:-4], [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip() for k, v in parts.items()}
