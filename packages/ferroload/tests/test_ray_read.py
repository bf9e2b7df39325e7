"""`ferroload.ray.read` and its `Datasource` on a local two-CPU Ray cluster."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import ImageDecoder, decode_image
from ferroload_format import ChecksumMismatchError, ColumnNotFoundError, Dataset, QueryError, Writer

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="the ray extra is not installed")

from ferroload.ray._read import Datasource, plan_tasks, read  # noqa: E402

N = 40  # samples of the latest version; the first holds FIRST
FIRST = 30
COLUMNS = ["sample_id", "image", "text", "label", "caption"]


def jpeg(i: int) -> bytes:
    rng = np.random.default_rng(i)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def write(uri: str, first: int, count: int, **options: Any) -> None:
    """Samples `first…first+count`: a JPEG, a text on even ones, `label`, `caption`."""
    with Writer(uri, "raytest", shard_size=4096, **options) as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("text", "txt", "text", "raw")
        for i in range(first, first + count):
            data = {"image": jpeg(i), **({"text": f"text {i}".encode()} if i % 2 == 0 else {})}
            w.add(f"s{i:03d}", data, {"label": i % 5, "caption": f"caption {i}"})


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A dataset on disk: version 1 has FIRST samples, version 2 appends to N."""
    root = str(tmp_path_factory.mktemp("ray-read") / "ds")
    write(root, 0, FIRST)
    write(root, FIRST, N - FIRST)
    return root


