"""The ferroload demo: write a generated image dataset, query it, train a small CNN on it.

Run it with `python -m ferroload.demo [FOLDER]` (default `./ferroload-demo`). It needs no
network and no credentials: the images are drawn here (coloured shapes, a task a small
CNN can learn), the index is queried with plain DuckDB, and a small torch CNN trains on
CPU for two epochs with `ferroload.make_loader`, printing the loader's throughput and the
held-out accuracy per epoch. Training needs torch (`pip install 'ferroload-loader[torch]'`).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ferroload_core import FerroloadError, available_cpus
from ferroload_format import hide_progress_bar

if TYPE_CHECKING:
    import torch

    from ferroload_loader import FerroLoader

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SAMPLES",
    "DemoFolderError",
    "DemoResult",
    "EpochStats",
    "TorchUnavailableError",
    "draw_samples",
    "main",
    "run",
]

DEFAULT_SAMPLES = 2000
DEFAULT_BATCH_SIZE = 32
DEMO_NAME = "ferroload-demo"
SHAPES = ("circle", "square", "triangle")
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (50, 80, 220),
    "gold": (230, 180, 30),
}
IMAGE_SIZE = 64
VAL_EVERY = 5  # every 5th sample is held out: split = 'val'
TORCH_HINT = "pip install 'ferroload-loader[torch]'"


class DemoFolderError(FerroloadError, FileExistsError):
    """The demo's folder holds something other than an earlier demo dataset."""


class TorchUnavailableError(FerroloadError, ImportError):
    """The demo's training step needs torch, which is not installed."""


@dataclass(frozen=True)
class EpochStats:
    """What one training epoch of the demo measured.

    Attributes:
        epoch: the epoch, from 1.
        train_loss: the mean cross-entropy over the epoch's training samples.
        val_accuracy: the share of held-out samples classified right after the epoch (0-1).
        loader_samples_per_s: training samples / seconds the loop waited on the loader's
            iterator (high: the loader is not what limits training).
        train_samples_per_s: training samples / seconds of the whole epoch (end to end).
        seconds: the epoch's wall time (training only, not the evaluation).
    """

    epoch: int
    train_loss: float
    val_accuracy: float
    loader_samples_per_s: float
    train_samples_per_s: float
    seconds: float


@dataclass(frozen=True)
class DemoResult:
    """What `run` wrote, queried and measured.

    Attributes:
        uri: the dataset's root (an absolute local path).
        num_samples: samples written.
        num_train: samples of `split = 'train'`.
        num_val: samples of `split = 'val'`.
        query: the DuckDB query run over the index, without ferroload.
        query_result: its rows, `(shape, color, n)`.
        epochs: one `EpochStats` per epoch.
    """

    uri: str
    num_samples: int
    num_train: int
    num_val: int
    query: str
    query_result: list[tuple[Any, ...]]
    epochs: list[EpochStats]


