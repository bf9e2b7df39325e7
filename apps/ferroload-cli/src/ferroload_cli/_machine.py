"""Commands about this machine: bench (time the loader), doctor (versions, backends,
reachability), demo."""

from __future__ import annotations

import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Json,
    StorageOptions,
    Uri,
    app,
    cli_message,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    split_names,
    usage_error,
)

#: Distributions `doctor` reports the versions of.
PACKAGES = (
    "ferroload",
    "ferroload-core",
    "ferroload-store",
    "ferroload-format",
    "ferroload-codec",
    "ferroload-loader",
    "ferroload-map",
    "ferroload-convert",
    "ferroload-cli",
    "ferroload-catalog",
)


# --------------------------------------------------------------------------- bench


def _resize(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    h, sep, w = text.lower().partition("x")
    try:
        size = (int(h), int(w or h)) if (sep or not w) else None
    except ValueError:
        size = None
    if size is None or min(size) <= 0:
        raise usage_error(f"--resize takes HEIGHTxWIDTH or one size, e.g. 224x224; got {text!r}")
    return size


@app.command(
    epilog=examples(
        "ferroload bench ./pets",
        "ferroload bench s3://bucket/pets -b 128 --resize 224x224 --meta label --streaming",
        'ferroload bench ./pets --where "label < 3" --limit 1000 --epochs 1 --json',
    )
)
def bench(
    uri: Uri,
    batch_size: Annotated[
        int, typer.Option("--batch-size", "-b", min=1, metavar="N", help="samples per batch")
    ] = 64,
    epochs: Annotated[int, typer.Option(min=1, metavar="N", help="epochs to time")] = 2,
    images: Annotated[
        str | None,
        typer.Option(metavar="A,B", help="image modalities to decode (default: all images)"),
    ] = None,
    resize: Annotated[
        str | None, typer.Option(metavar="HxW", help="decode size (default 224x224 with images)")
    ] = None,
    meta: Annotated[
        str | None, typer.Option(metavar="A,B", help="metadata columns to load")
    ] = None,
    where: Annotated[
        str | None,
        typer.Option(metavar="CONDITION", help="only samples matching this SQL condition"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="only the first N samples")
    ] = None,
    threads: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="decode threads (default: all cores)")
    ] = None,
    streaming: Annotated[
        bool, typer.Option(help="read shard by shard (shard-block shuffle)")
    ] = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Loader throughput on a dataset: samples/s per epoch, decoded as in training."""
    import ferroload
    from ferroload_core import available_cpus, progress_reporter

    ds = open_dataset(uri, storage_option)
    if where is not None:
        ds = ds.subset(where)
    if limit is not None:
        ds = ds.take(list(range(min(limit, len(ds)))))
    image_cols = split_names(images, option="--images")
    if image_cols is None:
        image_cols = [m.name for m in ds.modalities if m.codec_hint == "image"]
    size = _resize(resize) or ((224, 224) if image_cols else None)
    meta_cols = split_names(meta, option="--meta") or []
    loader = ferroload.make_loader(
        ds, batch_size=batch_size, images=image_cols, meta=meta_cols, resize=size,
        out="numpy", threads=threads, streaming=streaming, seed=0,
    )  # fmt: skip
    payload = sum(int(ds.sizes(m).sum()) for m in image_cols)
    results: list[dict[str, Any]] = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        first = None
        samples = 0
        with progress_reporter(
            progress_arg(), desc=f"epoch {epoch}", unit="batch", total=len(loader)
        ) as update:
            for k, batch in enumerate(loader, 1):
                if first is None:
                    first = time.perf_counter() - t0
                samples += len(batch["sample_id"])
                update(k, len(loader))
        seconds = time.perf_counter() - t0
        results.append(
            {
                "epoch": epoch,
                "num_samples": samples,
                "seconds": round(seconds, 3),
                "samples_per_s": round(samples / seconds, 1) if seconds else None,
                "mb_per_s": round(payload / seconds / 1e6, 1) if seconds else None,
                "first_batch_seconds": round(first or 0.0, 3),
            }
        )
    summary = {
        "uri": shown_uri(ds.uri),
        "name": ds.name,
        "version": ds.version,
        "num_samples": len(ds),
        "batch_size": batch_size,
        "images": image_cols,
        "resize": list(size) if size else None,
        "num_threads": threads or available_cpus(),
        "epochs": results,
    }
    if json:
        r.print_json(summary)
        return
    r.line(
        f"{shown_uri(ds.uri)}: {r.count(len(ds))}, batch {batch_size}, "
        f"images {', '.join(image_cols) or 'none'}" + (f" at {size[0]}x{size[1]}" if size else "")
    )
    r.table(
        ["epoch", "samples", "seconds", "samples/s", "MB/s (encoded)", "first batch"],
        [
            [
                x["epoch"], x["num_samples"], f"{x['seconds']:.2f}",
                f"{x['samples_per_s']:,.0f}", f"{x['mb_per_s']:.1f}",
                f"{x['first_batch_seconds']:.3f} s",
            ]
            for x in results
        ],
    )  # fmt: skip


# --------------------------------------------------------------------------- doctor


@app.command(
    epilog=examples(
        "ferroload doctor",
        "ferroload doctor --uri s3://bucket/pets -o region=eu-west-1 --json",
    )
)
def doctor(
    uri: Annotated[
        str | None,
        typer.Option("--uri", metavar="URI", help="also check that this dataset opens"),
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Versions, codec backends, cache and catalog locations, and (with --uri) reachability."""
    import ferroload
    import ferroload.codec
    from ferroload_catalog import default_catalog_path

    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": packages,
        "codec_backends": ferroload.codec.backends(),
        "catalog": str(default_catalog_path()),
    }
    try:
        report["cache"] = str(ferroload.BlockCache.default().directory)
    except ferroload.FerroloadError as exc:
        report["cache"] = f"unusable: {cli_message(exc)}"
    code = 0
    if uri is not None:
        try:
            ds = open_dataset(uri, storage_option)
        except ferroload.FerroloadError as exc:
            report["dataset"] = {
                "uri": shown_uri(uri), "reachable": False, "error": cli_message(exc)
            }  # fmt: skip
            code = 1
        else:
            report["dataset"] = {
                "uri": shown_uri(ds.uri),
                "reachable": True,
                "name": ds.name,
                "version": ds.version,
                "num_samples": ds.num_samples,
                "num_shards": ds.num_shards,
                "size_bytes": ds.manifest.size_bytes,
            }
    if json:
        r.print_json(report)
    else:
        r.pairs([(k, report[k]) for k in ("python", "platform", "catalog", "cache")])
        r.table(["package", "version"], [[k, v or "not installed"] for k, v in packages.items()])
        r.table(["codec", "backend"], [[k, v or "-"] for k, v in report["codec_backends"].items()])
        if "dataset" in report:
            u = report["dataset"]
            if u["reachable"]:
                r.line(
                    f"{u['uri']}: reachable ({u['name']} version {u['version']}, "
                    f"{r.count(u['num_samples'])})"
                )
            else:
                r.line(f"{u['uri']}: NOT reachable: {u['error']}")
    if code:
        raise typer.Exit(code)


# --------------------------------------------------------------------------- demo


@app.command(
    epilog=examples(
        "ferroload demo",
        "ferroload demo /tmp/demo --samples 500 --epochs 1",
    )
)
def demo(
    folder: Annotated[
        Path, typer.Argument(metavar="FOLDER", help="where to write the demo dataset")
    ] = Path("ferroload-demo"),
    samples: Annotated[
        int | None, typer.Option(min=10, metavar="N", help="images to generate (default 2000)")
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="training epochs (default 2)")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", min=1, metavar="N", help="samples per batch")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(metavar="N", help="seed of the images, the order and the model"),
    ] = None,
) -> None:
    """Generate a small image dataset, query it with DuckDB, train a small CNN on CPU."""
    from ferroload import demo as demo_module

    given: dict[str, Any] = {
        "samples": samples, "epochs": epochs, "batch_size": batch_size, "seed": seed
    }  # fmt: skip
    demo_module.run(folder, **{k: v for k, v in given.items() if v is not None})
