"""Commands that change or clean up datasets and the block cache: subset, gc, compact, cache."""

from __future__ import annotations

import time
from datetime import timedelta
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
    command_group,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    storage_options,
    write_mode,
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
        typer.Option(metavar="NAME", help="the new dataset's name (default: from DST)"),
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
    from ferroload_core import progress_reporter
    from ferroload_store import parse_uri

    if name is None and mode == "create":  # named after DST, as `import` names it
        name = parse_uri(dst).uri.rstrip("/").rsplit("/", 1)[-1] or None
    t0 = time.perf_counter()
    with progress_reporter(progress_arg(), desc="subset", unit="sample", total=len(view)) as bar:
        out = view.copy_to(
            dst, name=name, mode=mode, storage_options=storage_options(storage_option),
            progress=bar,
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
    r.line(f"{verb} {len(view):,} of {r.count(len(ds))} to {where_to} in {seconds:.1f} s")


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
        f"{verb} {r.count(len(report.deleted), 'object')}, {r.size(report.bytes_freed)}; "
        f"kept {report.kept_young} younger than the grace period"
    )


@app.command(
    epilog=examples(
        "ferroload upgrade ./pets",
        "ferroload upgrade s3://bucket/pets --json",
    )
)
def upgrade(uri: Uri, json: Json = False, storage_option: StorageOptions = None) -> None:
    """Convert a dataset written by ferroload-rs 0.1.1 to the current format, in place:
    index and manifests only, no shard byte rewritten (safe to stop and run again)."""
    import ferroload

    report = ferroload.upgrade(
        uri, storage_options=storage_options(storage_option), progress=None if not json else False
    )
    if json:
        r.print_json({**report.to_json(), "uri": shown_uri(report.uri)})
        return
    where = shown_uri(report.uri)
    if report.status == "current":
        r.line(f"{where} is in the current format already; nothing to do")
        return
    done = "upgraded" if report.status == "upgraded" else "finished upgrading"
    r.line(
        f"{done} {where}: {r.count(report.versions, 'version')}, {r.count(report.samples)}, "
        f"read {r.size(report.bytes_read)}, wrote {r.size(report.bytes_written)} "
        f"(no shard rewritten) in {report.seconds:.1f} s"
    )
    if report.renamed_keys:
        r.line(
            f"{r.count(report.renamed_keys, 'key')} not valid as sample ids got new ids; "
            "the keys are in the basename column"
        )
    for item in report.not_kept:
        r.line(f"note: {item}")


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

cache_app = command_group(
    "cache",
    "The local block cache of remote datasets (FERROLOAD_CACHE_DIR, FERROLOAD_CACHE_SIZE).",
)

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
