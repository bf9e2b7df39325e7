"""Generate docs/benchmarks.md and its charts from benchmarks/results/*.json.

    uv run python benchmarks/report.py            # writes docs/benchmarks.md and docs/images/benchmarks/
    uv run python benchmarks/report.py --check    # exit 1 when the committed page is not what the JSON gives

Every number on the page comes from the JSON the benchmark scripts wrote; the prose comes
from benchmarks/report_text.md. Every `bench_*.py` gets a section (saying how to produce
its results when none are committed), and every result file is shown. The output is
deterministic: no generation time, fixed number formats, PNGs without metadata. It needs
matplotlib, not ferroload.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report_charts  # noqa: E402
from _report_page import Result, Section, goals, md_table, run_facts, split_text  # noqa: E402
from _report_sections import RENDERERS, generic  # noqa: E402

ROOT = HERE.parent
RESULTS = HERE / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "images" / "benchmarks"
TEXT = HERE / "report_text.md"

# The order of the sections on the page; scripts not listed follow in name order.
ORDER = [
    "bench_loader",
    "bench_format",
    "bench_codec",
    "bench_augment",
    "bench_store",
    "bench_convert",
    "bench_map",
    "bench_appends",
    "bench_scale",
    "bench_scale_epoch",
]


def scripts(bench_dir: Path = HERE) -> list[str]:
    """The benchmark scripts (`bench_*.py` stems) in page order."""
    found = sorted(p.stem for p in bench_dir.glob("bench_*.py"))
    return [s for s in ORDER if s in found] + [s for s in found if s not in ORDER]


def summary_line(path: Path) -> str:
    """The first paragraph of a script's docstring (read, not imported), on one line."""
    doc = (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def run_line(path: Path) -> str:
    """How to run a script, from its own flags (a `--quick` smoke run where it has one)."""
    line = f"Run it: `uv run python benchmarks/{path.name}`"
    src = path.read_text()
    if '"--quick"' in src or "run_parser(" in src:
        line += f" (`uv run python benchmarks/{path.name} --quick`: a smoke run)"
    return line + "; `--help` lists its options, `benchmarks/README.md` explains each figure."


def owner(name: str, names: list[str]) -> str | None:
    """The script a result file belongs to: the longest script name that is the file's
    name or its prefix followed by `_` (bench_scale_epoch before bench_scale)."""
    best = None
    for s in names:
        if (name == s or name.startswith(s + "_")) and (best is None or len(s) > len(best)):
            best = s
    return best


def git_ignored(paths: list[Path]) -> set[Path]:
    """The paths git ignores (local `--quick` runs, `results/*_quick.json`), so that the
    page is what the committed results give; none when git is not at hand."""
    if not paths:
        return set()
    try:
        out = subprocess.run(
            ["git", "-C", str(paths[0].parent), "check-ignore", "--stdin"],
            input="\n".join(p.name for p in paths),
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if out.returncode not in (0, 1):  # 1: nothing ignored; 128: not a repository
        return set()
    return {paths[0].parent / line for line in out.stdout.splitlines() if line}


def load(results_dir: Path, names: list[str]) -> list[Result]:
    """Every result file that git does not ignore, sorted by name, with the script it
    belongs to ("" if none)."""
    out = []
    files = sorted(results_dir.glob("*.json"))
    skip = git_ignored(files)
    for p in files:
        if p in skip:
            continue
        data: Any = json.loads(p.read_text())
        if not isinstance(data, dict):
            data = {"value": data}
        out.append(Result(p.stem, owner(p.stem, names) or "", data))
    return out


def _goal_counts(rs: list[Result]) -> str:
    passed = failed = 0
    for r in rs:
        found = r.data.get("goals")
        if found is None and isinstance(r.data.get("goal"), dict):
            found = [r.data["goal"]]
        for g in found if isinstance(found, list) else []:
            if isinstance(g, dict):
                passed, failed = (passed + 1, failed) if g.get("pass") else (passed, failed + 1)
    if not passed and not failed:
        return "-"
    return f"{passed} PASS, {failed} FAIL"


def render(
    results_dir: Path, images: Path, text_path: Path = TEXT, *, draw: bool = True
) -> tuple[str, list[str]]:
    """The page's markdown and the names of the charts written to `images` (with
    `draw=False`, the names of the charts it links, none drawn)."""
    _report_charts.ENABLED = draw
    names = scripts()
    text = split_text(text_path)
    results = load(results_dir, names)
    images.mkdir(parents=True, exist_ok=True)
    by_script: dict[str, list[Result]] = {s: [] for s in names}
    orphans: list[Result] = []
    for r in results:
        (by_script[r.script] if r.script else orphans).append(r)

    lines = [
        "<!-- Generated by benchmarks/report.py from benchmarks/results/*.json and",
        "benchmarks/report_text.md: edit those, then run `uv run python benchmarks/report.py`. -->",
        "",
        "# Benchmarks",
        "",
        text.get("intro", ""),
        "",
    ]
    lines += ["| script | what it measures | result files | goals |", "| --- | --- | --- | --- |"]
    for s in names:
        files = ", ".join(f"`{r.name}.json`" for r in by_script[s]) or "none committed"
        lines.append(
            f"| [`{s}.py`](#{s}) | "
            f"{summary_line(HERE / f'{s}.py')} | {files} | {_goal_counts(by_script[s])} |"
        )
    lines.append("")

    charts: list[str] = []
    for s in names:
        lines += [f"## {s}", "", f"`benchmarks/{s}.py`: {summary_line(HERE / f'{s}.py')}", ""]
        if text.get(s):
            lines += [text[s], ""]
        lines += [run_line(HERE / f"{s}.py"), ""]
        rs = by_script[s]
        if not rs:
            lines += [
                "No results are committed for this script. Produce them with:",
                "",
                "```bash",
                f"uv run python benchmarks/{s}.py",
                "```",
                "",
                f"which writes `benchmarks/results/{s}.json`; then run "
                "`uv run python benchmarks/report.py`.",
                "",
            ]
            continue
        sec: Section = RENDERERS.get(s, generic)(rs, images)
        lines += sec.lines
        charts += sec.charts
    if orphans:
        lines += ["## Other results", "", text.get("other", ""), ""]
        for r in orphans:
            lines += [f"### `{r.name}.json`", "", *run_facts(r), *goals(r.data)]
        lines += md_table(
            ["file", "top-level keys"],
            [[f"`{r.name}.json`", ", ".join(sorted(r.data))] for r in orphans],
        )
    page = "\n".join(lines).rstrip() + "\n"
    while "\n\n\n" in page:
        page = page.replace("\n\n\n", "\n\n")
    return page, sorted(charts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of *.json results")
    ap.add_argument("--out", type=Path, default=PAGE, help="the markdown page to write")
    ap.add_argument("--images", type=Path, default=IMAGES, help="folder for the charts")
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when --out differs from what the results give",
    )
    args = ap.parse_args(argv)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            page, _ = render(args.results, Path(tmp), draw=False)
        same = args.out.exists() and args.out.read_text() == page
        print(f"{args.out}: {'up to date' if same else 'differs from the results'}")
        return 0 if same else 1
    page, charts = render(args.results, args.images)
    for stale in sorted(args.images.glob("*.png")):
        if stale.name not in charts:
            stale.unlink()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page)
    print(f"wrote {args.out} and {len(charts)} charts in {args.images}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
