"""Commands that operate on datasets and the machine: subset, gc, cache, bench, doctor, demo."""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

import ferroload
from ferroload_cli import _render as r
from ferroload_cli._app import (
    Json,
    StorageOptions,
    Uri,
    app,
    first_line,
    open_dataset,
    split_names,
    storage_options,
    usage_error,
)
from ferroload_core import available_cpus

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


@app.command()
def subset(
    uri: Uri,
    dst: Annotated[str, typer.Argument(metavar="DST", help="where to write the new dataset")],
    where: Annotated[
        str, typer.Option("--where", "-w", help='SQL condition over the index, e.g. "label = 3"')
    ],
    name: Annotated[str | None, typer.Option(help="the new dataset's name")] = None,
    limit: Annotated[int | None, typer.Option(min=0, help="keep at most this many")] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="seconds --where may run before it is interrupted")
    ] = 30.0,
) -> None:
    """Materialize the samples matching --where as a new dataset at DST."""
    ds = open_dataset(uri, storage_option)
    view = ds.subset(where, timeout=timeout)
    if limit is not None:
        view = view.take(np.arange(min(limit, len(view))))
    t0 = time.perf_counter()
    with r.progress("copying", total=len(view)) as update:
        out = view.copy_to(
            dst, name=name, storage_options=storage_options(storage_option), progress=update
        )
    seconds = time.perf_counter() - t0
    result = {
        "uri": out.uri,
        "name": out.name,
        "version": out.version,
        "samples": len(out),
        "of": len(ds),
        "seconds": round(seconds, 3),
    }
    if json:
        r.print_json(result)
    else:
        r.line(
            f"wrote {len(out)} of {len(ds)} samples to {out.uri} (version {out.version}) "
            f"in {seconds:.1f} s"
        )


