"""`ferroload import …` and `ferroload export …`: thin over `ferroload_convert`."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Append,
    Json,
    Overwrite,
    StorageOptions,
    WriteMode,
    app,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    split_names,
    storage_options,
    usage_error,
    write_mode,
)

if TYPE_CHECKING:
    import ferroload
    from ferroload_convert import ExportReport, ImportReport

import_app = typer.Typer(
    help="Bring existing data into a ferroload dataset (bytes copied as they are).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
export_app = typer.Typer(
    help="Write a ferroload dataset out in another layout.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")


class Metadata(StrEnum):
    """Whether a WebDataset export writes the metadata members."""

    JSON = "json"
    NONE = "none"


class OnError(StrEnum):
    """What an import does with a bad input file."""

    RAISE = "raise"
    SKIP = "skip"
    WARN = "warn"


def _size(text: str | None, *, option: str) -> int | None:
    if text is None:
        return None
    from ferroload_store import CacheConfigError, parse_size

    try:
        return parse_size(text, name=option)
    except CacheConfigError as exc:
        raise usage_error(str(exc)) from None


Src = Annotated[
    str,
    typer.Argument(metavar="SRC", help="the input (a folder, file or glob)", show_default=False),
]
Dst = Annotated[
    str,
    typer.Argument(
        metavar="DST", help="the dataset to write (any dataset URI)", show_default=False
    ),
]
Name = Annotated[
    str | None,
    typer.Option(metavar="NAME", help="the dataset's name (default: from DST)"),
]
Workers = Annotated[
    int, typer.Option(min=1, metavar="N", help="threads reading and checking inputs")
]
OnErrorOpt = Annotated[
    OnError,
    typer.Option(
        "--on-error", help="a bad input file: raise (default; nothing is written), skip, or warn"
    ),
]
ShardSize = Annotated[
    str | None, typer.Option(metavar="SIZE", help="target shard size, e.g. 256MiB")
]
MaxFileSize = Annotated[
    str | None,
    typer.Option(
        metavar="SIZE", help="the largest input file read (default 2GiB); a larger one is bad"
    ),
]


def _common(
    name: str | None,
    workers: int,
    on_error: OnError,
    shard_size: str | None,
    options: list[str] | None,
    mode: WriteMode,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "name": name,
        "workers": workers,
        "on_error": on_error.value,
        "storage_options": storage_options(options),
        "mode": mode,
        "progress": progress_arg(),
    }
    size = _size(shard_size, option="--shard-size")
    if size is not None:
        kwargs["shard_size"] = size
    return kwargs


def _max_file(kwargs: dict[str, Any], max_file_size: str | None) -> dict[str, Any]:
    """`kwargs` with `max_file_bytes` from `--max-file-size` (when given)."""
    size = _size(max_file_size, option="--max-file-size")
    return kwargs if size is None else {**kwargs, "max_file_bytes": size}


def _dataset_fields(
    uri: str, version: int | None, options: dict[str, str] | None
) -> dict[str, Any]:
    """`name`, `num_samples`, `num_shards`, `size_bytes` of the version a write committed."""
    import ferroload

    if version is None:  # nothing written: describe what is there, if anything
        try:
            ds = ferroload.Dataset.open(uri, storage_options=options)
        except ferroload.DatasetNotFoundError:
            return {"name": None, "num_samples": 0, "num_shards": 0, "size_bytes": 0}
    else:
        ds = ferroload.Dataset.open(uri, version=version, storage_options=options)
    return {
        "name": ds.name,
        "num_samples": ds.num_samples,
        "num_shards": ds.num_shards,
        "size_bytes": ds.manifest.size_bytes,
    }


def _run_import(
    fn: Callable[..., ImportReport], src: Any, dst: str, json: bool, **kwargs: Any
) -> None:
    report = fn(src, dst, **kwargs)
    fields = _dataset_fields(report.uri, report.version, kwargs["storage_options"])
    result = {
        "uri": shown_uri(report.uri),
        "name": fields["name"],
        "version": report.version,
        "num_samples": fields["num_samples"],
        "num_shards": fields["num_shards"],
        "size_bytes": fields["size_bytes"],
        "mode": kwargs["mode"],
        "num_written": report.num_samples,
        "payload_bytes": report.num_bytes,
        "num_skipped": report.num_skipped,
        "skipped": [{"where": x.where, "reason": x.reason} for x in report.skipped],
        "num_ignored": report.num_ignored,
        "columns": dict(report.columns),
        "seconds": round(report.seconds, 3),
    }
    if json:
        r.print_json(result)
        return
    into = f"{result['uri']} (version {report.version}"
    if kwargs["mode"] != "create":
        into += f", {r.count(fields['num_samples'])} now"
    r.line(
        f"imported {r.count(report.num_samples)} from {src} into {into}) in {report.seconds:.1f} s"
    )
    for skipped in report.skipped:
        r.line(f"skipped {skipped.where}: {skipped.reason}")


@import_app.command(
    "imagefolder",
    epilog=examples(
        "ferroload import imagefolder ~/photos ./photos",
        "ferroload import imagefolder ~/photos s3://bucket/photos --on-error skip --json",
        "ferroload import imagefolder ~/more-photos ./photos --append",
    ),
)
def import_imagefolder(
    src: Src,
    dst: Dst,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    max_file_size: MaxFileSize = None,
    append: Append = False,
    overwrite: Overwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """An image folder: one subfolder per class (label = class index, sorted names)."""
    from ferroload_convert import import_image_folder

    mode = write_mode(append, overwrite)
    kwargs = _common(name, workers, on_error, shard_size, storage_option, mode)
    _run_import(import_image_folder, src, dst, json, **_max_file(kwargs, max_file_size))


@import_app.command(
    "wds",
    epilog=examples(
        "ferroload import wds ./shards ./ds",
        "ferroload import wds 'train-{0000..0003}.tar' ./ds --json",
        "ferroload import wds s3://bucket/wds/ ./ds --overwrite",
    ),
)
def import_wds(
    src: Annotated[
        str,
        typer.Argument(
            metavar="SRC",
            help="a tar, a folder of tars, a glob or a brace pattern (train-{0000..0003}.tar)",
            show_default=False,
        ),
    ],
    dst: Dst,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    max_file_size: MaxFileSize = None,
    max_inflate_ratio: Annotated[
        float | None,
        typer.Option(
            min=1,
            metavar="RATIO",
            help="how much a compressed tar may inflate (default 100); more is a bad input",
        ),
    ] = None,
    append: Append = False,
    overwrite: Overwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """WebDataset tars (any member layout; every member kept byte for byte)."""
    from ferroload_convert import import_webdataset

    mode = write_mode(append, overwrite)
    kwargs = _max_file(
        _common(name, workers, on_error, shard_size, storage_option, mode), max_file_size
    )
    if max_inflate_ratio is not None:
        kwargs["max_inflate_ratio"] = max_inflate_ratio
    _run_import(import_webdataset, src, dst, json, **kwargs)


@import_app.command(
    "hf",
    epilog=examples(
        "ferroload import hf ./saved ./ds",
        "ferroload import hf ./saved ./ds --splits train,validation --json",
        "ferroload import hf ./saved ./train --split train --id-column id",
    ),
)
def import_hf_cmd(
    src: Annotated[
        str,
        typer.Argument(metavar="SRC", help="a datasets save_to_disk folder", show_default=False),
    ],
    dst: Dst,
    split: Annotated[
        str | None,
        typer.Option(
            metavar="SPLIT", help="import this split of a DatasetDict alone (no split column)"
        ),
    ] = None,
    splits: Annotated[
        str | None,
        typer.Option(
            metavar="A,B",
            help="the splits of a DatasetDict to import (default: all), with a split column",
        ),
    ] = None,
    id_column: Annotated[
        str | None, typer.Option(metavar="COLUMN", help="the column holding sample ids")
    ] = None,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    max_file_size: MaxFileSize = None,
    append: Append = False,
    overwrite: Overwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """A Hugging Face datasets folder (save_to_disk); a DatasetDict with a split column."""
    from ferroload_convert import import_hf

    mode = write_mode(append, overwrite)
    kwargs = _max_file(
        _common(name, workers, on_error, shard_size, storage_option, mode), max_file_size
    )
    if split is not None and splits is not None:
        raise usage_error("--split and --splits exclude each other")
    if splits is not None:
        kwargs["splits"] = split_names(splits, option="--splits")
    _run_import(import_hf, src, dst, json, split=split, id_column=id_column, **kwargs)


@import_app.command(
    "parquet",
    epilog=examples(
        "ferroload import parquet ./table.parquet ./ds --id-column key",
        "ferroload import parquet 'data/*.parquet' ./ds --binary jpg=jpg --json",
        "ferroload import parquet ./more.parquet ./ds --append",
    ),
)
def import_parquet_cmd(
    src: Annotated[
        str,
        typer.Argument(metavar="SRC", help="a Parquet file, folder or glob", show_default=False),
    ],
    dst: Dst,
    id_column: Annotated[
        str | None, typer.Option(metavar="COLUMN", help="the column holding sample ids")
    ] = None,
    binary: Annotated[
        list[str] | None,
        typer.Option(
            metavar="COLUMN=EXT",
            help="a binary column and its extension (default: every binary column, sniffed); repeatable",
            show_default=False,
        ),
    ] = None,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    append: Append = False,
    overwrite: Overwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Parquet files: binary columns become modalities, the others metadata."""
    from ferroload_convert import import_parquet

    mode = write_mode(append, overwrite)
    columns: dict[str, str] | None = None
    if binary:
        columns = {}
        for text in binary:
            col, sep, ext = text.partition("=")
            if not sep or not col or not ext:
                raise usage_error(f"--binary takes COLUMN=EXT, got {text!r}")
            columns[col] = ext
    kwargs = _common(name, workers, on_error, shard_size, storage_option, mode)
    _run_import(
        import_parquet, src, dst, json, id_column=id_column, binary_columns=columns, **kwargs
    )


