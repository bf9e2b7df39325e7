"""`benchmarks/bench_scale.py --quick` keeps running and measures every figure (a smoke
run: timings are never asserted, only that each measurement produced one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _proctree import run_tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_scale_generator_matches_the_writer(tmp_path: Path) -> None:
    import _scale_data

    # several sessions (index parts, sample-id runs) and several shards per session
    _scale_data.check_twin(tmp_path, 3_000, shard_size=256 << 10, session_rows=1_200)


@pytest.mark.slow
@pytest.mark.s3
def test_bench_scale_quick_run_measures_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    cmd = [sys.executable, "benchmarks/bench_scale.py", "--quick", "--no-plots",
           "--workdir", str(tmp_path), "--json", str(out)]  # fmt: skip
    res = run_tree(cmd, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    stdout = res.stdout
    assert {d["kind"] for d in data["datasets"]} == {"meta", "image"}
    for d in data["datasets"]:
        for key, value in d.items():
            assert not (isinstance(value, dict) and "error" in value), (d["kind"], d["n"], key)
        assert d["open"]["num_samples"] == d["n"]
        assert d["loader"]["per_sample_us"] > 0 and d["loader"]["peak_rss_mb"] > 0
    meta = data["table"]["meta"]
    assert len(meta["n"]) == 2 and all(v is not None for v in meta["subset_selective_s"])
    big = next(d for d in data["datasets"] if d["kind"] == "meta" and d["n"] == meta["n"][-1])
    assert big["subset_selective"]["rows"] == 1_000
    assert big["subset_all"]["rows"] == big["n"] // 2
    assert len(data["goals"]) == 7
    runs = data["ranks"]["runs"]
    assert len(runs) == 4 and not any("error" in r for r in runs)
    for r in runs:
        # each rank reads its share; its GET requests follow the shards it read (plus a
        # few index reads), not its samples
        assert r["distinct_samples"] == r["samples"] > 0
        assert r["get_requests"] <= r["shards_read"] + 8
    remote = data["ranks"]["remote"]
    assert len(remote) == 2 and not any("error" in r for r in remote)
    assert "many ranks" in stdout
    # one rank's whole epoch over the largest metadata dataset the quick run wrote
    meta_root = next(p for p in tmp_path.rglob(f"meta-{meta['n'][-1]}") if p.is_dir())
    for extra in ([], ["--streaming"]):
        cmd = [sys.executable, "benchmarks/bench_scale_epoch.py", "--one", str(meta_root), *extra]
        res = run_tree(cmd, cwd=ROOT, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        epoch = json.loads(res.stdout)
        assert epoch["items"] == -(-meta["n"][-1] // 8) and epoch["per_sample_us"] > 0