@app.command()
def gc(
    uri: Uri,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report, delete nothing")] = False,
    grace: Annotated[
        float | None,
        typer.Option(
            min=0, metavar="SECONDS", help="leave leftovers younger than this (default 1 hour)"
        ),
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Delete what crashed or aborted writers left behind."""
    kwargs: dict[str, Any] = {} if grace is None else {"grace": timedelta(seconds=grace)}
    report = ferroload.gc(
        uri, dry_run=dry_run, storage_options=storage_options(storage_option), **kwargs
    )
    if json:
        r.print_json(dataclasses.asdict(report))
        return
    verb = "would delete" if report.dry_run else "deleted"
    for path in report.published:
        r.line(f"published {path}")
    for path in report.deleted:
        r.line(f"{verb} {path}")
    r.line(
        f"{verb} {len(report.deleted)} object(s), {r.size(report.bytes_freed)}; "
        f"kept {report.kept_young} younger than the grace period"
    )


# --------------------------------------------------------------------------- cache

cache_app = typer.Typer(
    help="The local block cache of remote datasets (FERROLOAD_CACHE_DIR, FERROLOAD_CACHE_SIZE).",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache")

CacheDir = Annotated[
    Path | None,
    typer.Option(
        "--dir", help="the cache directory (default: FERROLOAD_CACHE_DIR or the user cache)"
    ),
]


@cache_app.command("stats")
def cache_stats(directory: CacheDir = None, json: Json = False) -> None:
    """Where the cache is, its limit, and what it holds now."""
    cache = ferroload.BlockCache.default(directory)
    used, entries = cache.size(), cache.count()
    stats = {
        "directory": str(cache.directory),
        "max_bytes": cache.max_bytes,
        "bytes": used,
        "entries": entries,
        "block_size": cache.block_size,
    }
    if json:
        r.print_json(stats)
        return
    r.pairs(
        [
            ("directory", stats["directory"]),
            ("entries", entries),
            ("size", f"{r.size(used)} of {r.size(cache.max_bytes)} ({used / cache.max_bytes:.1%})"),
            ("block size", r.size(cache.block_size)),
        ]
    )


@cache_app.command("clear")
def cache_clear(directory: CacheDir = None, json: Json = False) -> None:
    """Delete every cached block (remote datasets are read again on next use)."""
    cache = ferroload.BlockCache.default(directory)
    used, entries = cache.size(), cache.count()
    cache.clear()
    if json:
        r.print_json({"directory": str(cache.directory), "entries": entries, "bytes": used})
    else:
        r.line(f"cleared {entries} entries, {r.size(used)} from {cache.directory}")


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


@app.command()
def bench(
    uri: Uri,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", min=1)] = 64,
    epochs: Annotated[int, typer.Option(min=1, help="epochs to time")] = 2,
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
        str | None, typer.Option(help="only samples matching this SQL condition")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="only the first N samples")] = None,
    threads: Annotated[
        int | None, typer.Option(min=1, help="decode threads (default: all cores)")
    ] = None,
    streaming: Annotated[
        bool, typer.Option(help="read shard by shard (shard-block shuffle)")
    ] = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Loader throughput on a dataset: samples/s per epoch, decoded as in training."""
    ds = open_dataset(uri, storage_option)
    if where is not None:
        ds = ds.subset(where)
    if limit is not None:
        ds = ds.take(np.arange(min(limit, len(ds))))
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
        with r.progress(f"epoch {epoch}", total=len(loader)) as update:
            for k, batch in enumerate(loader, 1):
                if first is None:
                    first = time.perf_counter() - t0
                samples += len(batch["sample_id"])
                update(k)
        seconds = time.perf_counter() - t0
        results.append(
            {
                "epoch": epoch,
                "samples": samples,
                "seconds": round(seconds, 3),
                "samples_per_s": round(samples / seconds, 1) if seconds else None,
                "mb_per_s": round(payload / seconds / 1e6, 1) if seconds else None,
                "first_batch_s": round(first or 0.0, 3),
            }
        )
    summary = {
        "uri": ds.uri,
        "samples": len(ds),
        "batch_size": batch_size,
        "images": image_cols,
        "resize": list(size) if size else None,
        "threads": threads or available_cpus(),
        "epochs": results,
    }
    if json:
        r.print_json(summary)
        return
    r.line(
        f"{ds.uri}: {len(ds)} samples, batch {batch_size}, "
        f"images {', '.join(image_cols) or 'none'}" + (f" at {size[0]}x{size[1]}" if size else "")
    )
    r.table(
        ["epoch", "samples", "seconds", "samples/s", "MB/s (encoded)", "first batch"],
        [
            [
                x["epoch"], x["samples"], f"{x['seconds']:.2f}", f"{x['samples_per_s']:,.0f}",
                f"{x['mb_per_s']:.1f}", f"{x['first_batch_s']:.3f} s",
            ]
            for x in results
        ],
    )  # fmt: skip


# --------------------------------------------------------------------------- doctor


@app.command()
def doctor(
    uri: Annotated[
        str | None, typer.Option("--uri", help="also check that this dataset opens")
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Versions, codec backends, cache and catalog locations, and (with --uri) reachability."""
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
        report["cache"] = f"unusable: {first_line(exc)}"
    code = 0
    if uri is not None:
        try:
            ds = open_dataset(uri, storage_option)
        except ferroload.FerroloadError as exc:
            report["uri"] = {"uri": uri, "reachable": False, "error": first_line(exc)}
            code = 1
        else:
            report["uri"] = {
                "uri": ds.uri,
                "reachable": True,
                "name": ds.name,
                "version": ds.version,
                "samples": ds.num_samples,
            }
    if json:
        r.print_json(report)
    else:
        r.pairs([(k, report[k]) for k in ("python", "platform", "catalog", "cache")])
        r.table(["package", "version"], [[k, v or "not installed"] for k, v in packages.items()])
        r.table(["codec", "backend"], [[k, v or "-"] for k, v in report["codec_backends"].items()])
        if "uri" in report:
            u = report["uri"]
            if u["reachable"]:
                r.line(
                    f"{u['uri']}: reachable ({u['name']} version {u['version']}, {u['samples']} samples)"
                )
            else:
                r.line(f"{u['uri']}: NOT reachable: {u['error']}")
    if code:
        raise typer.Exit(code)


# --------------------------------------------------------------------------- demo


@app.command()
def demo(
    folder: Annotated[Path, typer.Argument(help="where to write the demo dataset")] = Path(
        "ferroload-demo"
    ),
    samples: Annotated[
        int | None, typer.Option(min=10, help="images to generate (default 2000)")
    ] = None,
    epochs: Annotated[int | None, typer.Option(min=1, help="training epochs")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1)] = None,
    seed: Annotated[
        int | None, typer.Option(help="seed of the images, the order and the model")
    ] = None,
) -> None:
    """Generate a small image dataset, query it with DuckDB, train a small CNN on CPU."""
    from ferroload import demo as demo_module

    given: dict[str, Any] = {
        "samples": samples, "epochs": epochs, "batch_size": batch_size, "seed": seed
    }  # fmt: skip
    demo_module.run(folder, **{k: v for k, v in given.items() if v is not None})
