"""Commands that read a dataset: info, schema, head, get, sql, verify, log."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Json,
    StorageOptions,
    Uri,
    app,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    split_names,
    usage_error,
)

if TYPE_CHECKING:
    import ferroload


def _payload_size(value: Any) -> int | None:
    """The size of a payload given as its index struct (present, length, …) or bytes."""
    if isinstance(value, Mapping):
        return int(value["length"]) if value.get("present") else None
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return None


def _check_columns(ds: ferroload.Dataset, columns: list[str]) -> None:
    import ferroload

    for c in columns:
        if c not in ds.columns:
            raise ferroload.ColumnNotFoundError(
                f"{ds.uri} has no column {c!r}; columns are {', '.join(ds.columns)}",
                uri=ds.uri,
                column=c,
            )


@app.command(
    epilog=examples(
        "ferroload info ./pets",
        "ferroload info s3://bucket/pets -o region=eu-west-1 --json",
        "ferroload info catalog:pets",
    )
)
def info(uri: Uri, json: Json = False, storage_option: StorageOptions = None) -> None:
    """Summary of a dataset: samples, shards, size, columns, layers."""
    ds = open_dataset(uri, storage_option)
    m = ds.manifest
    shard_bytes = m.shard_bytes  # no shard list read
    index_bytes = sum(p.size for p in m.index_parts)
    layer_bytes = sum(
        sum(s.size for s in layer.shards) + sum(p.size for p in layer.index_parts)
        for layer in m.layers
    )
    meta = [f for f in ds.schema if f.name in ds.metadata_columns]
    layers: list[dict[str, Any]] = [
        {
            "name": layer.name,
            "base_version": layer.base_version,
            "num_rows": layer.num_rows,
            "columns": [f.name for f in layer.columns],
            "modalities": [x.name for x in layer.modalities],
            "created_at": layer.created_at,
        }
        for layer in ds.layers
    ]
    if json:
        r.print_json(
            {
                "uri": shown_uri(ds.uri),
                "name": ds.name,
                "format": ds.format,
                "version": ds.version,
                "created_at": m.created_at,
                "num_samples": ds.num_samples,
                "num_shards": ds.num_shards,
                "size_bytes": m.size_bytes,
                "shard_bytes": shard_bytes,
                "index_bytes": index_bytes,
                "layer_bytes": layer_bytes,
                "manifest_bytes": m.size_bytes - shard_bytes - index_bytes - layer_bytes,
                "modalities": [
                    {"name": x.name, "ext": x.ext, "kind": x.kind, "codec_hint": x.codec_hint}
                    for x in ds.modalities
                ],
                "metadata_columns": [{"name": f.name, "type": str(f.type)} for f in meta],
                "layers": layers,
            }
        )
        return
    parts = f"{r.size(shard_bytes)} in shards, {r.size(index_bytes)} of index"
    if layer_bytes:
        parts += f", {r.size(layer_bytes)} of layers"
    r.pairs(
        [
            ("uri", shown_uri(ds.uri)),
            ("name", ds.name),
            ("version", f"{ds.version} ({m.created_at})"),
            *(
                [("format", f"{ds.format}: read as it is; `ferroload upgrade` converts it")]
                if ds.format != "ferroload"
                else []
            ),
            ("samples", f"{ds.num_samples:,}"),
            ("shards", f"{ds.num_shards:,}"),
            ("size", f"{r.size(m.size_bytes)} ({parts}, manifest)"),
        ]
    )
    if ds.modalities:
        r.table(
            ["modality", "ext", "kind", "codec"],
            [[x.name, x.ext, x.kind, x.codec_hint] for x in ds.modalities],
        )
    else:
        r.line("\nno modalities")
    if meta:
        r.table(["metadata column", "type"], [[f.name, str(f.type)] for f in meta])
    else:
        r.line("\nno metadata columns")
    if layers:
        r.table(
            ["layer", "base version", "columns", "modalities"],
            [
                [x["name"], x["base_version"], ", ".join(x["columns"]), ", ".join(x["modalities"])]
                for x in layers
            ],
        )
    else:
        r.line("\nno layers")


@app.command(epilog=examples("ferroload schema ./pets", "ferroload schema ./pets --json"))
def schema(uri: Uri, json: Json = False, storage_option: StorageOptions = None) -> None:
    """The columns of a dataset's index, their role and Arrow type."""
    ds = open_dataset(uri, storage_option)
    modalities = {x.name for x in ds.modalities}

    def role(name: str) -> str:
        if name in modalities:
            return "modality"
        return "metadata" if name in ds.metadata_columns else "index"

    fields = [
        {"name": f.name, "type": str(f.type), "nullable": bool(f.nullable), "role": role(f.name)}
        for f in ds.schema
    ]
    if json:
        r.print_json(fields)
    else:
        r.table(
            ["column", "role", "type", "nullable"],
            [[f["name"], f["role"], f["type"], f["nullable"]] for f in fields],
        )


