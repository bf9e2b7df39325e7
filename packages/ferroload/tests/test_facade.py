from __future__ import annotations

import io
import re
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
    # ferroload_format's Writer, also taking ferroload-rs 0.1.1's spellings (ferroload.compat)
    assert issubclass(ferroload.Writer, ferroload_format.Writer)
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
    # ferroload.loader's stands for ferroload_loader.torch's (and takes 0.1.1's calls too)
    from ferroload_loader.torch import FerroTorchDataset as Torch

    assert issubclass(Torch, ferroload.loader.FerroTorchDataset)
    assert isinstance(ferroload.Sampler(4), ferroload.loader.Sampler)


EPOCH_LINE = re.compile(
    r"^epoch (\d+)/(\d+)  train loss ([\d.]+)  val accuracy ([\d.]+)%  "
    r"loader ([\d,]+) samples/s  train ([\d,]+) samples/s$",
    re.MULTILINE,
)


def _demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ferroload.demo", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_demo_writes_queries_and_trains(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the demo trains with the torch extra")
    folder = tmp_path / "demo"
    res = _demo(str(folder), "--samples", "300", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "300 samples" in out
    assert "subset     split = 'val': 60 samples" in out
    assert "plain DuckDB, without ferroload" in out
    assert re.search(r"│ triangle │ gold +│ +\d+ │", out)  # the query's result table
    epochs = EPOCH_LINE.findall(out)
    assert [(e[0], e[1]) for e in epochs] == [("1", "2"), ("2", "2")]
    for _, _, loss, accuracy, loader, train in epochs:
        assert float(loss) > 0
        assert 0 <= float(accuracy) <= 100
        assert int(loader.replace(",", "")) > 0 and int(train.replace(",", "")) > 0
    assert "where split = 'train'" in out

    ds = ferroload.Dataset.open(folder)
    assert len(ds) == 300
    assert ds[0]["image"][:2] == b"\xff\xd8"  # real JPEGs
    table = ds.to_table(["shape", "split"])
    assert set(table.column("shape").to_pylist()) == {"circle", "square", "triangle"}
    assert table.column("split").to_pylist().count("val") == 60


def test_the_demo_never_overwrites_another_folder(tmp_path: Path) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"x")
    res = _demo(str(other), cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"error: {other} exists and is not a ferroload demo dataset; pass another folder"
    ]
    assert [p.name for p in other.iterdir()] == ["cat.jpg"]
    assert (other / "cat.jpg").read_bytes() == b"x"

    mine = tmp_path / "mine"
    with ferroload.Writer(mine, "mine") as w:
        w.add("s0", None, {"label": 1})
    res = _demo(str(mine), cwd=tmp_path)
    assert res.returncode == 1
    assert "holds dataset 'mine', not the demo" in res.stderr
    assert len(ferroload.Dataset.open(mine)) == 1

    res = _demo(str(tmp_path / "demo"), "--samples", "0", cwd=tmp_path)  # a usage error
    assert res.returncode == 2
    assert "--samples" in res.stderr
    assert not (tmp_path / "demo").exists()


def test_the_demo_without_torch_prints_the_install_hint(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    code = (
        "import sys; sys.modules['torch'] = None  # import torch raises ImportError\n"
        "from ferroload.demo import main; sys.exit(main(sys.argv[1:]))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(folder), "--samples", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "error: the demo trains a small CNN with torch, which is not installed: "
        "pip install 'ferroload-loader[torch]'"
    ]
    assert res.stdout == ""
    assert not folder.exists()  # nothing is written before the check


def test_demo_run_learns_the_shapes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the demo trains with the torch extra")
    from ferroload.demo import DemoResult, run

    threads_before = torch.get_num_threads()
    rng_before = torch.random.get_rng_state()
    report = io.StringIO()
    result = run(tmp_path / "demo", samples=1000, seed=0, out=report)

    assert isinstance(result, DemoResult)
    assert result.uri == str(tmp_path / "demo")
    assert (result.num_samples, result.num_train, result.num_val) == (1000, 800, 200)
    assert sum(n for _, _, n in result.query_result) == 1000
    assert {shape for shape, _, _ in result.query_result} == {"circle", "square", "triangle"}
    assert [e.epoch for e in result.epochs] == [1, 2]
    first, last = result.epochs
    assert last.train_loss < first.train_loss
    assert last.val_accuracy > 0.8  # 3 classes: chance is 1/3 (1.0 with seed 0)
    assert all(e.loader_samples_per_s > e.train_samples_per_s > 0 for e in result.epochs)
    assert len(EPOCH_LINE.findall(report.getvalue())) == 2
    # the caller's torch settings are left as they were
    assert torch.get_num_threads() == threads_before
    assert torch.equal(torch.random.get_rng_state(), rng_before)


def test_demo_run_is_deterministic_and_replaces_its_own_dataset(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the demo trains with the torch extra")
    from ferroload.demo import run

    folder = tmp_path / "demo"
    first = run(folder, samples=200, epochs=1, batch_size=16, seed=3, out=io.StringIO())
    again = run(folder, samples=200, epochs=1, batch_size=16, seed=3, out=io.StringIO())
    assert ferroload.Dataset.open(folder).version == 1  # replaced, not appended to
    assert len(ferroload.Dataset.open(folder)) == 200
    assert again.query_result == first.query_result
    assert [(e.train_loss, e.val_accuracy) for e in again.epochs] == [
        (e.train_loss, e.val_accuracy) for e in first.epochs
    ]
    other = run(folder, samples=200, epochs=1, batch_size=16, seed=4, out=io.StringIO())
    assert other.epochs[0].train_loss != first.epochs[0].train_loss


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


def _python(code: str) -> str:
    """Run `code` in a fresh interpreter (a plain `import ferroload`, nothing imported
    before it) and return what it prints."""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_codec_and_loader_are_lazy_attributes_of_a_plain_import() -> None:
    code = (
        "import sys, ferroload\n"
        "print(sorted(m for m in ('ferroload.codec', 'ferroload.loader', 'torch', 'lightning')"
        " if m in sys.modules))\n"
        "print('codec' in dir(ferroload), 'loader' in dir(ferroload))\n"
        "print(ferroload.codec.decode_image is ferroload.codec.ferroload_codec.decode_image)\n"
        "print(ferroload.loader.make_loader is ferroload.make_loader)\n"
        "print(sys.modules['ferroload.loader'] is ferroload.loader, "
        "sys.modules['ferroload.codec'] is ferroload.codec)\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n"
    )
    assert _python(code).splitlines() == [
        "[]",  # nothing lazy is imported by `import ferroload`
        "True True",
        "True",
        "True",
        "True True",
        "[]",  # `ferroload.loader` does not import torch either
    ]


def test_unknown_attribute_of_the_facade_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"module 'ferroload' has no attribute 'lodaer'"):
        ferroload.lodaer  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(ferroload, "torch")
