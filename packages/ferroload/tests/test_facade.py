from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import ferroload
import ferroload.loader
import ferroload_convert
import ferroload_format
import ferroload_store


def test_public_api_is_importable() -> None:
    assert len(set(ferroload.__all__)) == len(ferroload.__all__)  # order: ruff RUF022
    for name in ferroload.__all__:
        assert getattr(ferroload, name) is not None
    assert ferroload.Writer is ferroload_format.Writer
    assert ferroload.import_webdataset is ferroload_convert.import_webdataset
    assert ferroload.FerroloadError is ferroload_store.FerroloadError


def _jpeg() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (300, 240), (200, 30, 30)).save(buf, "JPEG")
    return buf.getvalue()


def test_design_quickstart_runs_as_written(tmp_path: Path) -> None:
    jpg_bytes = _jpeg()
    root = str(tmp_path / "ds")
    w = ferroload.Writer(root, "demo")
    w.declare("image", "jpg", "tensor", "image")
    w.add("s0000", {"image": jpg_bytes}, {"label": 3, "caption": "a cat"})
    w.close()

    ds = ferroload.Dataset.open(root)
    assert ds[0] == {"sample_id": "s0000", "image": jpg_bytes, "label": 3, "caption": "a cat"}
    assert ds.get(0, ["image"]) == {"image": jpg_bytes}
    assert ds.subset("label = 3", return_indices=True).tolist() == [0]
    rows = duckdb.sql(
        f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet') "
        "WHERE label = 3 AND caption LIKE '%cat%'"
    ).fetchall()
    assert rows == [("s0000",)]


def test_design_quickstart_loader_part(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="out='torch' needs the torch extra")
    root = str(tmp_path / "ds")
    with ferroload.Writer(root, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.add("s0000", {"image": _jpeg()}, {"label": 3, "caption": "a cat"})
    dl = ferroload.make_loader(
        root, batch_size=64, images=["image"], meta=["label"], resize=(224, 224), out="torch"
    )
    for epoch in range(2):
        dl.set_epoch(epoch)  # deterministic reshuffle, DDP-aware
        for batch in dl:
            assert batch["image"].dtype == torch.uint8
            assert batch["image"].shape == (1, 224, 224, 3)  # uint8 NHWC tensor
            assert batch["label"].tolist() == [3]
    assert ferroload.loader.FerroTorchDataset.__module__ == "ferroload_loader.torch"
    assert isinstance(ferroload.Sampler(4), ferroload.loader.Sampler)


def test_the_demo_writes_reopens_and_queries(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    cmd = [sys.executable, "-m", "ferroload.demo", str(folder), "--samples", "300"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert "300 samples" in out
    assert "plain DuckDB" in out
    assert "triangle" in out
    ds = ferroload.Dataset.open(folder)
    assert len(ds) == 300
    assert ds[0]["image"][:2] == b"\xff\xd8"  # real JPEGs
    assert set(ds.to_table(["shape"]).column("shape").to_pylist()) == {
        "circle",
        "square",
        "triangle",
    }
    # running it again replaces its own dataset …
    subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert ferroload.Dataset.open(folder).version == 1
    # … but never touches a folder that holds something else
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"x")
    res = subprocess.run(
        [sys.executable, "-m", "ferroload.demo", str(other)], capture_output=True, text=True
    )
    assert res.returncode != 0
    assert "not a ferroload demo dataset" in res.stderr
    assert (other / "cat.jpg").read_bytes() == b"x"


@pytest.mark.parametrize("seed", [0, 1])
def test_demo_images_are_deterministic(seed: int) -> None:
    from ferroload.demo import draw_samples

    a = list(draw_samples(5, seed=seed))
    b = list(draw_samples(5, seed=seed))
    assert a == b
    assert {m["shape"] for _, _, m in draw_samples(60, seed=seed)} == {
        "circle",
        "square",
        "triangle",
    }
