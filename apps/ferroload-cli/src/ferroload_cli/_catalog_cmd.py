"""`ferroload catalog …`: the dataset catalog (name -> URI, version, tags)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferroload_cli import _render as r
from ferroload_cli._app import (
    Json,
    StorageOptions,
    command_group,
    examples,
    shown_uri,
    storage_options,
)

if TYPE_CHECKING:  # imported when a command runs: `ferroload --help` stays fast
    from ferroload_catalog import CatalogEntry

catalog_app = command_group(
    "catalog",
    "The dataset catalog: names for dataset URIs (FERROLOAD_CATALOG overrides the file).",
)

Name = Annotated[str, typer.Argument(help="the entry's name (catalog:NAME opens it)")]
Tags = Annotated[
    list[str] | None,
    typer.Option("--tag", "-t", metavar="TAG", help="a tag; repeatable", show_default=False),
]


StoredOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        "-o",
        metavar="KEY=VALUE",
        help="object-store option stored with the entry and used whenever it opens "
        "(endpoint, region, allow_http, …); a secret only as KEY=env:VAR, the name of an "
        "environment variable read at open; repeatable",
        show_default=False,
    ),
]


def _dict(e: CatalogEntry) -> dict[str, Any]:
    return {
        "name": e.name,
        "uri": shown_uri(e.uri),
        "version": e.version,
        "num_samples": e.num_samples,
        "size_bytes": e.size_bytes,
        "tags": list(e.tags),
        "description": e.description,
        "storage_options": dict(e.storage_options),
        "created_at": e.created_at.isoformat(),
        "updated_at": e.updated_at.isoformat(),
    }


def _options_text(options: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in dict(options).items())


def _show(e: CatalogEntry, *, json: bool) -> None:
    if json:
        r.print_json(_dict(e))
        return
    r.pairs(
        [
            ("name", e.name),
            ("uri", shown_uri(e.uri)),
            ("version", e.version),
            ("samples", e.num_samples),
            ("size", r.size(e.size_bytes)),
            ("tags", ", ".join(e.tags)),
            ("description", e.description),
            ("storage options", _options_text(e.storage_options)),
            ("added", e.created_at.isoformat(timespec="seconds")),
            ("updated", e.updated_at.isoformat(timespec="seconds")),
        ]
    )


@catalog_app.command(
    "add",
    epilog=examples(
        "ferroload catalog add pets ./pets -t images -d 'cats and dogs'",
        "ferroload catalog add laion s3://bucket/laion -o endpoint=http://minio:9000 "
        "-o allow_http=true -o secret_access_key=env:MINIO_SECRET -o access_key_id=env:MINIO_KEY",
        "ferroload info catalog:laion",
    ),
)
def add(
    name: Name,
    uri: Annotated[str, typer.Argument(metavar="URI", help="the dataset root")],
    description: Annotated[
        str, typer.Option("--description", "-d", metavar="TEXT", help="free text")
    ] = "",
    tag: Tags = None,
    replace: Annotated[bool, typer.Option(help="replace an entry of that name")] = False,
    json: Json = False,
    storage_option: StoredOptions = None,
) -> None:
    """Register the dataset at URI under NAME (the dataset is opened to check it).

    The -o options are stored with the entry, so catalog:NAME needs none. Secrets
    (access keys, secret keys, tokens, account keys, SAS tokens, client secrets,
    connection strings) are never stored: pass them as KEY=env:VAR, or leave them to
    the standard AWS_*, GOOGLE_*, AZURE_* variables.
    """
    from ferroload_catalog import Catalog, CatalogEntryExistsError

    try:
        entry = Catalog().add(
            name, uri, description=description, tags=tag or (), replace=replace,
            storage_options=storage_options(storage_option),
        )  # fmt: skip
    except CatalogEntryExistsError as exc:
        raise CatalogEntryExistsError(
            f"the catalog already has an entry {name!r}; pass --replace to overwrite it"
        ) from exc
    _show(entry, json=json)


@catalog_app.command(
    "ls", epilog=examples("ferroload catalog ls", "ferroload catalog ls --tag images --json")
)
def ls(
    tag: Annotated[
        str | None, typer.Option("--tag", "-t", metavar="TAG", help="only entries with this tag")
    ] = None,
    json: Json = False,
) -> None:
    """Every entry, sorted by name."""
    from ferroload_catalog import Catalog

    entries = Catalog().list(tag=tag)
    if json:
        r.print_json([_dict(e) for e in entries])
        return
    r.table(
        ["name", "version", "samples", "size", "tags", "uri"],
        [
            [e.name, e.version, e.num_samples, r.size(e.size_bytes), ", ".join(e.tags), e.uri]
            for e in entries
        ],
    )


@catalog_app.command(
    "show",
    epilog=examples("ferroload catalog show pets", "ferroload catalog show pets --no-refresh"),
)
def show(
    name: Name,
    no_refresh: Annotated[
        bool, typer.Option("--no-refresh", help="do not read the dataset's latest version")
    ] = False,
    json: Json = False,
    storage_option: StorageOptions = None,
) -> None:
    """One entry, refreshed first from the dataset's latest version (opened with the
    entry's stored storage options; -o goes over them for this call)."""
    from ferroload_catalog import Catalog

    catalog = Catalog()
    if no_refresh:
        entry = catalog.get(name)
    else:
        entry = catalog.refresh(name, storage_options=storage_options(storage_option))
    _show(entry, json=json)


@catalog_app.command(
    "tag",
    epilog=examples("ferroload catalog tag pets best", "ferroload catalog tag pets best --remove"),
)
def tag(
    name: Name,
    tags: Annotated[list[str], typer.Argument(help="tags to add (or remove)")],
    remove: Annotated[bool, typer.Option("--remove", help="remove these tags instead")] = False,
    json: Json = False,
) -> None:
    """Add tags to an entry, or remove them."""
    from ferroload_catalog import Catalog

    _show(Catalog().tag(name, *tags, remove=remove), json=json)


@catalog_app.command("rm", epilog=examples("ferroload catalog rm pets"))
def rm(name: Name, json: Json = False) -> None:
    """Remove an entry (the dataset itself is untouched)."""
    from ferroload_catalog import Catalog

    Catalog().remove(name)
    if json:
        r.print_json({"name": name, "removed": True})
    else:
        r.line(f"removed {name} from the catalog (the dataset is untouched)")
