"""`ferroload import …`: thin over `ferroload_convert`'s importers, with the options they share."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Append,
    Json,
    Overwrite,
    StorageOptions,
    command_group,
    examples,
    progress_arg,
    shown_uri,
    split_names,
    storage_options,
    usage_error,
    write_mode,
)

if TYPE_CHECKING:
    from ferroload_convert import ImportReport

import_app = command_group(
    "import",
    "Bring existing data into a ferroload dataset (bytes copied as they are).",
)


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

RayOpt = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="run the import as tasks on a Ray cluster (ray.init's, else a local one), "
        "with one commit (needs the ray extra)",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(metavar="ADDRESS", help="with --ray: the cluster to connect to (ray.init)"),
]
ChunkSize = Annotated[
    int | None,
    typer.Option(min=1, metavar="N", help="with --ray: tars, files or row units per task"),
]


@dataclass(frozen=True)
class _Common:
    """What the options every importer takes resolve to: the importer's keyword arguments
    (`name`, `workers`, `on_error`, `storage_options`, `mode`, `progress`, and
    `shard_size` / `max_file_bytes` when given) and `--json`."""

    kwargs: dict[str, Any]
    json: bool


#: The options every `ferroload import` command takes, after its own: (name, type, default).
_COMMON_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("name", Name, None),
    ("workers", Workers, 8),
    ("on_error", OnErrorOpt, OnError.RAISE),
    ("shard_size", ShardSize, None),
    ("max_file_size", MaxFileSize, None),
    ("append", Append, False),
    ("overwrite", Overwrite, False),
    ("json", Json, False),
    ("storage_option", StorageOptions, None),
    ("ray", RayOpt, False),
    ("ray_address", RayAddress, None),
    ("chunk_size", ChunkSize, None),
)


def _executor(given: dict[str, Any]) -> dict[str, Any]:
    """`executor=` and `chunk_size=` of `--ray`, `--ray-address`, `--chunk-size`."""
    if not given["ray"]:
        if given["ray_address"] is not None or given["chunk_size"] is not None:
            raise typer.BadParameter("--ray-address and --chunk-size go with --ray")
        return {}
    from ferroload_map import RayExecutor

    if given["ray_address"] is not None:
        try:
            import ray
        except ImportError as exc:
            raise typer.BadParameter(
                "--ray needs Ray: pip install 'ferroload[ray]'", param_hint="--ray"
            ) from exc
        ray.init(address=given["ray_address"], ignore_reinit_error=True)
    return {"executor": RayExecutor(), "chunk_size": given["chunk_size"]}


def _resolve_common(given: dict[str, Any], *, max_file: bool) -> _Common:
    mode = write_mode(given["append"], given["overwrite"])
    kwargs: dict[str, Any] = {
        "name": given["name"],
        "workers": given["workers"],
        "on_error": given["on_error"].value,
        "storage_options": storage_options(given["storage_option"]),
        "mode": mode,
        "progress": progress_arg(),
        **_executor(given),
    }
    sizes = [("shard_size", "--shard-size", "shard_size")]
    if max_file:
        sizes.append(("max_file_size", "--max-file-size", "max_file_bytes"))
    for key, option, into in sizes:
        size = _size(given[key], option=option)
        if size is not None:
            kwargs[into] = size
    return _Common(kwargs, bool(given["json"]))


def _import_command(
    name: str, *examples_: str, max_file: bool = True, alias: str | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register an import command: the decorated function declares its own arguments and
    a last parameter `common: _Common`; the command takes those, then the options every
    importer takes (`_COMMON_OPTIONS`, without `--max-file-size` when not `max_file`),
    resolved into `common` before the function runs (Typer reads the signature built here).
    `alias`: the name of the Python function's spelling (`webdataset` for `wds`), a
    hidden command that runs the same.
    """

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())
        assert own[-1].name == "common", f"{fn.__name__} must end with `common: _Common`"
        shared = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=t, default=d)
            for n, t, d in _COMMON_OPTIONS
            if max_file or n != "max_file_size"
        ]
        params = [*own[:-1], *shared]

        @functools.wraps(fn)
        def command(**given: Any) -> None:
            picked = {p.name: given.pop(p.name) for p in shared}
            picked.setdefault("max_file_size", None)
            fn(**given, common=_resolve_common(picked, max_file=max_file))

        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        if alias is not None:
            import_app.command(alias, epilog=examples(*examples_), hidden=True)(command)
        return import_app.command(name, epilog=examples(*examples_))(command)

    return register


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


