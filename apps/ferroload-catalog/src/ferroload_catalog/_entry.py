"""One catalog entry (`CatalogEntry`), the rule for names and tags, and where the catalog
file lives by default."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platformdirs import user_data_path

from ferroload_catalog._errors import InvalidCatalogNameError

#: Environment variable naming the catalog file (overrides the user data directory).
CATALOG_ENV = "FERROLOAD_CATALOG"
#: The URI scheme `Catalog.resolve` turns into an entry's URI: `catalog:<name>`.
CATALOG_SCHEME = "catalog:"

#: What a catalog name or tag may be (see `validate_name`).
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")


def default_catalog_path() -> Path:
    """Where `Catalog()` keeps its file: `$FERROLOAD_CATALOG`, else the user data directory.

    Returns:
        the path of the catalog's DuckDB file (it need not exist yet).

    Examples:
        >>> default_catalog_path().name.endswith(".duckdb") or "FERROLOAD_CATALOG" in os.environ
        True
    """
    env = os.environ.get(CATALOG_ENV)
    if env:
        return Path(env).expanduser()
    return user_data_path("ferroload") / "catalog.duckdb"


def validate_name(name: str, *, what: str = "catalog name") -> str:
    """Check a catalog name (or tag): lowercase letters, digits, `-`, `_` and `.`.

    It starts with a letter or a digit and has at most 128 characters.

    Args:
        name: the name to check.
        what: what the name is, for the error message.

    Returns:
        `name`, unchanged.

    Raises:
        InvalidCatalogNameError: (a `ValueError`) if the name breaks the rule.

    Examples:
        >>> validate_name("imagenet-1k_v2.train")
        'imagenet-1k_v2.train'
        >>> validate_name("ImageNet")
        Traceback (most recent call last):
        ...
        ferroload_catalog._errors.InvalidCatalogNameError: invalid catalog name 'ImageNet': ...
    """
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise InvalidCatalogNameError(
            f"invalid {what} {name!r}: use 1-128 lowercase letters, digits, '-', '_' "
            "and '.', starting with a letter or a digit",
            name=name if isinstance(name, str) else None,
        )
    return name


@dataclass(frozen=True)
class CatalogEntry:
    """One dataset of the catalog.

    Attributes:
        name: the entry's unique name (`catalog:<name>` resolves to `uri`).
        uri: the dataset root, as `Dataset.open` normalised it.
        version: the dataset's latest version when the entry was added or last refreshed.
        tags: the entry's tags, sorted.
        description: free text.
        num_samples: samples of that version.
        size_bytes: that version's `Manifest.size_bytes` (tar shards, index parts,
            layers' and the manifest file: the number `ferroload info` reports).
        created_at: when the entry was added (UTC).
        updated_at: when the entry last changed (UTC).
        storage_options: the options the entry is opened with, as stored: non-secret
            values, and `env:NAME` for a value read from the environment variable
            `NAME` at open (never a secret itself).
    """

    name: str
    uri: str
    version: int
    tags: tuple[str, ...]
    description: str
    num_samples: int
    size_bytes: int
    created_at: datetime
    updated_at: datetime
    storage_options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def catalog_uri(self) -> str:
        """`catalog:<name>`: what `Catalog.resolve` and `Catalog.open_dataset` accept."""
        return f"{CATALOG_SCHEME}{self.name}"


def utc_now() -> datetime:
    """Now, as the catalog stores times."""
    # naive UTC: DuckDB's TIMESTAMP; CatalogEntry gets it back with tzinfo=UTC
    return datetime.now(UTC).replace(tzinfo=None)


def entry_from_row(row: tuple[Any, ...]) -> CatalogEntry:
    """The entry of one row of the `entries` table (its columns in `_COLUMNS` order)."""
    name, uri, version, tags, description, num_samples, size_bytes, created, updated, opts = row
    return CatalogEntry(
        name=name,
        uri=uri,
        version=int(version),
        tags=tuple(tags),
        description=description,
        num_samples=int(num_samples),
        size_bytes=int(size_bytes),
        created_at=created.replace(tzinfo=UTC),
        updated_at=updated.replace(tzinfo=UTC),
        storage_options=json.loads(opts) if opts else {},
    )


def checked_tags(tags: Iterable[str]) -> list[str]:
    """Tags checked like names, deduplicated and sorted (one string is one tag)."""
    if isinstance(tags, str):
        tags = (tags,)
    return sorted({validate_name(t, what="tag") for t in tags})