def expected(uri: str, version: int | None = None, **options: Any) -> list[dict[str, Any]]:
    """Every sample of the version, as `Dataset.get` reads it."""
    ds = Dataset.open(uri, version=version, **options)
    return [ds.get(i) for i in range(len(ds))]


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows by sample id (Ray hands blocks out in the order they finish)."""
    out = {r["sample_id"]: r for r in rows}
    assert len(out) == len(rows)
    return out


def test_rows_are_the_samples(ray_cluster: Any, uri: str) -> None:
    ds = read(uri)
    assert ds.count() == N
    assert ds.schema().names == COLUMNS
    want = by_id(expected(uri))
    assert want["s001"]["text"] is None  # a missing payload reads as null
    assert all(want[r["sample_id"]] == r for r in ds.take(5))
    assert by_id(ds.take_all()) == want
    block = ray_cluster.get(ds.to_arrow_refs()[0])
    assert block["sample_id"].to_pylist() == sorted(block["sample_id"].to_pylist())
    about = json.loads(block.schema.field("image").metadata[b"ferroload.modality"])
    assert about == {"ext": "jpg", "kind": "tensor", "codec_hint": "image"}


def test_projection_where_and_version(ray_cluster: Any, uri: str) -> None:
    rows = read(uri, columns=["label", "image"], where="label = 3").take_all()
    assert list(rows[0]) == ["label", "image"]
    want = [{"label": 3, "image": s["image"]} for s in expected(uri) if s["label"] == 3]
    assert len(rows) == N // 5
    assert sorted(rows, key=lambda r: r["image"]) == sorted(want, key=lambda r: r["image"])
    old = read(uri, version=1, columns=["sample_id", "caption"])
    assert old.count() == FIRST
    assert by_id(old.take_all()) == {
        s["sample_id"]: {"sample_id": s["sample_id"], "caption": s["caption"]}
        for s in expected(uri, 1)
    }


def test_decode(ray_cluster: Any, uri: str) -> None:
    want = by_id(expected(uri))
    rows = read(uri, columns=["sample_id", "image", "text"], decode=True).take_all()
    for sid, row in by_id(rows).items():
        np.testing.assert_array_equal(row["image"], decode_image(want[sid]["image"]))
        text = want[sid]["text"]
        assert row["text"] == (None if text is None else text.decode())
    small = read(uri, columns=["image", "label"], decode={"image": ImageDecoder((8, 8))})
    batches = list(small.iter_torch_batches(batch_size=16))
    assert sum(len(b["label"]) for b in batches) == N
    first = batches[0]["image"]
    assert tuple(first.shape) == (16, 8, 8, 3) and str(first.dtype) == "torch.uint8"
    decoded = {ImageDecoder((8, 8)).decode(s["image"]).tobytes() for s in want.values()}
    assert all(image.numpy().tobytes() in decoded for image in first)


def test_decoded_arrays_of_several_shapes_and_missing_payloads(ray_cluster: Any, uri: str) -> None:
    want = by_id(expected(uri))
    texts = {"text": lambda b: np.frombuffer(b, np.uint8)}  # lengths vary; odd rows lack it
    rows = by_id(read(uri, columns=["sample_id", "text"], decode=texts).take_all())
    assert rows.keys() == want.keys()
    for sid, row in rows.items():
        text = want[sid]["text"]
        if text is None:
            assert row["text"] is None
        else:
            np.testing.assert_array_equal(row["text"], np.frombuffer(text, np.uint8))
    ones = {"text": lambda b: np.ones(2)}  # one shape, some rows null
    fixed = by_id(read(uri, columns=["sample_id", "text"], decode=ones).take_all())
    assert fixed["s001"]["text"] is None and fixed["s002"]["text"].tolist() == [1.0, 1.0]


def test_streaming_split_halves_cover_the_rows(ray_cluster: Any, uri: str) -> None:
    splits = read(uri, columns=["sample_id"]).streaming_split(2)
    seen: list[list[str]] = [[], []]

    def consume(k: int) -> None:  # the halves are consumed together, as Ray Train does
        for batch in splits[k].iter_batches(batch_size=8):
            seen[k].extend(batch["sample_id"].tolist())

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert seen[0] and seen[1] and not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == [f"s{i:03d}" for i in range(N)]


def test_tasks_read_their_own_shards(ray_cluster: Any, uri: str) -> None:
    shards = Dataset.open(uri).shard_of()
    largest = int(np.bincount(shards).max())  # no shard has to be split
    tasks = Datasource(uri, rows_per_block=largest).get_read_tasks(1)
    assert len(tasks) > 1 and sum(t.metadata.num_rows for t in tasks) == N
    files = [set(t.metadata.input_files) for t in tasks]
    assert all(files) and sum(len(f) for f in files) == len(set().union(*files))
    blocks = read(uri, rows_per_block=largest).materialize().num_blocks()
    assert blocks == len(plan_tasks(shards, largest)) == len(tasks)
    # a shard whose rows are not together still goes to one task; a large one is cut
    codes = np.array([0, 0, 1, 1, 0, 2, 2, 2, 2, 2, 2], np.int32)
    plan = [p.tolist() for p in plan_tasks(codes, 3)]
    assert plan == [[0, 1, 4], [2, 3], [5, 6, 7], [8, 9, 10]]


@pytest.mark.s3
def test_s3(ray_cluster: Any, s3_uri: tuple[str, dict[str, Any]]) -> None:
    root, options = s3_uri
    write(root, 0, 12, storage_options=options)
    rows = read(root, columns=["sample_id", "image", "label"], storage_options=options).take_all()
    want = expected(root, storage_options=options)
    assert by_id(rows) == by_id([{k: s[k] for k in ("sample_id", "image", "label")} for s in want])


def test_errors(ray_cluster: Any, uri: str, tmp_path: Path) -> None:
    with pytest.raises(ColumnNotFoundError, match="nope"):
        read(uri, columns=["image", "nope"])
    with pytest.raises(QueryError):
        read(uri, where="label = = 3")
    with pytest.raises(ValueError, match="not a modality read"):
        read(uri, columns=["image"], decode={"text": bytes.decode})
    for bad in (0, True, 2.0):  # a bool is no count, though Python's bool is an int
        with pytest.raises(ValueError, match="rows_per_block must be a positive int"):
            Datasource(uri, rows_per_block=bad)  # type: ignore[arg-type]
    damaged = str(tmp_path / "ds")
    write(damaged, 0, 3)
    ds = Dataset.open(damaged)
    path, _, _ = ds.shard_ref(int(ds.shard_of()[1]))
    with open(Path(damaged) / path, "r+b") as f:
        f.seek(int(ds.offsets("image")[1]) + 100)
        f.write(b"\0\0\0\0")
    with pytest.raises(ChecksumMismatchError, match="s001"):
        read(damaged, columns=["image"]).take_all()


def test_without_ray_the_error_says_what_to_install() -> None:
    code = "import sys; sys.modules['ray'] = None; import ferroload.ray"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "pip install 'ferroload[ray]'" in proc.stderr
