"""`ferroload export …`: a dataset written out as WebDataset tars or an image folder."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Json,
    StorageOptions,
    command_group,
    examples,
    open_dataset,
    progress_arg,
    shown_uri,
    split_names,
)

if TYPE_CHECKING:
    import ferroload
    from ferroload_convert import ExportReport

export_app = command_group(
    "export",
    "Write a ferroload dataset out in another layout.",
)


class Metadata(StrEnum):
    """Whether a WebDataset export writes the metadata members."""

    JSON = "json"
    NONE = "none"


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
        f"({r.count(report.num_files, 'file')}) in {report.seconds:.1f} s"
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
            "__ferroload__ member that types them and names the modalities); none: "
            "modalities only"
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


# the Python functions' spellings (`export_webdataset`, `export_image_folder`), hidden
export_app.command("webdataset", hidden=True)(export_wds)
export_app.command("image-folder", hidden=True)(export_imagefolder)
