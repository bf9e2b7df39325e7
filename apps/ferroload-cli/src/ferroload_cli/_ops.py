"""Commands that operate on datasets and the machine: subset, gc, cache, bench, doctor, demo."""

from __future__ import annotations

import platform
import sys
import time
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Append,
    Json,
    Overwrite,
    StorageOptions,
    Uri,
    app,
    cli_message,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    split_names,
    storage_options,
    usage_error,
    write_mode,
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


@app.command(
    epilog=examples(
        'ferroload subset ./pets ./cats --where "label = 3"',
        "ferroload subset ./pets ./few --where \"caption LIKE '%cat%'\" --limit 100 --json",
        'ferroload subset ./pets ./cats --where "label = 3" --overwrite',
    )
)
def subset(
    uri: Uri,
    dst: Annotated[
        str,
        typer.Argument(metavar="DST", help="where to write the new dataset", show_default=False),
    ],
    where: Annotated[
        str,
        typer.Option(
            "--where",
            "-w",
            metavar="CONDITION",
            help='SQL condition over the index, e.g. "label = 3"',
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="the new dataset's name (default: the source's)"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=0, metavar="N", help="keep at most this many")
    ] = None,
    append: Append = False,
    overwrite: Overwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.001, metavar="SECONDS", help="seconds --where may run before it is interrupted"
        ),
    ] = 30.0,
) -> None:
    """Materialize the samples matching --where as a new dataset at DST.

    A dataset at DST is refused unless --append or --overwrite; no match: an empty dataset.
    """
    mode = write_mode(append, overwrite)
    ds = open_dataset(uri, storage_option)
    view = ds.subset(where, timeout=timeout)
    matched = len(view)
    if limit is not None and limit < matched:
        view = view.take(list(range(limit)))
    t0 = time.perf_counter()
    out = view.copy_to(
        dst, name=name, mode=mode, storage_options=storage_options(storage_option),
        progress=progress_arg(),
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    result = {
        "uri": shown_uri(out.uri),
        "name": out.name,
        "version": out.version,
        "num_samples": out.num_samples,
        "num_shards": out.num_shards,
        "size_bytes": out.manifest.size_bytes,
        "mode": mode,
        "num_written": len(view),
        "num_matched": matched,
        "source": {"uri": shown_uri(ds.uri), "version": ds.version, "num_samples": len(ds)},
        "seconds": round(seconds, 3),
    }
    if json:
        r.print_json(result)
        return
    where_to = f"{result['uri']} (version {out.version}, {r.count(out.num_samples)})"
    if not matched:
        r.line(f"the filter matched no sample; wrote an empty dataset to {where_to}")
        return
    verb = {"create": "wrote", "append": "appended", "overwrite": "overwrote with"}[mode]
    r.line(f"{verb} {len(view)} of {len(ds)} samples to {where_to} in {seconds:.1f} s")


@app.command(
    epilog=examples(
        "ferroload gc ./pets --dry-run",
        "ferroload gc ./pets --grace 0 --json",
        "ferroload gc ./pets --keep-versions 1 --grace 0",
    )
)
def gc(
    uri: Uri,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report, delete nothing")] = False,
    grace: Annotated[
        float | None,
        typer.Option(
            min=0, metavar="SECONDS", help="leave leftovers younger than this (default 1 hour)"
        ),
    ] = None,
    keep_versions: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="expire all but the newest N versions and delete what only they used "
            "(default: keep every version)",
        ),
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Delete what crashed or aborted writers left behind (and, with --keep-versions, what
    only old versions used, such as the shards an --overwrite replaced)."""
    import ferroload

    kwargs: dict[str, Any] = {} if grace is None else {"grace": timedelta(seconds=grace)}
    report = ferroload.gc(
        uri, dry_run=dry_run, keep_versions=keep_versions,
        storage_options=storage_options(storage_option), **kwargs,
    )  # fmt: skip
    if json:
        r.print_json(
            {
                "uri": shown_uri(report.uri),
                "dry_run": report.dry_run,
                "num_deleted": len(report.deleted),
                "freed_bytes": report.bytes_freed,
                "num_kept_young": report.kept_young,
                "num_expired": len(report.expired),
                "deleted": report.deleted,
                "published": report.published,
                "expired": report.expired,
                "retired": report.retired,
            }
        )
        return
    verb = "would delete" if report.dry_run else "deleted"
    for path in report.published:
        r.line(f"published {path}")
    for v in report.expired:
        r.line(f"{'would expire' if report.dry_run else 'expired'} version {v}")
    for path in report.deleted:
        r.line(f"{verb} {path}")
    r.line(
        f"{verb} {len(report.deleted)} object(s), {r.size(report.bytes_freed)}; "
        f"kept {report.kept_young} younger than the grace period"
    )


@app.command(
    epilog=examples(
        "ferroload compact ./pets",
        "ferroload compact s3://bucket/pets --json",
    )
)
def compact(uri: Uri, json: Json = False, storage_option: StorageOptions = None) -> None:
    """Merge the index parts of the latest version into one, as a new version (after many
    small appends); the old parts are left for gc."""
    ds = open_dataset(uri, storage_option)
    parts = len(ds.manifest.index_parts)
    started = time.perf_counter()
    out = ds.compact()
    seconds = time.perf_counter() - started
    if json:
        r.print_json(
            {
                "uri": shown_uri(ds.uri),
                "version": out.version,
                "compacted": out is not ds,
                "num_parts_before": parts,
                "num_parts": len(out.manifest.index_parts),
                "num_samples": len(out),
                "index_bytes": sum(p.size for p in out.manifest.index_parts),
                "seconds": round(seconds, 3),
            }
        )
        return
    if out is ds:
        r.line(f"{shown_uri(ds.uri)} (version {ds.version}) has one index part; nothing to do")
        return
    r.line(
        f"compacted {parts} index parts of {shown_uri(ds.uri)} into 1 "
        f"(version {out.version}, {r.count(len(out))}) in {seconds:.1f} s"
    )


# --------------------------------------------------------------------------- cache

cache_app = typer.Typer(
    help="The local block cache of remote datasets (FERROLOAD_CACHE_DIR, FERROLOAD_CACHE_SIZE).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(cache_app, name="cache")

CacheDir = Annotated[
    Path | None,
    typer.Option(
        "--dir", help="the cache directory (default: FERROLOAD_CACHE_DIR or the user cache)"
    ),
]


@cache_app.command(
    "stats",
    epilog=examples("ferroload cache stats", "ferroload cache stats --dir /nvme/cache --json"),
)
def cache_stats(directory: CacheDir = None, json: Json = False) -> None:
    """Where the cache is, its limit, and what it holds now."""
    import ferroload

    cache = ferroload.BlockCache.default(directory)
    used, entries = cache.size(), cache.count()
    stats = {
        "directory": str(cache.directory),
        "max_bytes": cache.max_bytes,
        "size_bytes": used,
        "num_entries": entries,
        "block_bytes": cache.block_size,
    }
    if json:
        r.print_json(stats)
        return
    r.pairs(
        [
            ("directory", str(cache.directory)),
            ("entries", entries),
            ("size", f"{r.size(used)} of {r.size(cache.max_bytes)} ({used / cache.max_bytes:.1%})"),
            ("block size", r.size(cache.block_size)),
        ]
    )


@cache_app.command(
    "clear",
    epilog=examples("ferroload cache clear", "ferroload cache clear --dir /nvme/cache --json"),
)
def cache_clear(directory: CacheDir = None, json: Json = False) -> None:
    """Delete every cached block (remote datasets are read again on next use)."""
    import ferroload

    cache = ferroload.BlockCache.default(directory)
    used, entries = cache.size(), cache.count()
    cache.clear()
    if json:
        r.print_json(
            {"directory": str(cache.directory), "num_entries": entries, "size_bytes": used}
        )
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
        f"{shown_uri(ds.uri)}: {len(ds)} samples, batch {batch_size}, "
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
                    f"{u['num_samples']} samples)"
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