def _show_export(report: ExportReport, ds: ferroload.Dataset, dst: str, *, json: bool) -> None:
    result = {
        "uri": shown_uri(ds.uri),
        "name": ds.name,
        "version": ds.version,
        "num_samples": ds.num_samples,
        "num_shards": ds.num_shards,
        "size_bytes": ds.manifest.size_bytes,
        "dst": shown_uri(report.dst or dst),
        "num_written": report.num_samples,
        "num_files": report.num_files,
        "payload_bytes": report.num_bytes,
        "num_skipped": len(report.skipped),
        "skipped": [{"where": x.where, "reason": x.reason} for x in report.skipped],
        "seconds": round(report.seconds, 3),
    }
    if json:
        r.print_json(result)
        return
    r.line(
        f"exported {r.count(report.num_samples)} to {result['dst']} "
        f"({report.num_files} files) in {report.seconds:.1f} s"
    )
    for skipped in report.skipped:
        r.line(f"skipped {skipped.where}: {skipped.reason}")


Where = Annotated[
    str | None,
    typer.Option(
        "--where", "-w", metavar="CONDITION", help="only samples matching this SQL condition"
    ),
]
ExportSrc = Annotated[
    str,
    typer.Argument(metavar="URI", help="the dataset (any URI, catalog:NAME)", show_default=False),
]
ExportOverwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="replace the content of a non-empty DST folder once the export is complete "
        "(never a dataset)",
    ),
]
ExportDst = Annotated[
    str,
    typer.Argument(metavar="DST", help="the folder to write (new or empty)", show_default=False),
]


