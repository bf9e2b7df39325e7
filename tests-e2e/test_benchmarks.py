"""The benchmark scripts keep running (a smoke run; timings are never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _proctree import run_tree

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def rs011_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that points the scripts at one ferroload-rs 0.1.1 virtualenv for the
    whole session (made with uv, ~10 s from its cache); where it cannot be made (offline)
    the scripts measure without it and say why, which the tests accept."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _rs011_peer import rs011_python
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    python, _ = rs011_python(tmp_path_factory.mktemp("rs011"))
    return {**os.environ, "FERROLOAD_RS011_PYTHON": python} if python else dict(os.environ)


def quick_run(
    script: str, tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Run `benchmarks/<script> --quick` into `tmp_path`; its JSON results and its output."""
    out = tmp_path / "results.json"
    cmd = [sys.executable, f"benchmarks/{script}", "--quick", *extra,
           "--workdir", str(tmp_path), "--json", str(out)]  # fmt: skip
    res = run_script(cmd, env)
    data: dict[str, Any] = json.loads(out.read_text())
    return data, res.stdout


def run_script(cmd: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """Run a benchmark script to its end, or fail with its output's tail: its own timeout
    comes before pytest-timeout's (600 s), which would leave only the test's stack."""
    try:
        res = run_tree(cmd, cwd=ROOT, timeout=540, env=env)
    except subprocess.TimeoutExpired as exc:
        tail = [(x or b"")[-3000:] for x in (exc.output, exc.stderr)]
        pytest.fail(f"{cmd[1]} ran over 540 s; its output ends: {tail}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


@pytest.mark.slow
def test_bench_format_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, stdout = quick_run("bench_format.py", tmp_path)
    assert set(data) >= {"meta", "write", "random_access", "open", "size", "goals"}
    assert len(data["goals"]) == 10
    assert all(set(g) == {"goal", "value", "pass"} for g in data["goals"])
    assert "GOALS" in stdout


@pytest.mark.slow
def test_bench_appends_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, stdout = quick_run("bench_appends.py", tmp_path)
    assert data["n"] == 50 and set(data["append_s"]) == {"10", "50"}
    for key in ("read_appended", "read_compacted", "read_once"):
        assert set(data[key]) == {"open", "first_batch", "subset", "total"}
    assert data["compact_s"] > 0 and "compacting them took" in stdout


@pytest.mark.slow
def test_bench_codec_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, stdout = quick_run("bench_codec.py", tmp_path, "--no-stock")
    assert set(data) >= {"meta", "cases", "goals"}
    # the bundled libjpeg-turbo (no system package) is measured beside the default path
    assert data["cases"]["jpeg256_exact"]["bundled_over_default"] > 0
    assert any("bundled libjpeg-turbo" in g["goal"] for g in data["goals"])
    assert all(set(g) == {"goal", "value", "pass"} for g in data["goals"])
    assert "GOALS" in stdout


@pytest.mark.slow
def test_bench_loader_quick_run_measures_every_figure(
    tmp_path: Path, rs011_env: dict[str, str]
) -> None:
    data, _ = quick_run("bench_loader.py", tmp_path, "--no-stock", env=rs011_env)
    assert set(data) >= {"meta", "sets", "goals"}
    # ferroload against ferroload-rs 0.1.1, shuffled and streaming on both sets
    rs = data["meta"]["rs011"]["reason"] is None
    assert len(data["goals"]) == 10 + 4 * rs
    if rs:
        assert all(set(s["vs_rs011"]) == {"shuffled", "streaming"} for s in data["sets"].values())
    assert all(set(g) == {"goal", "value", "pass"} for g in data["goals"])
    # worker mode is measured: throughput against the peers' workers, memory against in-process
    assert sum("ferroload_w2" in g["goal"] for g in data["goals"]) == 3
    assert all("ferroload_w2" in s["configs"] for s in data["sets"].values())
    # whatever the timings, every system must deliver the same samples
    assert all(g["pass"] for g in data["goals"] if "same samples" in g["goal"])


@pytest.mark.slow
def test_bench_augment_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, stdout = quick_run("bench_augment.py", tmp_path)
    assert set(data) >= {"meta", "systems", "ratios", "check", "goals"}
    assert set(data["systems"]) == {
        "ferroload_plain", "ferroload_augment", "torchvision", "ferroload_augment_bf16",
        "ferroload_augment_uint8",
    }  # fmt: skip
    assert all(s["ok"] and s["samples_per_s"] > 0 for s in data["systems"].values())
    assert len(data["goals"]) == 3
    assert all(set(g) == {"goal", "value", "pass"} for g in data["goals"])
    # whatever the timings: every sample, in the promised shapes, with torchvision's statistics
    assert data["check"]["ok"], data["check"]["problems"]
    assert "GOALS" in stdout


@pytest.mark.slow
@pytest.mark.s3
def test_bench_store_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, _ = quick_run("bench_store.py", tmp_path)
    assert set(data) >= {"meta", "sets", "ttfb", "goals"}
    assert len(data["goals"]) == 6
    assert all(set(g) == {"goal", "value", "pass"} for g in data["goals"])
    for s in data["sets"].values():
        cfg = s["configs"]
        assert set(cfg) == {"ferroload", "local", "naive", "wds_w0", "wds_w2"}
        # every system delivered whole epochs of same-shaped images
        shapes = {tuple(ep["shape"][1:]) for c in cfg.values() for ep in c["epochs"]}
        assert len(shapes) == 1
        assert all(ep["n"] == s["samples"] for ep in cfg["ferroload"]["epochs"])
        assert cfg["ferroload"]["epochs"][1]["store"]["get_requests"] == 0  # the cache
    assert data["ttfb"]["first_batch_len"] == 256


@pytest.mark.slow
@pytest.mark.ray
def test_bench_map_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, _ = quick_run("bench_map.py", tmp_path)
    systems = data["systems"]
    assert set(systems) == {"hf_num_proc2", "ferroload_processes", "ferroload_threads",
                            "ferroload_ray"}  # fmt: skip
    for name, s in systems.items():
        assert s["samples_per_s"] > 0 and s["bytes_written"] > 0, name
        assert {"mean_color", "thumb"} <= set(s["columns"]), name
    # ferroload writes the layer only: about the same bytes whichever executor ran it
    written = [s["bytes_written"] for k, s in systems.items() if k != "hf_num_proc2"]
    assert max(written) < 1.01 * min(written)
    assert len(data["goals"]) == 3


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.ray
def test_bench_ray_import_quick_run_checks_every_system(tmp_path: Path) -> None:
    import inspect

    import ferroload

    out = tmp_path / "results.json"
    cmd = [sys.executable, "benchmarks/bench_ray_import.py", "--quick",
           "--workdir", str(tmp_path), "--json", str(out)]  # fmt: skip
    try:  # ~45 s alone on 2 cores (Ray's start included)
        res = run_tree(cmd, cwd=ROOT, timeout=280)
    except subprocess.TimeoutExpired as exc:
        tail = [(x or b"")[-3000:] for x in (exc.output, exc.stderr)]
        pytest.fail(f"bench_ray_import.py ran over 280 s; its output ends: {tail}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    # the Ray import is left out, saying why, only where the importer has no executor yet
    has_executor = "executor" in inspect.signature(ferroload.import_webdataset).parameters
    skipped = data["meta"]["skipped"]
    assert set(skipped) == (set() if has_executor else {"ray"})
    assert set(data["sets"]) == {"tiny", "jpeg"}
    for name, s in data["sets"].items():
        assert set(s["systems"]) == {"one_machine", "ray", "ray_parquet"}, name
        for k, x in s["systems"].items():
            if k in skipped:
                assert x == {"skipped": skipped[k]}
            else:
                assert len(x["times_s"]) == 1 and x["samples_per_s"]["median"] > 0, (name, k)
                assert x["bytes_written"] > 0, (name, k)
        # every sample imported, one Parquet row per sample, the Ray import equal to the other
        assert s["check"]["samples_ok"] and s["check"]["parquet_rows_ok"], s["check"]
        assert s["check"]["ray_equal"] is (None if skipped else True), s["check"]
    assert len(data["goals"]) == (0 if skipped else 2)
    assert all(g["pass"] for g in data["goals"])


def test_bench_convert_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, _ = quick_run("bench_convert.py", tmp_path)
    systems = data["systems"]
    assert set(systems) == {"ferroload_w1", "ferroload_w8", "hf_imagefolder_save_to_disk",
                            "webdataset_shardwriter"}  # fmt: skip
    for name, s in systems.items():
        assert s["samples"] == data["meta"]["samples"] and s["samples_per_s"] > 0, name
        assert s["bytes"] >= data["meta"]["jpeg_bytes"], name  # every JPEG byte kept
    assert set(data["ratios"]) == {"ferroload_vs_hf", "ferroload_vs_webdataset", "workers_8_vs_1"}


@pytest.mark.slow
def test_bench_tiny_quick_run_measures_every_figure(
    tmp_path: Path, rs011_env: dict[str, str]
) -> None:
    # one set: each epoch is a fresh process that imports torch (~6 s here), and both sets
    # under two loads took 265 s alone and over 600 s beside the rest of the suite
    data, stdout = quick_run(
        "bench_tiny.py", tmp_path, "--fmt", "png", "--rounds", "1", "--loads", "quiet,busy1",
        env=rs011_env,
    )  # fmt: skip
    rs = data["meta"]["rs011_unavailable"] is None
    kinds = {"codec", "codec1", "codec_shuffled", "loader", "loader_stream"}
    kinds |= {"rs011", "rs011_stream"} if rs else set()
    assert set(data["sets"]) == {"png"}
    for name, s in data["sets"].items():
        assert set(s["loads"]) == {"quiet", "busy1"}
        assert set(s["loads"]["quiet"]) == kinds, name
        assert set(s["loads"]["busy1"]) == kinds - {"codec1", "codec_shuffled"}, name
        # every system delivered the same pixels and labels before it was timed
        assert set(s["checks"]) == kinds - {"codec1"}, name
        for kind, k in s["loads"]["quiet"].items():  # CPU, faults and memory of each epoch
            run = k["runs"][0]
            assert run["cpu_s"] > 0 and run["major_faults"] >= 0 and run["minor_faults"] > 0
            assert k["samples_per_s"]["median"] > 0 and k["median_maxrss_mib"] > 0, kind
    # per set: CPU, scaling, busy1; and against ferroload-rs 0.1.1: 2 loads x 2 modes + spread
    assert len(data["goals"]) == 3 + 6 * rs and "GOALS" in stdout


@pytest.mark.slow
def test_bench_first_batch_quick_run_measures_local_and_remote(
    tmp_path: Path, rs011_env: dict[str, str]
) -> None:
    out = tmp_path / "first.json"
    cmd = [sys.executable, "benchmarks/bench_first_batch.py", "--quick", "--reps", "1",
           "--dir", str(tmp_path / "sets"), "--out", str(out)]  # fmt: skip
    run_script(cmd, rs011_env)
    data = json.loads(out.read_text())
    for where in ("sets", "remote"):  # local disk, and S3 behind the latency proxy
        assert set(data[where]) == {"tiny", "jpeg"}
        assert all(s["median"]["first_s"] > 0 for s in data[where].values()), where
    rs = data["meta"]["rs011"]["reason"] is None
    if rs:  # first batch and peak RSS against ferroload-rs 0.1.1's
        assert set(data["rs011"]) == {"tiny", "jpeg"}
    assert len(data["goals"]) == 2 + 4 * rs


@pytest.mark.slow
def test_bench_bucket_quick_run_measures_every_figure(tmp_path: Path) -> None:
    data, _ = quick_run("bench_bucket.py", tmp_path, "--reps", "1")
    systems = data["systems"]
    assert set(systems) == {"unbucketed", "bucketed"}
    # whatever the timings, bucketing must leave fewer padded pixels in the batches
    assert systems["bucketed"]["median"]["padded"] < systems["unbucketed"]["median"]["padded"]
    assert len(data["goals"]) == 2


@pytest.mark.slow
def test_bench_audio_quick_run_checks_every_system(tmp_path: Path) -> None:
    data, _ = quick_run(
        "bench_audio.py", tmp_path, "--clips", "128", "--rounds", "1",
        "--data-dir", str(tmp_path / "clips"),
    )  # fmt: skip
    assert set(data["systems"]) == {"ferroload", "wds", "hf"}
    # every system's crops, labels, shapes and dtypes check out against the reference
    assert all(c["ok"] for c in data["checks"].values()), data["checks"]
    assert all(s["samples_per_s"] > 0 for s in data["systems"].values())


@pytest.mark.slow
def test_bench_video_quick_run_checks_every_system(tmp_path: Path) -> None:
    data, _ = quick_run(
        "bench_video.py", tmp_path, "--clips", "16", "--rounds", "1", "--no-torchcodec",
        "--data-dir", str(tmp_path / "clips"),
    )  # fmt: skip
    systems = data["systems"]
    assert set(systems) == {"ferroload", "ferroload_w2", "webdataset", "hf"}
    # every system delivers the expected frames (read back from the pixels) and labels
    assert all(s["check"]["ok"] for s in systems.values()), {
        k: s["check"] for k, s in systems.items()
    }
    assert all(s["clips_per_s"] > 0 for s in systems.values())