@app.command(
    epilog=examples(
        "ferroload head ./pets",
        "ferroload head ./pets -n 3 --columns sample_id,label,image --json",
    )
)
def head(
    uri: Uri,
    n: Annotated[int, typer.Option("-n", min=0, metavar="N", help="rows to show")] = 5,
    columns: Annotated[
        str | None, typer.Option("--columns", metavar="A,B", help="columns (default all)")
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """The first rows of the index (payloads shown as their sizes)."""
    ds = open_dataset(uri, storage_option)
    names = split_names(columns, option="--columns") or list(ds.columns)
    _check_columns(ds, names)
    modalities = {x.name for x in ds.modalities}
    count = min(n, len(ds))
    rows = ds.take(list(range(count))).to_table(names).to_pylist() if count else []
    for row in rows:
        for c in names:
            if c in modalities:
                row[c] = _payload_size(row[c])
    if json:
        r.print_json(rows)
    else:
        r.table(names, [[r.size(x[c]) if c in modalities else x[c] for c in names] for x in rows])


@app.command(
    context_settings={"ignore_unknown_options": True},  # INDEX may be negative
    epilog=examples(
        "ferroload get ./pets 17",
        "ferroload get ./pets -1 --column caption --json",
        "ferroload get ./pets 17 --column image --out cat.jpg",
    ),
)
def get(
    uri: Uri,
    index: Annotated[
        int,
        typer.Argument(metavar="INDEX", help="sample position (negative counts from the end)"),
    ],
    column: Annotated[str | None, typer.Option(metavar="COLUMN", help="only this column")] = None,
    out: Annotated[
        str | None,
        typer.Option(metavar="FILE", help="write the column's bytes to FILE ('-': stdout)"),
    ] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """One sample (payloads shown as sizes), or one column's bytes to a file."""
    if out is not None and column is None:
        raise usage_error("--out needs --column (which column to write)")
    ds = open_dataset(uri, storage_option)
    modalities = {x.name for x in ds.modalities}
    sample = ds.get(index, None if column is None else [column])
    if out is not None and column is not None:
        value = sample[column]
        if value is None:
            import ferroload

            raise ferroload.SampleIndexError(
                f"sample {index} of {ds.uri} has no {column!r}", uri=ds.uri, column=column
            )
        data = (
            bytes(value)
            if isinstance(value, bytes | bytearray | memoryview)
            else str(value).encode()
        )
        if out == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return
        with open(out, "wb") as f:
            f.write(data)
        if json:
            r.print_json({"column": column, "out": os.path.abspath(out), "size_bytes": len(data)})
        else:
            r.line(f"wrote {len(data)} bytes of {column!r} to {out}")
        return
    shown = {k: (_payload_size(v) if k in modalities else v) for k, v in sample.items()}
    if json:
        r.print_json(shown)
    else:
        r.pairs([(k, r.size(v) if k in modalities else v) for k, v in shown.items()])


@app.command(
    epilog=examples(
        'ferroload sql ./pets "SELECT label, count(*) AS n FROM samples GROUP BY label"',
        "ferroload sql ./pets \"SELECT sample_id FROM samples WHERE caption LIKE '%cat%'\" --json",
    )
)
def sql(
    uri: Uri,
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help='e.g. "SELECT label, count(*) FROM samples GROUP BY 1"'
        ),
    ],
    json: Json = False,
    storage_option: StorageOptions = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.001, metavar="SECONDS", help="seconds DuckDB may run before it is interrupted"
        ),
    ] = 30.0,
) -> None:
    """Run one SELECT over the index (table `samples`) in DuckDB's sandbox."""
    result = open_dataset(uri, storage_option).sql(query, timeout=timeout)
    names, rows = result.column_names, result.to_pylist()
    if json:
        r.print_json(rows)
    else:
        r.table(names, [[x[c] for c in names] for x in rows])
        r.line(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


@app.command(
    epilog=examples(
        "ferroload verify ./pets",
        "ferroload verify ./pets --version 3",
        "ferroload verify s3://bucket/pets --json || echo damaged",
    )
)
def verify(
    uri: Uri,
    json: Json = False,
    storage_option: StorageOptions = None,
    version: Annotated[
        int | None,
        typer.Option("--version", min=1, metavar="N", help="check version N (default: the latest)"),
    ] = None,
) -> None:
    """Check the index, every shard and payload checksum; exit code 1 on damage."""
    ds = open_dataset(uri, storage_option, version=version)
    t0 = time.perf_counter()
    report = ds.verify(progress=progress_arg())
    seconds = time.perf_counter() - t0
    if json:
        r.print_json(
            {
                "uri": shown_uri(report.uri),
                "name": ds.name,
                "version": report.version,
                "ok": report.ok,
                "num_shards_checked": report.shards_checked,
                "num_payloads_checked": report.payloads_checked,
                "checked_bytes": report.bytes_checked,
                "num_problems": len(report.problems),
                "problems": [dataclasses.asdict(p) for p in report.problems],
                "seconds": round(seconds, 3),
            }
        )
    else:
        checked = (
            f"{r.count(report.shards_checked, 'shard')}, "
            f"{r.count(report.payloads_checked, 'payload')}, {r.size(report.bytes_checked)}"
        )
        if report.ok:
            r.line(f"ok: {shown_uri(report.uri)} version {report.version} ({checked} checked)")
        else:
            r.line(
                f"damaged: {shown_uri(report.uri)} version {report.version}: "
                f"{r.count(len(report.problems), 'problem')} ({checked} checked)"
            )
            r.table(
                ["problem", "shard", "sample", "column", "message"],
                [[p.kind, p.shard, p.sample_id, p.column, p.message] for p in report.problems],
            )
    if not report.ok:
        raise typer.Exit(1)


@app.command(epilog=examples("ferroload log ./pets", "ferroload log ./pets --json"))
def log(uri: Uri, json: Json = False, storage_option: StorageOptions = None) -> None:
    """The committed versions of a dataset, oldest first, with their size."""
    from ferroload_format import read_manifest

    ds = open_dataset(uri, storage_option)
    versions = []
    for v in ds.versions():
        m = ds.manifest if v.version == ds.version else read_manifest(ds.store, v.version)
        versions.append({**dataclasses.asdict(v), "size_bytes": m.size_bytes})
    if json:
        r.print_json(versions)
        return
    keys = ["version", "created_at", "operation", "num_samples", "num_shards"]
    r.table(
        ["version", "created", "operation", "samples", "shards", "size", "txn"],
        [[*(v[k] for k in keys), r.size(v["size_bytes"]), v["txn"]] for v in versions],
    )
