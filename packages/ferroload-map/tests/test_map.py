"""`map_dataset` end to end, on real datasets and the real `LayerWriter`."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _map_fns
import duckdb
import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from ferroload_format import Dataset, LayerExistsError, SchemaConflictError
from ferroload_map import (
    LocalExecutor,
    MapError,
    MapReport,
    MapSpecError,
    StaticPartitionExecutor,
    map_dataset,
)

CHILD = Path(__file__).with_name("_child_map.py")
STATS_OUT = {"mean_color": "float32[3]", "thumb": "png"}
LABEL_OUT = {"bigger": "int64", "note": "txt"}


def stats(ds: Dataset, **kw: Any) -> tuple[Dataset, MapReport]:
    args: dict[str, Any] = {
        "inputs": ["image"],
        "outputs": STATS_OUT,
        "layer": "stats",
        "batch_size": 4,
        "partition_size": 6,
        "executor": LocalExecutor("threads", workers=2),
        "progress": False,
    }
    args.update(kw)
    return map_dataset(ds, _map_fns.stats, return_report=True, **args)


def label_map(ds: Dataset, fn: Any = _map_fns.label_plus, **kw: Any) -> tuple[Dataset, MapReport]:
    args: dict[str, Any] = {
        "inputs": ["label"],
        "outputs": LABEL_OUT,
        "layer": "slow",
        "batch_size": 2,
        "partition_size": 4,
        "executor": LocalExecutor("threads", workers=1),
        "progress": False,
    }
    args.update(kw)
    return map_dataset(ds, fn, return_report=True, **args)


def layer_content(ds: Dataset, columns: list[str], modalities: list[str]) -> list[Any]:
    """Everything a layer holds, per sample, comparable across datasets."""
    table = ds.to_table(["sample_id", *columns]).to_pylist()
    payloads = {m: ds.read(np.arange(len(ds)), m) for m in modalities}
    return [{**row, **{m: payloads[m][i] for m in modalities}} for i, row in enumerate(table)]


def expected_stats(ds: Dataset, i: int) -> tuple[list[float], np.ndarray]:
    img = np.asarray(Image.open(io.BytesIO(ds.get(i, ["image"])["image"])).convert("RGB"))
    mean = img.reshape(-1, 3).mean(axis=0).astype(np.float32).astype(np.float64).tolist()
    ys = np.linspace(0, img.shape[0] - 1, 16).astype(int)
    xs = np.linspace(0, img.shape[1] - 1, 16).astype(int)
    return mean, img[ys][:, xs]


def test_png_stats_end_to_end(make_dataset: Any, seen: list[str]) -> None:
    ds = make_dataset(20)
    ds2, report = stats(ds)
    assert ds2.version == ds.version + 1
    assert [la.name for la in ds2.layers] == ["stats"]
    assert ds2.layers[0].identity == report.identity
    assert ds2.layers[0].base_version == ds.version
    assert "mean_color" in ds2.metadata_columns and "thumb" in ds2.columns
    for i in range(20):
        mean, thumb = expected_stats(ds, i)
        assert ds2[i]["mean_color"] == pytest.approx(mean)
        got = np.asarray(Image.open(io.BytesIO(ds2.get(i, ["thumb"])["thumb"])))
        np.testing.assert_array_equal(got, thumb)
    assert report == MapReport(
        layer="stats",
        identity=report.identity,
        num_partitions=4,
        computed_partitions=(0, 1, 2, 3),
        skipped_partitions=(),
        num_samples=20,
        num_skipped_samples=0,
        skipped_samples=(),
        fn_calls=7,  # partitions of 6, 6, 6, 2 rows in batches of 4
        seconds=report.seconds,
        already_committed=False,
        committed=True,
        pending=False,
        version=ds2.version,
    )
    assert sorted(seen) == [f"s{i:05d}" for i in range(20)]
    # the dataset as opened before is untouched; SQL sees the layer
    assert ds.layers == () and "mean_color" not in Dataset.open(ds.uri, version=1).columns
    assert ds2.subset("mean_color[3] > 150", return_indices=True).tolist() == [
        i for i in range(20) if expected_stats(ds, i)[0][2] > 150
    ]
    root = ds.uri.removeprefix("file://")
    rows = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{root}/layers/stats/index/part-*.parquet')"
    ).fetchall()
    assert rows == [(20,)]


def test_second_run_is_a_noop(make_dataset: Any, seen: list[str]) -> None:
    ds = make_dataset(12)
    ds2, _ = stats(ds)
    seen.clear()
    for again in (ds, ds2, Dataset.open(ds.uri)):
        ds3, report = stats(again, batch_size=5)  # batch size is not part of the identity
        assert report.already_committed and report.committed
        assert report.computed_partitions == () and report.fn_calls == 0
        assert ds3.version == ds2.version
    assert seen == []
    assert [v.version for v in ds.versions()] == [1, 2]


def test_another_function_needs_overwrite(make_dataset: Any) -> None:
    ds = make_dataset(8, images=False)
    ds2, _ = label_map(ds, version="v1")
    with pytest.raises(LayerExistsError, match="overwrite=True"):
        label_map(ds, version="v2")
    ds3, report = label_map(ds, version="v2", overwrite=True)
    assert report.computed_partitions == (0, 1) and ds3.version == ds2.version + 1
    assert ds3.layers[0].identity == report.identity != ds2.layers[0].identity
    assert Dataset.open(ds.uri, version=ds2.version).layers == ds2.layers


def test_output_names_must_be_free(make_dataset: Any) -> None:
    ds = make_dataset(4, images=False)
    with pytest.raises(SchemaConflictError, match="'label'"):
        label_map(ds, outputs={"label": "int64", "note": "txt"})


def test_executors_produce_identical_layers(make_dataset: Any) -> None:
    runs = {
        "threads": LocalExecutor("threads", workers=2),
        "processes": LocalExecutor("processes", workers=2),
        "inline": LocalExecutor("threads", workers=1),
    }
    contents = {}
    for name, executor in runs.items():
        ds2, report = stats(make_dataset(14), executor=executor)
        assert report.computed_partitions == (0, 1, 2)
        contents[name] = layer_content(ds2, ["mean_color"], ["thumb"])
    assert contents["threads"] == contents["processes"] == contents["inline"]
    assert contents["threads"][13]["thumb"] is not None


def test_static_partition_ranks_one_after_the_other(make_dataset: Any) -> None:
    ds = make_dataset(14)
    first, r0 = stats(ds, executor=StaticPartitionExecutor(0, 2))
    assert r0.pending and not r0.committed and r0.computed_partitions == (0, 2)
    assert first is ds and Dataset.open(ds.uri).layers == ()  # nothing visible yet
    second, r1 = stats(Dataset.open(ds.uri), executor=StaticPartitionExecutor(1, 2))
    assert r1.committed and not r1.pending
    assert r1.computed_partitions == (1,) and r1.skipped_partitions == (0, 2)
    assert second.version == ds.version + 1
    again, r2 = stats(ds, executor=StaticPartitionExecutor(0, 2))
    assert r2.already_committed and again.version == second.version
    reference, _ = stats(make_dataset(14))
    assert layer_content(second, ["mean_color"], ["thumb"]) == layer_content(
        reference, ["mean_color"], ["thumb"]
    )


def test_a_failed_run_resumes_where_it_stopped(
    make_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = make_dataset(16, images=False)
    calls: list[str] = []

    def flaky(batch: dict[str, list[Any]]) -> dict[str, Any]:
        calls.extend(batch["sample_id"])
        if "s00009" in batch["sample_id"] and flaky.broken:  # type: ignore[attr-defined]
            raise OSError("transient")
        return _map_fns.label_plus(batch)

    flaky.broken = True  # type: ignore[attr-defined]
    with pytest.raises(MapError, match="s00008"):
        label_map(ds, flaky, version="v1")
    assert Dataset.open(ds.uri).layers == ()
    calls.clear()
    flaky.broken = False  # type: ignore[attr-defined]
    ds2, report = label_map(ds, flaky, version="v1")
    assert report.skipped_partitions == (0, 1) and report.computed_partitions == (2, 3)
    assert calls == [f"s{i:05d}" for i in range(8, 16)]
    assert ds2.column("bigger").to_pylist() == [100 + i % 5 for i in range(16)]


def test_kill_and_resume(
    make_dataset: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = make_dataset(24, images=False)  # 6 partitions of 4 rows, 2 batches each
    root = Path(ds.uri.removeprefix("file://"))
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine)
    calls1, calls2 = tmp_path / "calls1", tmp_path / "calls2"
    env = {**os.environ, "MAP_SLEEP": "0.4", "MAP_CALLS_FILE": str(calls1)}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), "4"], env=env)
    staging = root / "layers" / "slow" / "_staging"
    try:
        deadline = time.monotonic() + 120
        while len(list(staging.glob("*/part-*.parquet"))) < 2:
            assert proc.poll() is None, "the map finished before it could be killed"
            assert time.monotonic() < deadline, "no partition was staged in time"
            assert Dataset.open(str(root)).layers == ()  # readers see no partial layer
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    staged = sorted(int(p.stem.split("-")[1]) for p in staging.glob("*/part-*.parquet"))
    assert 2 <= len(staged) < 6 and staged == list(range(len(staged)))
    # readers never see a partial layer
    after = Dataset.open(str(root))
    assert after.version == 1 and after.layers == () and "bigger" not in after.columns

    monkeypatch.setenv("MAP_SLEEP", "0")
    monkeypatch.setenv("MAP_CALLS_FILE", str(calls2))
    ds2, report = label_map(Dataset.open(str(root)), _map_fns.slow_label)
    assert report.skipped_partitions == tuple(staged)
    missing = [k for k in range(6) if k not in staged]
    assert report.computed_partitions == tuple(missing)
    assert calls2.read_text().split() == [
        f"s{i:05d}" for k in missing for i in range(4 * k, 4 * k + 4)
    ]

    monkeypatch.setenv("MAP_CALLS_FILE", str(tmp_path / "calls3"))
    reference, _ = label_map(Dataset.open(str(pristine)), _map_fns.slow_label)
    assert report.identity == reference.layers[0].identity
    assert layer_content(ds2, ["bigger"], ["note"]) == layer_content(
        reference, ["bigger"], ["note"]
    )
    assert not list(staging.glob("*/part-*.parquet"))  # the commit cleared the staging


def test_skip_mode_end_to_end(make_dataset: Any) -> None:
    ds = make_dataset(10, images=False)

    def picky(batch: dict[str, list[Any]]) -> dict[str, Any]:
        if 3 in batch["label"]:
            raise ValueError("no threes")
        return _map_fns.label_plus(batch)

    with pytest.raises(MapError, match="no threes"):
        label_map(ds, picky, version="p")
    ds2, report = label_map(ds, picky, version="p", on_error="skip")
    assert report.num_skipped_samples == 2 and report.skipped_ids == ("s00003", "s00008")
    assert ds2.column("bigger").to_pylist() == [
        None if i % 5 == 3 else 100 + i % 5 for i in range(10)
    ]
    assert ds2.present("note").tolist() == [i % 5 != 3 for i in range(10)]
    assert ds2.get(3, ["note"]) == {"note": None}
    assert ds2.get(4, ["note"]) == {"note": b"label 4"}


def test_refused_datasets(make_dataset: Any) -> None:
    mem = make_dataset(4, memory=True, images=False)
    with pytest.raises(MapSpecError, match="memory"):
        label_map(mem, executor="processes")
    disk = make_dataset(4, images=False)
    with pytest.raises(MapSpecError, match="view"):
        label_map(disk.take([0, 1]))


def test_threads_on_a_memory_dataset(make_dataset: Any) -> None:
    ds2, report = label_map(make_dataset(6, memory=True, images=False), executor="threads")
    assert ds2.column("bigger").to_pylist() == [100 + i % 5 for i in range(6)]
    assert report.computed_partitions == (0, 1)


def test_progress_on_stderr(make_dataset: Any, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    label_map(make_dataset(8, memory=True, images=False), progress=True)
    err = capfd.readouterr().err
    assert "map slow" in err and "8/8" in err and "sample" in err  # a tqdm bar
    label_map(make_dataset(8, memory=True, images=False), progress=False)
    assert capfd.readouterr().err == ""
    seen: list[tuple[int, int | None]] = []
    label_map(
        make_dataset(8, memory=True, images=False),
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen[0] == (0, 8) and seen[-1] == (8, 8) and len(seen) == 3  # per partition
    assert capfd.readouterr().err == ""


def test_progress_default_follows_the_terminal(
    make_dataset: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = make_dataset(8, memory=True, images=False)
    monkeypatch.setenv("FERROLOAD_PROGRESS", "1")
    capfd.readouterr()
    ds.map(
        lambda b: {"bigger": [x + 100 for x in b["label"]]},
        inputs=["label"],
        outputs={"bigger": "int64"},
        layer="forced",
        executor="threads",
    )
    assert "map forced" in capfd.readouterr().err
    monkeypatch.setenv("FERROLOAD_PROGRESS", "0")
    ds.map(
        lambda b: {"other": [x + 101 for x in b["label"]]},
        inputs=["label"],
        outputs={"other": "int64"},
        layer="hidden",
        executor="threads",
    )
    assert capfd.readouterr().err == ""


def test_skipped_samples_are_logged_once(
    make_dataset: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def picky(batch: dict[str, list[Any]]) -> dict[str, Any]:
        if 3 in batch["label"]:
            raise ValueError("no threes")
        return _map_fns.label_plus(batch)

    label_map(make_dataset(10, images=False), picky, version="p", on_error="skip")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "2 samples" in warnings[0] and "'s00003'" in warnings[0]


def test_float_lists_and_arrow_types_round_trip(make_dataset: Any) -> None:
    ds = make_dataset(5, images=False)

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        n = len(batch["label"])
        return {"emb": np.ones((n, 2), dtype=np.float32) / 3, "tags": [["a"]] * n}

    ds2, _ = map_dataset(
        ds,
        fn,
        inputs=["label"],
        outputs={"emb": "float32[2]", "tags": pa.list_(pa.string())},
        layer="emb",
        version="1",
        progress=False,
        return_report=True,
    )
    third = float(np.float32(1 / 3))
    assert ds2[0]["emb"] == [third, third] and ds2[0]["tags"] == ["a"]


def test_reading_another_layer_ties_the_identity_to_it(make_dataset: Any) -> None:
    ds = make_dataset(6, images=False)
    ds2, _ = label_map(ds, version="v1")

    def from_layer(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"neg": [-x for x in batch["bigger"]]}

    def chained(d: Dataset) -> tuple[Dataset, MapReport]:
        return map_dataset(
            d,
            from_layer,
            inputs=["bigger"],
            outputs={"neg": "int64"},
            layer="chained",
            progress=False,
            overwrite=True,
            return_report=True,
        )

    ds3, first = chained(ds2)
    assert ds3.column("neg").to_pylist() == [-(100 + i % 5) for i in range(6)]
    assert chained(ds3)[1].already_committed
    ds4, _ = label_map(ds3, version="v2", overwrite=True)  # the input layer changes
    _, again = chained(ds4)
    assert not again.already_committed and again.identity != first.identity
