"""The real `webdataset` package reads ferroload shards unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferroload_format import Dataset, Writer

wds = pytest.importorskip("webdataset", reason="webdataset is a dev dependency of the workspace")


def test_webdataset_reads_every_sample(local_uri: str) -> None:
    expected = {}
    with Writer(local_uri, "wds", shard_size=8192) as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("caption", "txt", "text", "raw")
        w.declare("mask", "png", "tensor", "image")
        for i in range(150):
            data = {"image": bytes([i % 256]) * (100 + i * 13), "caption": f"sample {i}".encode()}
            if i % 4 == 0:
                data["mask"] = b"\x89PNG" + bytes(i)
            sid = f"k{i:04d}_x-y"
            w.add(sid, data, {"label": i})
            expected[sid] = {
                f"{m}.{ext}": data[m]
                for m, ext in (("image", "jpg"), ("caption", "txt"), ("mask", "png"))
                if m in data
            }
    ds = Dataset.open(local_uri)
    assert ds.num_shards > 1
    urls = [str(Path(local_uri, s.path)) for s in ds.manifest.shards]
    seen = {}
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        payloads = {k: v for k, v in sample.items() if not k.startswith("__")}
        seen[sample["__key__"]] = payloads
    assert seen == expected


def test_webdataset_decoders_key_on_the_extension(local_uri: str) -> None:
    with Writer(local_uri, "wds") as w:
        w.declare("caption", "txt", "text", "raw")
        w.declare("label", "cls", "bytes", "raw")
        w.add("a", {"caption": "héllo".encode(), "label": b"7"})
    ds = Dataset.open(local_uri)
    urls = [str(Path(local_uri, ds.manifest.shards[0].path))]
    (sample,) = list(wds.WebDataset(urls, shardshuffle=False).decode())
    assert sample["caption.txt"] == "héllo"
    assert sample["label.cls"] == 7
