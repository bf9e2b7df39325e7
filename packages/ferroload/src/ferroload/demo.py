"""The ferroload demo: write a small generated image dataset, reopen it, query it.

Run it with `python -m ferroload.demo [FOLDER]` (default `./ferroload-demo`). It needs no
network and no credentials: the images are drawn here (coloured shapes, a task a small
CNN can learn), the index is queried with plain DuckDB.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

DEMO_NAME = "ferroload-demo"
SHAPES = ("circle", "square", "triangle")
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (50, 80, 220),
    "gold": (230, 180, 30),
}


def draw_samples(
    n: int, *, size: int = 64, seed: int = 0
) -> Iterator[tuple[str, bytes, dict[str, object]]]:
    """Yield `n` (sample_id, JPEG bytes, metadata) of coloured shapes on noisy backgrounds.

    Deterministic for a given seed. The label is the shape (0 circle, 1 square,
    2 triangle); metadata also holds the colour, a caption and the shape's box.
    """
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    colors = list(COLORS)
    for i in range(n):
        label = int(rng.integers(len(SHAPES)))
        color = colors[int(rng.integers(len(colors)))]
        background = rng.integers(0, 60, size=(size, size, 3), dtype=np.uint8)
        img = Image.fromarray(background, "RGB")
        r = int(rng.integers(size // 6, size // 3))
        cx, cy = (int(v) for v in rng.integers(r, size - r, size=2))
        box = (cx - r, cy - r, cx + r, cy + r)
        draw = ImageDraw.Draw(img)
        if SHAPES[label] == "circle":
            draw.ellipse(box, fill=COLORS[color])
        elif SHAPES[label] == "square":
            draw.rectangle(box, fill=COLORS[color])
        else:
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=COLORS[color])
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        meta: dict[str, object] = {
            "label": label,
            "shape": SHAPES[label],
            "color": color,
            "caption": f"a {color} {SHAPES[label]}",
            "box": [float(v) / size for v in box],
        }
        yield f"shape{i:05d}", buf.getvalue(), meta


def _prepare(folder: Path) -> None:
    """Remove an earlier demo dataset at `folder`; refuse to touch anything else."""
    if not folder.exists():
        return
    import ferroload

    try:
        name = ferroload.Dataset.open(folder).name
    except ferroload.DatasetNotFoundError:
        if folder.is_dir() and not any(folder.iterdir()):
            return
        raise SystemExit(
            f"{folder} exists and is not a ferroload demo dataset; pass another folder"
        ) from None
    if name != DEMO_NAME:
        raise SystemExit(f"{folder} holds dataset {name!r}, not the demo; pass another folder")
    shutil.rmtree(folder)


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    import duckdb

    import ferroload

    parser = argparse.ArgumentParser(prog="python -m ferroload.demo", description=__doc__)
    parser.add_argument("folder", nargs="?", default=DEMO_NAME, help="where to write the dataset")
    parser.add_argument("-n", "--samples", type=int, default=2000, help="images to generate")
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    _prepare(folder)

    print(f"writing {args.samples} generated 64x64 JPEG images to {folder} ...")
    t0 = time.perf_counter()
    with ferroload.Writer(folder, DEMO_NAME, shard_size=1 << 20) as w:
        w.declare("image", "jpg", "tensor", "image")
        for sample_id, jpg, meta in draw_samples(args.samples):
            w.add(sample_id, {"image": jpg}, meta)
    written = time.perf_counter() - t0

    t0 = time.perf_counter()
    ds = ferroload.Dataset.open(folder)
    opened = time.perf_counter() - t0
    stats = ds.manifest.statistics
    print()
    print(
        f"dataset    {ds.name!r}, version {ds.version}, {len(ds)} samples, {ds.num_shards} shards"
    )
    print(
        f"on disk    {_disk_bytes(folder) / 1e6:.2f} MB "
        f"({stats['modalities']['image']['bytes'] / 1e6:.2f} MB of JPEG payload)"
    )
    print(f"modalities {', '.join(f'{m.name} (.{m.ext}, {m.codec_hint})' for m in ds.modalities)}")
    print(f"metadata   {', '.join(f'{f.name}: {f.type}' for f in ds.manifest.metadata)}")
    print(
        f"timings    write {written:.2f} s, open {opened * 1e3:.1f} ms "
        f"(read {ds.store.stats.bytes_read} bytes: the manifest only)"
    )

    sample = ds[0]
    print(
        f"ds[0]      {sample['sample_id']}: {len(sample['image'])} JPEG bytes, "
        f"caption {sample['caption']!r}"
    )
    positions = ds.subset("shape = 'triangle' AND color = 'gold'", return_indices=True)
    print(f"subset     shape = 'triangle' AND color = 'gold': {len(positions)} samples")

    glob = f"{folder}/index/part-*.parquet"
    query = (
        f"SELECT shape, color, count(*) AS n FROM read_parquet('{glob}') "
        "GROUP BY ALL ORDER BY shape, color"
    )
    print()
    print("plain DuckDB, without ferroload:")
    print(f"  {query}")
    print(duckdb.sql(query))
    return 0


if __name__ == "__main__":
    sys.exit(main())