@export_app.command(
    "wds",
    epilog=examples(
        "ferroload export wds ./pets ./pets-wds",
        'ferroload export wds ./pets ./cats-wds --where "label = 3" --samples-per-shard 1000 --json',
        "ferroload export wds ./pets ./pets-wds --metadata-columns label,caption --overwrite",
    ),
)
def export_wds(
    src: ExportSrc,
    dst: ExportDst,
    where: Where = None,
    samples_per_shard: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="samples per tar")
    ] = None,
    metadata: Annotated[
        Metadata,
        typer.Option(
            help="json: label as <key>.cls, the other metadata as <key>.json (and the "
            "__ferroload__ member that types them); none: modalities only"
        ),
    ] = Metadata.JSON,
    metadata_columns: Annotated[
        str | None,
        typer.Option(metavar="A,B", help="the metadata columns written (default: all)"),
    ] = None,
    overwrite: ExportOverwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """WebDataset tars, self-contained: <key>.<ext> per modality, <key>.cls, <key>.json."""
    from ferroload_convert import export_webdataset

    ds = open_dataset(src, storage_option)
    kwargs: dict[str, Any] = {
        "where": where, "overwrite": overwrite, "progress": progress_arg(),
        "metadata": metadata.value,
        "metadata_columns": split_names(metadata_columns, option="--metadata-columns"),
    }  # fmt: skip
    if samples_per_shard is not None:
        kwargs["samples_per_shard"] = samples_per_shard
    report = export_webdataset(ds, dst, **kwargs)
    _show_export(report, ds, dst, json=json)


@export_app.command(
    "imagefolder",
    epilog=examples(
        "ferroload export imagefolder ./pets ./pets-folder",
        'ferroload export imagefolder ./pets ./cats --where "label = 3" --modality image --json',
    ),
)
def export_imagefolder(
    src: ExportSrc,
    dst: ExportDst,
    modality: Annotated[
        str | None,
        typer.Option(metavar="MODALITY", help="the image modality (default: the only one)"),
    ] = None,
    where: Where = None,
    overwrite: ExportOverwrite = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """An image folder: one subfolder per class."""
    from ferroload_convert import export_image_folder

    ds = open_dataset(src, storage_option)
    report = export_image_folder(
        ds, dst, modality=modality, where=where, overwrite=overwrite, progress=progress_arg()
    )
    _show_export(report, ds, dst, json=json)
