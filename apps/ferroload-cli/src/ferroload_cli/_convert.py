"""`ferroload import …` and `ferroload export …`: thin over `ferroload_convert`."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import Json, StorageOptions, app, storage_options, usage_error
from ferroload_store import CacheConfigError, parse_size

if TYPE_CHECKING:
    from ferroload_convert import ExportReport, ImportReport

import_app = typer.Typer(
    help="Bring existing data into a ferroload dataset (bytes copied as they are).",
    no_args_is_help=True,
)
export_app = typer.Typer(
    help="Write a ferroload dataset out in another layout.", no_args_is_help=True
)
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")


class OnError(StrEnum):
    """What an import does with a bad input file."""

    RAISE = "raise"
    SKIP = "skip"
    WARN = "warn"


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text, name="--shard-size")
    except CacheConfigError as exc:
        raise usage_error(str(exc)) from None


Src = Annotated[str, typer.Argument(metavar="SRC", help="the input (a folder, file or glob)")]
Dst = Annotated[str, typer.Argument(metavar="DST", help="the dataset to write (any dataset URI)")]
Name = Annotated[str | None, typer.Option(help="the dataset's name (default: from DST)")]
Workers = Annotated[int, typer.Option(min=1, help="threads reading and checking inputs")]
OnErrorOpt = Annotated[
    OnError,
    typer.Option(
        "--on-error", help="a bad input file: raise (default; nothing is written), skip, or warn"
    ),
]
ShardSize = Annotated[
    str | None, typer.Option(metavar="SIZE", help="target shard size, e.g. 256MiB")
]


def _common(
    name: str | None,
    workers: int,
    on_error: OnError,
    shard_size: str | None,
    options: list[str] | None,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "name": name,
        "workers": workers,
        "on_error": on_error.value,
        "storage_options": storage_options(options),
    }
    size = _size(shard_size)
    if size is not None:
        kwargs["shard_size"] = size
    return kwargs


def _run_import(what: str, fn: Any, src: Any, dst: str, json: bool, **kwargs: Any) -> None:
    with r.progress(f"importing {what}") as update:
        report: ImportReport = fn(src, dst, progress=update, **kwargs)
    if json:
        r.print_json(dataclasses.asdict(report))
        return
    r.line(
        f"imported {report.num_samples} samples from {src} into {report.uri} "
        f"(version {report.version}) in {report.seconds:.1f} s"
    )
    for skipped in report.skipped:
        r.line(f"skipped {skipped.where}: {skipped.reason}")


@import_app.command("imagefolder")
def import_imagefolder(
    src: Src,
    dst: Dst,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """An image folder: one subfolder per class (label = class index, sorted names)."""
    from ferroload_convert import import_image_folder

    _run_import(
        "images",
        import_image_folder,
        src,
        dst,
        json,
        **_common(name, workers, on_error, shard_size, storage_option),
    )


@import_app.command("wds")
def import_wds(
    src: Annotated[str, typer.Argument(metavar="SRC", help="a tar, a folder of tars, or a glob")],
    dst: Dst,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """WebDataset tars (any member layout; every member kept byte for byte)."""
    from ferroload_convert import import_webdataset

    _run_import(
        "tars",
        import_webdataset,
        src,
        dst,
        json,
        **_common(name, workers, on_error, shard_size, storage_option),
    )


@import_app.command("hf")
def import_hf_cmd(
    src: Annotated[str, typer.Argument(metavar="SRC", help="a datasets save_to_disk folder")],
    dst: Dst,
    split: Annotated[str | None, typer.Option(help="the split of a DatasetDict")] = None,
    id_column: Annotated[str | None, typer.Option(help="the column holding sample ids")] = None,
    name: Name = None,
    workers: Workers = 8,
    on_error: OnErrorOpt = OnError.RAISE,
    shard_size: ShardSize = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """A Hugging Face datasets folder (save_to_disk), Image and Audio features included."""
    from ferroload_convert import import_hf

    kwargs = _common(name, workers, on_error, shard_size, storage_option)
    _run_import("rows", import_hf, src, dst, json, split=split, id_column=id_column, **kwargs)


@import_app.command("parquet")
def import_parquet_cmd(
    src: Annotated[str, typer.Argument(metavar="SRC", help="a Parquet file, folder or glob")],
    dst: Dst,
    id_column: Annotated[str | None, typer.Option(help="the column holding sample ids")] = None,
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
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """Parquet files: binary columns become modalities, the others metadata."""
    from ferroload_convert import import_parquet

    columns: dict[str, str] | None = None
    if binary:
        columns = {}
        for text in binary:
            col, sep, ext = text.partition("=")
            if not sep or not col or not ext:
                raise usage_error(f"--binary takes COLUMN=EXT, got {text!r}")
            columns[col] = ext
    kwargs = _common(name, workers, on_error, shard_size, storage_option)
    _run_import(
        "rows",
        import_parquet,
        src,
        dst,
        json,
        id_column=id_column,
        binary_columns=columns,
        **kwargs,
    )


def _show_export(report: ExportReport, dst: str, *, json: bool) -> None:
    if json:
        r.print_json(dataclasses.asdict(report))
    else:
        r.line(f"exported {report.num_samples} samples to {dst} in {report.seconds:.1f} s")


Where = Annotated[
    str | None, typer.Option("--where", "-w", help="only samples matching this SQL condition")
]
ExportSrc = Annotated[
    str, typer.Argument(metavar="URI", help="the dataset (any URI, catalog:NAME)")
]
ExportDst = Annotated[str, typer.Argument(metavar="DST", help="the folder to write")]


@export_app.command("wds")
def export_wds(
    src: ExportSrc,
    dst: ExportDst,
    where: Where = None,
    samples_per_shard: Annotated[int | None, typer.Option(min=1, help="samples per tar")] = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """WebDataset tars: <key>.<ext> per modality and <key>.json with the metadata."""
    from ferroload_convert import export_webdataset

    kwargs: dict[str, Any] = {"where": where, "storage_options": storage_options(storage_option)}
    if samples_per_shard is not None:
        kwargs["samples_per_shard"] = samples_per_shard
    with r.progress("exporting") as update:
        report = export_webdataset(src, dst, progress=update, **kwargs)
    _show_export(report, dst, json=json)


@export_app.command("imagefolder")
def export_imagefolder(
    src: ExportSrc,
    dst: ExportDst,
    modality: Annotated[
        str | None, typer.Option(help="the image modality (default: the only one)")
    ] = None,
    where: Where = None,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """An image folder: one subfolder per class."""
    from ferroload_convert import export_image_folder

    with r.progress("exporting") as update:
        report = export_image_folder(
            src, dst, modality=modality, where=where, progress=update,
            storage_options=storage_options(storage_option),
        )  # fmt: skip
    _show_export(report, dst, json=json)