def draw_samples(
    n: int, *, size: int = IMAGE_SIZE, seed: int = 0
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


def run(
    folder: str | os.PathLike[str] = DEMO_NAME,
    *,
    samples: int = DEFAULT_SAMPLES,
    epochs: int = 2,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = 0,
    threads: int | None = None,
    out: TextIO | None = None,
) -> DemoResult:
    """Write a generated image dataset, query it with DuckDB, train a small CNN on it.

    Draws `samples` 64x64 JPEG images of coloured shapes (the label is the shape), writes
    them as a ferroload dataset with a `split` column (every 5th sample is `'val'`),
    reopens it, prints its summary and a plain DuckDB query over its index, then trains
    a small CNN on CPU with `ferroload.make_loader(..., where="split = 'train'")` and
    evaluates it on `split = 'val'` after every epoch. Needs no network; deterministic
    for a given seed and thread count.

    Args:
        folder: where to write the dataset; an earlier demo dataset there is replaced,
            anything else is left alone (`DemoFolderError`).
        samples: images to generate (at least 10).
        epochs: training epochs (at least 1).
        batch_size: training batch size.
        seed: seeds the images, the loader's shuffle and the model.
        threads: torch's CPU threads for training (default: one fewer than the CPUs
            available, at most 4); the loader decodes on the other CPUs (at least one).
        out: where the report goes (default: `sys.stdout`).

    Returns:
        The dataset's location, the query's rows and what each epoch measured.

    Raises:
        DemoFolderError: `folder` exists and is not an empty folder or a demo dataset.
        TorchUnavailableError: torch is not installed (before anything is written).
        ValueError: `samples`, `epochs`, `batch_size` or `threads` out of range.

    Examples:
        >>> from ferroload.demo import run
        >>> result = run("/tmp/ferroload-demo", samples=1000)  # doctest: +SKIP
        >>> result.epochs[-1].val_accuracy > 0.8  # doctest: +SKIP
        True
    """
    if samples < 10:
        raise ValueError(f"samples must be at least 10, got {samples}")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be at least 1, got {epochs}, {batch_size}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    out = sys.stdout if out is None else out
    root = Path(folder).resolve()
    _check_folder(root)
    _require_torch()
    if root.exists():
        shutil.rmtree(root)
    uri, query, rows = _write_and_query(root, samples=samples, seed=seed, out=out)
    torch_threads = threads or min(4, max(1, available_cpus() - 1))
    loader_threads = max(1, available_cpus() - torch_threads)
    stats = _train(
        uri, epochs=epochs, batch_size=batch_size, seed=seed,
        torch_threads=torch_threads, loader_threads=loader_threads, out=out,
    )  # fmt: skip
    num_val = len(range(0, samples, VAL_EVERY))
    return DemoResult(
        uri=uri, num_samples=samples, num_train=samples - num_val, num_val=num_val,
        query=query, query_result=rows, epochs=stats,
    )  # fmt: skip


def _check_folder(folder: Path) -> None:
    """Raise unless `folder` is absent, an empty folder or an earlier demo dataset."""
    if not folder.exists():
        return
    import ferroload

    try:
        name = ferroload.Dataset.open(folder).name
    except ferroload.DatasetNotFoundError:
        if folder.is_dir() and not any(folder.iterdir()):
            return
        raise DemoFolderError(
            f"{folder} exists and is not a ferroload demo dataset; pass another folder"
        ) from None
    if name != DEMO_NAME:
        raise DemoFolderError(f"{folder} holds dataset {name!r}, not the demo; pass another folder")


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise TorchUnavailableError(
            f"the demo trains a small CNN with torch, which is not installed: {TORCH_HINT}"
        ) from exc


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _write_and_query(
    folder: Path, *, samples: int, seed: int, out: TextIO
) -> tuple[str, str, list[tuple[Any, ...]]]:
    """Write the dataset, print its summary and a plain DuckDB query; the uri, query, rows."""
    import duckdb

    import ferroload

    print(f"writing {samples} generated 64x64 JPEG images to {folder} ...", file=out)
    t0 = time.perf_counter()
    with ferroload.Writer(folder, DEMO_NAME, shard_size=1 << 20) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i, (sample_id, jpg, meta) in enumerate(draw_samples(samples, seed=seed)):
            split = "val" if i % VAL_EVERY == 0 else "train"
            w.add(sample_id, {"image": jpg}, {**meta, "split": split})
    written = time.perf_counter() - t0

    t0 = time.perf_counter()
    ds = ferroload.Dataset.open(folder)
    opened = time.perf_counter() - t0
    stats = ds.manifest.statistics
    modalities = ", ".join(f"{m.name} (.{m.ext}, {m.codec_hint})" for m in ds.modalities)
    print(file=out)
    print(
        f"dataset    {ds.name!r}, version {ds.version}, {len(ds)} samples, {ds.num_shards} shards",
        f"on disk    {_disk_bytes(folder) / 1e6:.2f} MB "
        f"({stats['modalities']['image']['bytes'] / 1e6:.2f} MB of JPEG payload)",
        f"modalities {modalities}",
        f"metadata   {', '.join(f'{f.name}: {f.type}' for f in ds.manifest.metadata)}",
        f"timings    write {written:.2f} s, open {opened * 1e3:.1f} ms "
        f"(read {ds.store.stats.bytes_read} bytes: the manifest only)",
        sep="\n",
        file=out,
    )
    sample = ds[0]
    print(
        f"ds[0]      {sample['sample_id']}: {len(sample['image'])} JPEG bytes, "
        f"caption {sample['caption']!r}",
        file=out,
    )
    for where in ("shape = 'triangle' AND color = 'gold'", "split = 'val'"):
        print(f"subset     {where}: {len(ds.subset(where, return_indices=True))} samples", file=out)

    glob = f"{folder}/index/part-*.parquet".replace("'", "''")
    query = (
        f"SELECT shape, color, count(*) AS n FROM read_parquet('{glob}') "
        "GROUP BY ALL ORDER BY shape, color"
    )
    print(file=out)
    print("plain DuckDB, without ferroload:", file=out)
    print(f"  {query}", file=out)
    with duckdb.connect() as con:
        hide_progress_bar(con)  # the demo prints only to `out`
        relation = con.sql(query)
        print(relation, file=out)
        rows = relation.fetchall()
    return str(folder), query, rows


def _model(classes: int) -> torch.nn.Module:
    """Four 3x3 conv layers (batch norm, ReLU, max pooling), global max pool, a linear head."""
    from torch import nn

    layers: list[nn.Module] = []
    for c_in, c_out in ((3, 16), (16, 32), (32, 64)):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
        layers.append(nn.MaxPool2d(2))
    layers += [nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(1)]
    layers += [nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


def _train(
    uri: str,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    torch_threads: int,
    loader_threads: int,
    out: TextIO,
) -> list[EpochStats]:
    """Train the CNN on `split = 'train'`, evaluate on `split = 'val'`, print every epoch."""
    import torch

    import ferroload

    common: dict[str, Any] = {  # model-ready: float32 NCHW in [0, 1], from the loader
        "images": ["image"], "resize": IMAGE_SIZE, "layout": "NCHW", "dtype": "float32",
        "meta": ["label"], "out": "torch", "seed": seed, "threads": loader_threads,
    }  # fmt: skip
    train = ferroload.make_loader(
        uri, batch_size=batch_size, shuffle=True, where="split = 'train'", **common
    )
    val = ferroload.make_loader(uri, batch_size=256, shuffle=False, where="split = 'val'", **common)
    previous_threads = torch.get_num_threads()
    results: list[EpochStats] = []
    try:
        torch.set_num_threads(torch_threads)
        with torch.random.fork_rng(devices=[]):  # seed the model without touching the caller's RNG
            torch.manual_seed(seed)
            model = _model(len(SHAPES))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            print(
                f"training a small CNN on CPU (batch {batch_size}; threads: {torch_threads} "
                f"torch, {loader_threads} decoding):",
                f"  {train.sampler.num_items} samples where split = 'train', accuracy on the "
                f"{val.sampler.num_items} where split = 'val'",
                "  loader = samples / time waiting on the loader; train = samples / epoch time",
                sep="\n",
                file=out,
            )
            for epoch in range(epochs):
                stats = _epoch(model, optimizer, train, val, epoch)
                results.append(stats)
                print(
                    f"epoch {stats.epoch}/{epochs}  train loss {stats.train_loss:.4f}  "
                    f"val accuracy {stats.val_accuracy:.1%}  "
                    f"loader {stats.loader_samples_per_s:,.0f} samples/s  "
                    f"train {stats.train_samples_per_s:,.0f} samples/s",
                    file=out,
                )
    finally:
        torch.set_num_threads(previous_threads)
        train.close()
        val.close()
    return results


def _epoch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train: FerroLoader,
    val: FerroLoader,
    epoch: int,
) -> EpochStats:
    """One epoch of training, then the accuracy on the validation split."""
    import torch

    train.set_epoch(epoch)
    model.train()
    waited = loss_sum = 0.0
    seen = 0
    t0 = time.perf_counter()
    batches = iter(train)
    while True:
        t_wait = time.perf_counter()
        batch = next(batches, None)
        waited += time.perf_counter() - t_wait
        if batch is None:
            break
        labels = batch["label"]
        loss = torch.nn.functional.cross_entropy(model(batch["image"]), labels)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        optimizer.step()
        seen += len(labels)
        loss_sum += float(loss.item()) * len(labels)
    seconds = time.perf_counter() - t0

    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for batch in val:
            predicted = model(batch["image"]).argmax(dim=1)
            correct += int((predicted == batch["label"]).sum())
            total += len(batch["label"])
    return EpochStats(
        epoch=epoch + 1,
        train_loss=loss_sum / max(seen, 1),
        val_accuracy=correct / max(total, 1),
        loader_samples_per_s=seen / max(waited, 1e-9),
        train_samples_per_s=seen / max(seconds, 1e-9),
        seconds=seconds,
    )


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo from the command line; returns the process exit code.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).

    Returns:
        0, or 1 after printing a one-line error (a folder that is not a demo dataset,
        torch missing). Usage errors exit with 2.
    """
    parser = argparse.ArgumentParser(prog="python -m ferroload.demo", description=__doc__)
    parser.add_argument("folder", nargs="?", default=DEMO_NAME, help="where to write the dataset")
    parser.add_argument(
        "-n", "--samples", type=_at_least(10), default=DEFAULT_SAMPLES, help="images to generate"
    )
    parser.add_argument("--epochs", type=_at_least(1), default=2, help="training epochs")
    parser.add_argument(
        "--batch-size", type=_at_least(1), default=DEFAULT_BATCH_SIZE, help="training batch size"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the data and the training")
    args = parser.parse_args(argv)
    try:
        run(
            args.folder, samples=args.samples, epochs=args.epochs, batch_size=args.batch_size,
            seed=args.seed,
        )  # fmt: skip
    except FerroloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
