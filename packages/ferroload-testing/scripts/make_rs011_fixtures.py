"""Write the ferroload-rs 0.1.1 fixtures with the published 0.1.1 wheel.

Run it with a Python that has `ferroload==0.1.1` (the Rust original) installed, never
with the project's environment (the package names clash):

    uv venv --no-config /tmp/rs011
    VIRTUAL_ENV=/tmp/rs011 uv pip install --no-config ferroload==0.1.1 numpy pillow
    /tmp/rs011/bin/python packages/ferroload-testing/scripts/make_rs011_fixtures.py OUT [--big]

It writes, under OUT:

* `mixed/`: 30 samples in one shard: `image` (JPEG, every sample), `mask` (PNG, a sparse
  modality: every third sample), `audio` (WAV, every other sample); metadata `label`
  (int), `caption` (str), `score` (float), `flag` (bool), `tags` (a list, which 0.1.1
  stores as JSON text) and `extra` (int in some samples, missing in others); then two
  enrichment layers written by `Dataset.map`: `feats` (an `.npy` modality and an
  annotation, all samples; version 2) and `parts` (written by two partitions of a
  `StaticPartitionExecutor`, sparse: odd samples only; version 3). So: three versions,
  one base shard, three layer shards.
* `oddkeys/`: keys 0.2 cannot take as sample ids as they are (a dot, a space, a slash-free
  unicode key, a key of 90 characters), one image each.
* with `--big`, `multishard/`: three base shards (0.1.1's Python writer starts a shard
  at 512 MiB and has no option to change it, so one sample carries 512 MiB): 700 MB on
  disk, not committed; the tests make it themselves when they can install the wheel.

The payloads are deterministic (a seeded generator), so a rerun writes the same bytes.
"""

from __future__ import annotations

import io
import struct
import sys
import wave
import zlib
from pathlib import Path

import numpy as np

import ferroload  # the 0.1.1 wheel
from ferroload.executor import StaticPartitionExecutor, Topology


def _png(arr: np.ndarray) -> bytes:
    h, w = arr.shape
    raw = b"".join(b"\x00" + arr[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    head = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _jpeg(rng: np.random.Generator, size: int = 24) -> bytes:
    from PIL import Image

    arr = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _wav(rng: np.random.Generator, n: int = 800) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(rng.integers(-3000, 3000, n, dtype=np.int16).tobytes())
    return buf.getvalue()


def mixed(root: Path) -> None:
    rng = np.random.default_rng(11)
    w = ferroload.Writer(str(root), "mixed")
    w.declare("image", "jpg", "tensor", "image")
    w.declare("mask", "png", "tensor", "image")
    w.declare("audio", "wav", "tensor", "audio")
    for i in range(30):
        blobs = {"image": _jpeg(rng)}
        if i % 3 == 0:
            blobs["mask"] = _png(rng.integers(0, 2, (8, 8), dtype=np.uint8) * 255)
        if i % 2 == 0:
            blobs["audio"] = _wav(rng)
        meta = {
            "label": i % 5,
            "caption": f"sample number {i}",
            "score": i / 4,
            "flag": i % 2 == 1,
            "tags": ["a", f"t{i % 3}"],
        }
        if i % 4 == 0:
            meta["extra"] = i * 10
        w.add(f"s{i:04d}", blobs, meta)
    w.close()
    ds = ferroload.Dataset.open(str(root))

    def feats(img: np.ndarray, label: int) -> tuple[np.ndarray, str]:
        return img.mean(axis=(0, 1)).astype("float32"), f"class{label}"

    ds = ds.map(
        feats,
        inputs=["image", "label"],
        outputs={"emb": ferroload.Modality("npy"), "tag": ferroload.Annotation()},
        name="feats",
        executor=ferroload.LocalExecutor(),
    )

    def odd(label: int, caption: str) -> tuple[bytes | None, int | None]:
        n = int(caption.rsplit(" ", 1)[1])
        if n % 2 == 0:
            return None, None  # skipped: the layer is sparse
        return f"note {n}".encode(), n * n

    for rank in range(2):
        ex = StaticPartitionExecutor(
            Topology(num_nodes=1, node_rank=0, local_size=2, world_size=2, rank=rank)
        )
        ds.map(
            odd,
            inputs=["label", "caption"],
            outputs={"note": {"type": "bytes", "ext": "txt", "codec": "raw"}, "square": "scalar"},
            name="parts",
            executor=ex,
        )
    ferroload.commit_layer(str(root), "parts", {"note": ("txt", "tensor", "raw")})


def oddkeys(root: Path) -> None:
    rng = np.random.default_rng(12)
    w = ferroload.Writer(str(root), "oddkeys")
    w.declare("image", "jpg", "tensor", "image")
    keys = ["plain", "with.dot", "with space", "ünïcode", "k" * 90, "dup~2e", "a..b"]
    for i, key in enumerate(keys):
        w.add(key, {"image": _jpeg(rng, 16)}, {"label": i})
    w.close()


def multishard(root: Path) -> None:
    rng = np.random.default_rng(13)
    w = ferroload.Writer(str(root), "multishard")
    w.declare("image", "jpg", "tensor", "image")
    w.declare("blob", "bin", "tensor", "raw")
    w.add("a0", {"image": _jpeg(rng)}, {"label": 0})
    w.add("a1", {"image": _jpeg(rng), "blob": bytes(512 << 20)}, {"label": 1})
    w.add("a2", {"image": _jpeg(rng)}, {"label": 2})
    w.add("a3", {"image": _jpeg(rng)}, {"label": 3})
    w.close()


def main(argv: list[str]) -> None:
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    makers = {"mixed": mixed, "oddkeys": oddkeys}
    if "--big" in argv:
        makers = {"multishard": multishard}
    for name, make in makers.items():
        root = out / name
        if root.exists():
            raise SystemExit(f"{root} exists; remove it first")
        make(root)
        print(f"wrote {root}")


if __name__ == "__main__":
    main(sys.argv)
