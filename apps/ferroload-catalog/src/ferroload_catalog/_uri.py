"""`catalog:name` URIs for `Dataset.open` and `gc`: the resolver this package registers as
the `uri.catalog` entry point of `ferroload.plugins` (the format never imports the catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferroload_catalog._catalog import Catalog


def resolve_catalog_uri(
    uri: str, storage_options: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """The URI and storage options `catalog:name` stands for, in the default catalog: the
    entry's URI and stored options, with `storage_options` over them (see
    `Catalog.locate`)."""
    return Catalog().locate(uri, storage_options=storage_options)