#: Ignored inputs an import names in its text output (`--json` lists them all).
_IGNORED_SHOWN = 20


def _run_import(
    fn: Callable[..., ImportReport], src: Any, dst: str, common: _Common, **own: Any
) -> None:
    kwargs = {**own, **common.kwargs}
    json = common.json
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
        "ignored": [{"where": x.where, "reason": x.reason} for x in report.ignored],
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
    if "<split folder>" in report.columns:  # an image folder read as SRC/<split>/<class>/…
        r.line("read as SRC/<split>/<class>/…, with a split column (--no-splits: as classes)")
    for skipped in report.skipped:
        r.line(f"skipped {skipped.where}: {skipped.reason}")
    for ignored in report.ignored[:_IGNORED_SHOWN]:
        r.line(f"ignored {ignored.where}: {ignored.reason}")
    if report.num_ignored > _IGNORED_SHOWN:
        more = report.num_ignored - _IGNORED_SHOWN
        r.line(f"… and {r.count(more, 'more input')} ignored (--json lists them)")


@_import_command(
    "imagefolder",
    "ferroload import imagefolder ~/photos ./photos",
    "ferroload import imagefolder ~/photos s3://bucket/photos --on-error skip --json",
    "ferroload import imagefolder ~/more-photos ./photos --append",
    "ferroload import imagefolder ~/flowers ./flowers --no-splits  # train/, val/ as classes",
    alias="image-folder",
)
def import_imagefolder(
    src: Src,
    dst: Dst,
    splits: Annotated[
        bool | None,
        typer.Option(
            "--splits/--no-splits",
            help="SRC/<split>/<class>/… with a split column (train, val, test, …), or "
            "SRC/<class>/… (default: by the subfolders' names)",
            show_default=False,
        ),
    ] = None,
    *,
    common: _Common,
) -> None:
    """An image folder: one subfolder per class (label = class index, sorted names)."""
    from ferroload_convert import import_image_folder

    _run_import(import_image_folder, src, dst, common, splits=splits)


@_import_command(
    "wds",
    "ferroload import wds ./shards ./ds",
    "ferroload import wds 'train-{0000..0003}.tar' ./ds --json",
    "ferroload import wds s3://bucket/wds/ ./ds --overwrite",
    alias="webdataset",
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
    max_inflate_ratio: Annotated[
        float | None,
        typer.Option(
            min=1,
            metavar="RATIO",
            help="how much a compressed tar may inflate (default 100); more is a bad input",
        ),
    ] = None,
    *,
    common: _Common,
) -> None:
    """WebDataset tars (any member layout; every member kept byte for byte)."""
    from ferroload_convert import import_webdataset

    own = {} if max_inflate_ratio is None else {"max_inflate_ratio": max_inflate_ratio}
    _run_import(import_webdataset, src, dst, common, **own)


IdColumn = Annotated[
    str | None, typer.Option(metavar="COLUMN", help="the column holding sample ids")
]


@_import_command(
    "hf",
    "ferroload import hf ./saved ./ds",
    "ferroload import hf ./saved ./ds --splits train,validation --json",
    "ferroload import hf ./saved ./train --split train --id-column id",
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
    id_column: IdColumn = None,
    *,
    common: _Common,
) -> None:
    """A Hugging Face datasets folder (save_to_disk); a DatasetDict with a split column."""
    from ferroload_convert import import_hf

    if split is not None and splits is not None:
        raise usage_error("--split and --splits exclude each other")
    own: dict[str, Any] = {"split": split, "id_column": id_column}
    if splits is not None:
        own["splits"] = split_names(splits, option="--splits")
    _run_import(import_hf, src, dst, common, **own)


@_import_command(
    "parquet",
    "ferroload import parquet ./table.parquet ./ds --id-column key",
    "ferroload import parquet 'data/*.parquet' ./ds --binary jpg=jpg --json",
    "ferroload import parquet ./more.parquet ./ds --append",
    max_file=False,
)
def import_parquet_cmd(
    src: Annotated[
        str,
        typer.Argument(metavar="SRC", help="a Parquet file, folder or glob", show_default=False),
    ],
    dst: Dst,
    id_column: IdColumn = None,
    binary: Annotated[
        list[str] | None,
        typer.Option(
            metavar="COLUMN=EXT",
            help="a binary column and its extension (default: every binary column, sniffed); repeatable",
            show_default=False,
        ),
    ] = None,
    *,
    common: _Common,
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
    _run_import(import_parquet, src, dst, common, id_column=id_column, binary_columns=columns)
