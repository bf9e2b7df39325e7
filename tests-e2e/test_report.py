"""The benchmark page is generated: benchmarks/report.py regenerates docs/benchmarks.md and
its charts from the committed benchmarks/results/*.json, and the committed files must be
exactly what it gives. Every benchmark script has its section."""

from __future__ import annotations

import hashlib
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PAGE = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "images" / "benchmarks"
REGENERATE = "uv run python benchmarks/report.py"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """benchmarks/report.py's namespace (it puts benchmarks/ on sys.path itself)."""
    saved = list(sys.path)
    try:
        return runpy.run_path(str(BENCH / "report.py"), run_name="report")
    finally:
        sys.path[:] = saved


@pytest.fixture(scope="module")
def generated(report: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    code = report["main"](["--out", str(out / "benchmarks.md"), "--images", str(out / "images")])
    assert code == 0
    return out


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.png"))
    }


def test_committed_page_is_what_the_results_give(generated: Path) -> None:
    assert PAGE.read_text() == (generated / "benchmarks.md").read_text(), (
        f"docs/benchmarks.md is not what benchmarks/results/*.json give: run `{REGENERATE}`"
    )


def test_committed_charts_are_what_the_results_give(generated: Path) -> None:
    fresh = _digests(generated / "images")
    assert fresh, "the report drew no chart"
    committed = _digests(IMAGES)
    assert sorted(committed) == sorted(fresh), f"chart set differs: run `{REGENERATE}`"
    changed = [name for name in fresh if committed[name] != fresh[name]]
    assert not changed, f"charts differ from the results: {changed}; run `{REGENERATE}`"


def test_every_chart_on_the_page_exists_and_every_chart_is_on_the_page(generated: Path) -> None:
    page = (generated / "benchmarks.md").read_text()
    names = {p.name for p in (generated / "images").glob("*.png")}
    linked = {
        line.split("](images/benchmarks/")[1].rstrip(")")
        for line in page.splitlines()
        if "](images/benchmarks/" in line
    }
    assert linked == names


def test_every_benchmark_script_has_a_section(generated: Path) -> None:
    page = (generated / "benchmarks.md").read_text()
    headings = {line[3:].strip() for line in page.splitlines() if line.startswith("## ")}
    scripts = sorted(p.stem for p in BENCH.glob("bench_*.py"))
    assert {"bench_map", "bench_convert"} <= set(scripts)
    missing = [s for s in scripts if s not in headings]
    assert not missing, f"no section for {missing}"


def _committed_results(report: dict[str, Any]) -> list[Path]:
    """The result files the page is made of: all but those git ignores (local quick runs)."""
    files = sorted((BENCH / "results").glob("*.json"))
    ignored = report["git_ignored"](files)
    return [p for p in files if p not in ignored]


def test_every_result_file_is_shown(report: dict[str, Any], generated: Path) -> None:
    page = (generated / "benchmarks.md").read_text()
    files = _committed_results(report)
    assert len(files) >= 10
    for p in files:
        assert f"`benchmarks/results/{p.name}`" in page, p.name


def test_results_git_ignores_are_left_out(report: dict[str, Any]) -> None:
    """A local `--quick` run (`results/*_quick.json`, ignored by git) is not part of the
    page, a committed result is (check-ignore needs no file, so nothing is written)."""
    results = BENCH / "results"
    quick, full = results / "bench_map_quick.json", results / "bench_map.json"
    assert report["git_ignored"]([quick, full]) == {quick}


def test_every_run_says_machine_commit_date_and_command(
    report: dict[str, Any], generated: Path
) -> None:
    page = (generated / "benchmarks.md").read_text()
    runs = page.count("| file | `benchmarks/results/")
    assert runs == len(_committed_results(report))
    for field in ("machine", "commit", "date", "command"):
        assert page.count(f"\n| {field} | ") == runs, field


def test_a_script_without_results_says_how_to_produce_them(
    report: dict[str, Any], tmp_path: Path
) -> None:
    """An empty results folder still gives every script a section, with its command."""
    empty = tmp_path / "results"
    empty.mkdir()
    page, charts = report["render"](empty, tmp_path / "images")
    assert charts == []
    for s in report["scripts"]():
        assert f"## {s}\n" in page
        assert f"uv run python benchmarks/{s}.py\n" in page


def test_check_mode_agrees(report: dict[str, Any], generated: Path) -> None:
    assert report["main"](["--check", "--out", str(generated / "benchmarks.md")]) == 0
    stale = generated / "stale.md"
    stale.write_text("# Benchmarks\n")
    assert report["main"](["--check", "--out", str(stale)]) == 1


def test_each_result_file_of_a_script_gets_its_own_charts(
    report: dict[str, Any], tmp_path: Path
) -> None:
    """A quick run committed beside the full one is shown too, with charts of its own."""
    results = tmp_path / "results"
    results.mkdir()
    full = (BENCH / "results" / "bench_map.json").read_text()
    (results / "bench_map.json").write_text(full)
    (results / "bench_map_quick.json").write_text(full.replace('"full"', '"quick"'))
    page, charts = report["render"](results, tmp_path / "images")
    assert charts == ["map_throughput.png", "map_throughput_quick.png"]
    assert "--quick --json" not in page  # the quick file's default name needs no --json
    assert "`uv run python benchmarks/bench_map.py --quick`" in page
    for name in charts:
        assert f"](images/benchmarks/{name})" in page
        assert (tmp_path / "images" / name).stat().st_size > 0


def test_a_result_file_without_its_script_is_still_shown(
    report: dict[str, Any], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "bench_gone.json").write_text(
        '{"meta": {"git_commit": "abc1234", "started_at": "2026-01-01T00:00:00Z"},'
        ' "goals": [{"goal": "fast", "value": "2.00x", "pass": true}]}\n'
    )
    page, _ = report["render"](results, tmp_path / "images")
    other = page.split("## Other results", 1)[1]
    assert "`benchmarks/results/bench_gone.json`" in other
    assert "| commit | abc1234 |" in other
    assert "| fast | 2.00x | PASS |" in other
    assert "| command | not recorded (and no `bench_*.py`" in other  # nothing invented
