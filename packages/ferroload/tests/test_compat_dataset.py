"""`ferroload.Dataset` and `Dataset.map` in ferroload-rs 0.1.1's spellings: each works
as it did with a FutureWarning naming the 0.2 spelling; 0.2's own calls are unchanged."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import ferroload
import ferroload_format


def _jpg(fill: int, size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), fill, dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _build(root: Path, n: int = 6) -> ferroload.Dataset:
    w = ferroload.Writer(str(root), "base")
    w.declare("image", "jpg", "tensor", "image")
    for i in range(n):
        w.add(f"s{i:03d}", {"image": _jpg(i * 20)}, {"label": i % 3, "url": f"u{i}"})
    w.close()
    return ferroload.Dataset.open(str(root))


@pytest.fixture
def ds(tmp_path: Path) -> ferroload.Dataset:
    return _build(tmp_path / "ds")


def test_the_facade_dataset_is_the_format_dataset(ds: ferroload.Dataset) -> None:
    assert isinstance(ds, ferroload_format.Dataset)
    assert isinstance(ds.subset("label = 1"), ferroload.Dataset)  # views keep the class
    assert ds.get(1, ["label"]) == {"label": 1}  # 0.2 answers unchanged, no warning
    assert [m.name for m in ds.modalities] == ["image"] and ds.num_shards == 1
    assert ds.read(np.array([0, 1]), "image")[1] == ds.get(1)["image"]


def test_samples_answer_0_1_1_keys_with_a_warning(ds: ferroload.Dataset) -> None:
    s = ds.get(4)
    assert s["sample_id"] == "s004" and s["label"] == 1
    with pytest.warns(FutureWarning, match=r"sample\[name\]"):
        assert s["meta"] == {"label": 1, "url": "u4"}
    with pytest.warns(FutureWarning, match="is not None"):
        assert s["image_present"] is True
    with pytest.warns(FutureWarning, match="sample_id"):
        assert s["basename"] == "s004"
    with pytest.raises(KeyError):
        s["nope"]
    with pytest.warns(FutureWarning, match="columns="):
        assert set(ds.get(2, modalities=[])) == {"label", "url"}


def test_0_1_1_calls_of_values(ds: ferroload.Dataset) -> None:
    with pytest.warns(FutureWarning, match=r"ds\.modalities \("):
        assert ds.modalities() == {"image": {"ext": "jpg", "kind": "tensor", "codec": "image"}}
    with pytest.warns(FutureWarning, match="property"):
        assert ds.num_shards() == 1
    with pytest.warns(FutureWarning, match="to_json"):
        assert ds.manifest()["name"] == "base"
    assert ds.manifest.version == 1
    with pytest.warns(FutureWarning, match="verify"):
        assert ds.verify() == 6
    assert ds.verify().ok
    with pytest.warns(FutureWarning, match="ds.uri"):
        assert ds.root == ds.store.local_path().as_posix()  # type: ignore[union-attr]
    with pytest.warns(FutureWarning, match="return_indices=True"):
        assert ds.subset("label = 2", True).tolist() == [2, 5]


def test_0_1_1_reads(ds: ferroload.Dataset, tmp_path: Path) -> None:
    with pytest.warns(FutureWarning):
        assert ds.read(3, "image") == ds.get(3)["image"]
    with pytest.warns(FutureWarning):
        assert ds.read_many([0, 2], "image") == [ds.get(0)["image"], ds.get(2)["image"]]
    with pytest.warns(FutureWarning):
        buf, spans = ds.read_batch([1, 2], "image")
    assert buf[spans[1][0] : spans[1][0] + spans[1][1]] == ds.get(2)["image"]
    with pytest.warns(FutureWarning):
        imgs = ds.decode_many([0, 1], "image", resize=(8, 8))
    assert imgs[0].shape == (8, 8, 3) and imgs[1].dtype == np.uint8
    with pytest.warns(FutureWarning):
        assert ds.meta_batch([0, 4], ["label"]) == {"label": [0, 1]}
    with pytest.warns(FutureWarning, match="cache="):
        again = ferroload.Dataset.open(ds.uri, str(tmp_path / "cache"))
    assert len(again) == 6
    with pytest.raises(AttributeError, match=r"0\.2"):
        ds.jax()


def test_map_in_0_1_1_form(ds: ferroload.Dataset) -> None:
    calls = {"n": 0}

    def enrich(im: np.ndarray, label: int) -> tuple[Any, float, str]:
        calls["n"] += 1
        return im.mean(axis=2).astype("float32"), float(im.mean()), f"class{label}"

    with pytest.warns(FutureWarning, match="layer="):
        out = ds.map(
            enrich,
            inputs=["image", "label"],
            outputs={"depth": "array", "brightness": "scalar", "tag": "text"},
            name="features",
            batch_size=4,
        )
    assert calls["n"] == 6 and out.version == 2
    with pytest.warns(FutureWarning):
        assert out.read_array(0, "depth").shape == (16, 16)
    s = out.get(4)
    assert s["tag"] == "class1" and isinstance(s["brightness"], float) and s["depth"] is not None
    # resume: a layer of that name has every row
    with pytest.warns(FutureWarning):
        again = ds.map(
            enrich,
            inputs=["image", "label"],
            outputs={"depth": "array", "brightness": "scalar", "tag": "text"},
            name="features",
        )
    assert calls["n"] == 6 and again.version == 2


def test_map_sparse_bytes_output_on_a_view(ds: ferroload.Dataset) -> None:
    def fetch(url: str) -> bytes | None:
        return None if url == "u3" else f"MP4 {url}".encode()

    view = ds.subset("label IN (0, 1)")  # rows 0, 1, 3, 4
    with pytest.warns(FutureWarning):
        out = view.map(
            fetch,
            inputs=["url"],
            outputs={"clip": {"type": "bytes", "ext": "mp4", "codec": "video"}},
            name="clip",
        )
    assert len(out) == 4
    full = ferroload.Dataset.open(ds.uri)
    assert [full.get(i)["clip"] for i in range(6)] == [
        b"MP4 u0",
        b"MP4 u1",
        None,
        None,
        b"MP4 u4",
        None,
    ]
    mod = full.manifest.layer("clip").modalities[0]  # type: ignore[union-attr]
    assert (mod.ext, mod.codec_hint) == ("mp4", "video")


def test_typed_outputs_and_the_0_2_modality(ds: ferroload.Dataset) -> None:
    assert ferroload.Modality("thumb", "png", "tensor", "image") == ferroload_format.Modality(
        "thumb", "png", "tensor", "image"
    )
    with pytest.warns(FutureWarning):
        depth, thumb, tag = (
            ferroload.Modality("npy"),
            ferroload.Modality("jpg", codec="image"),
            ferroload.Annotation(),
        )
    with pytest.warns(FutureWarning):
        out = ds.map(
            lambda im: (im[:4, :4, 0], _jpg(1, 8), "x"),
            inputs=["image"],
            outputs={"d": depth, "thumb": thumb, "tag": tag},
            name="typed",
        )
    with pytest.warns(FutureWarning):
        assert out.modalities()["thumb"] == {"ext": "jpg", "kind": "tensor", "codec": "image"}
    assert out.get(0)["thumb"] == _jpg(1, 8) and out.get(0)["tag"] == "x"


def test_topology_and_static_partitions(
    ds: ferroload.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in (
        "WORLD_SIZE",
        "RANK",
        "LOCAL_WORLD_SIZE",
        "NNODES",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "RAY_ADDRESS",
        "FERROLOAD_EXECUTOR",
    ):
        monkeypatch.delenv(k, raising=False)
    assert ferroload.detect_topology().num_nodes == 1
    assert type(ferroload.select_executor()).__name__ == "LocalExecutor"
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    t = ferroload.detect_topology()
    assert (t.source, t.num_nodes, t.rank) == ("torchrun", 2, 2)
    assert isinstance(ferroload.select_executor(t), ferroload.StaticPartitionExecutor)
    for rank in range(3):
        topo = ferroload.Topology(num_nodes=2, node_rank=0, local_size=1, world_size=3, rank=rank)
        with pytest.warns(FutureWarning):
            ex = ferroload.StaticPartitionExecutor(topo)
        with pytest.warns(FutureWarning):
            ferroload.Dataset.open(ds.uri).map(
                lambda label: int(label) * 10,
                inputs=["label"],
                outputs={"ten": "scalar"},
                name="ten",
                executor=ex,
            )
    assert "ten" not in ferroload.Dataset.open(ds.uri).columns  # staged, not committed
    with pytest.warns(FutureWarning):
        ferroload.commit_layer(ds.uri, "ten")
    out = ferroload.Dataset.open(ds.uri)
    assert [out.get(i)["ten"] for i in range(6)] == [0, 10, 20, 0, 10, 20]
    assert out.verify().ok
    # the same class takes 0.2's arguments for 0.2's map
    assert ferroload.StaticPartitionExecutor(0, 2).world_size == 2


def test_the_0_1_1_modules_warn() -> None:
    import importlib
    import sys

    for name in ("ferroload.dataset", "ferroload.executor"):
        sys.modules.pop(name, None)
        with pytest.warns(FutureWarning, match=name):
            mod = importlib.import_module(name)
        assert (
            mod.Dataset is ferroload.Dataset
            if name == "ferroload.dataset"
            else mod.Topology is ferroload.Topology
        )
    with pytest.warns(FutureWarning, match="ferroload.Dataset"):
        assert ferroload.FerroDataset is ferroload.Dataset
