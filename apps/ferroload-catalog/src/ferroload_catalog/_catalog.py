"""The embedded catalog: one DuckDB file, one connection per operation."""

from __future__ import annotations

import difflib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
from platformdirs import user_data_path

from ferroload_catalog._errors import (
    CatalogEntryExistsError,
    CatalogEntryNotFoundError,
    CatalogFileError,
    CatalogLockedError,
    CatalogSecretError,
    InvalidCatalogNameError,
)
from ferroload_core import backoff_delay
from ferroload_format import Dataset
from ferroload_store import is_secret_option, normalize_storage_options

#: Environment variable naming the catalog file (overrides the user data directory).
CATALOG_ENV = "FERROLOAD_CATALOG"
#: The URI scheme `Catalog.resolve` turns into an entry's URI: `catalog:<name>`.
CATALOG_SCHEME = "catalog:"
#: Seconds an operation waits for another process to release the catalog file.
DEFAULT_LOCK_TIMEOUT = 30.0
#: A stored storage option whose value is `env:NAME` is read from the environment
#: variable `NAME` when the entry is opened (the only way a secret reaches the catalog).
ENV_REFERENCE = "env:"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    name VARCHAR PRIMARY KEY,
    uri VARCHAR NOT NULL,
    version BIGINT NOT NULL,
    tags VARCHAR[] NOT NULL,
    description VARCHAR NOT NULL,
    num_samples BIGINT NOT NULL,
    size_bytes BIGINT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    storage_options VARCHAR NOT NULL DEFAULT '{}'
);
ALTER TABLE entries ADD COLUMN IF NOT EXISTS storage_options VARCHAR DEFAULT '{}';
"""
_COLUMNS = (
    "name, uri, version, tags, description, num_samples, size_bytes, created_at, updated_at, "
    "storage_options"
)


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
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
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


def _now() -> datetime:
    # naive UTC: DuckDB's TIMESTAMP; CatalogEntry gets it back with tzinfo=UTC
    return datetime.now(UTC).replace(tzinfo=None)


def _entry(row: tuple[Any, ...]) -> CatalogEntry:
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


def storable_options(
    uri: str, storage_options: Mapping[str, Any] | None, *, name: str | None = None
) -> dict[str, Any]:
    """The storage options of an entry as the catalog stores them, checked.

    A value of the form `env:NAME` is kept as it is (it is read from the environment
    variable `NAME` when the entry is opened). Any other value is kept only if its key is
    not a secret (`ferroload_store.is_secret_option`: access keys, secret keys, tokens,
    account keys, SAS tokens, client secrets, service-account keys, connection strings,
    in any spelling, nested ones such as `client_kwargs` included).

    Args:
        uri: the dataset URI (its scheme says which keys are secrets).
        storage_options: the options as given.
        name: the entry, for messages.

    Returns:
        the options to store (JSON-serialisable).

    Raises:
        CatalogSecretError: (a `ValueError`) for a literal secret, or a malformed
            `env:` reference; the message says how to pass it.

    Examples:
        >>> storable_options("s3://b/ds", {"endpoint": "http://minio:9000", "secret": "env:S3_SECRET"})
        {'endpoint': 'http://minio:9000', 'secret': 'env:S3_SECRET'}
        >>> storable_options("s3://b/ds", {"secret_access_key": "abc"})
        Traceback (most recent call last):
        ...
        ferroload_catalog._errors.CatalogSecretError: storage option 'secret_access_key' is a secret, ...
    """
    return {
        str(k): _storable(uri, str(k), str(k), v, name)
        for k, v in dict(storage_options or {}).items()
    }


def _storable(uri: str, key: str, path: str, value: Any, name: str | None) -> Any:
    if isinstance(value, str) and value.startswith(ENV_REFERENCE):
        var = value[len(ENV_REFERENCE) :]
        if _ENV_NAME.fullmatch(var) is None:
            raise CatalogSecretError(
                f"storage option {path!r}: {value!r} does not name an environment variable "
                "(write env:NAME, NAME of letters, digits and '_')",
                name=name,
                key=path,
            )
        return value
    if isinstance(value, Mapping):
        return {
            str(k): _storable(uri, str(k), f"{path}[{str(k)!r}]", v, name) for k, v in value.items()
        }
    if is_secret_option(uri, key):
        raise CatalogSecretError(
            f"storage option {path!r} is a secret, and the catalog stores no secret: give "
            f"the name of an environment variable holding it instead, as {key}=env:MY_VAR "
            "(read when the entry is opened), or leave it out and let the standard "
            "variables (AWS_*, GOOGLE_*, AZURE_*) provide it",
            name=name,
            key=path,
        )
    if isinstance(value, list | tuple):
        return [_storable(uri, key, path, v, name) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise CatalogSecretError(
        f"storage option {path!r}: the catalog stores text, numbers, booleans, lists and "
        f"dicts, not {type(value).__name__}",
        name=name,
        key=path,
    )


def resolve_options(stored: Mapping[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """Stored storage options with each `env:NAME` value read from the environment.

    Raises:
        CatalogSecretError: if a named environment variable is not set.

    Examples:
        >>> os.environ["DOCS_DEMO_SECRET"] = "s3cr3t"
        >>> resolve_options({"region": "eu-west-3", "secret": "env:DOCS_DEMO_SECRET"})
        {'region': 'eu-west-3', 'secret': 's3cr3t'}
    """
    return {str(k): _resolved(str(k), v, name) for k, v in stored.items()}


def _resolved(path: str, value: Any, name: str | None) -> Any:
    if isinstance(value, str) and value.startswith(ENV_REFERENCE):
        var = value[len(ENV_REFERENCE) :]
        found = os.environ.get(var)
        if found is None:
            where = f"catalog entry {name!r}" if name else "the catalog entry"
            raise CatalogSecretError(
                f"{where} takes storage option {path!r} from the environment variable "
                f"{var}, which is not set; set it (or pass storage_options / -o {path}=…)",
                name=name,
                key=path,
            )
        return found
    if isinstance(value, Mapping):
        return {str(k): _resolved(f"{path}[{str(k)!r}]", v, name) for k, v in value.items()}
    return value


def _tags(tags: Iterable[str]) -> list[str]:
    if isinstance(tags, str):
        tags = (tags,)
    return sorted({validate_name(t, what="tag") for t in tags})


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


class Catalog:
    """A registry of datasets: name to URI, version, tags, description and sizes.

    The catalog is one DuckDB file: `path`, else `$FERROLOAD_CATALOG`, else
    `catalog.duckdb` in the user data directory (`platformdirs`). Every operation opens
    its own connection and closes it at once, so several processes can share the file:
    DuckDB lets one process at a time write it, and an operation that finds it locked
    retries with a short backoff for up to `lock_timeout` seconds.

    Args:
        path: the catalog file (created with its parent directories on first use).
        lock_timeout: seconds to wait for another process to release the file.

    Examples:
        >>> import os, tempfile
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/catalog-example", "demo") as w:
        ...     w.declare("image", "jpg", "tensor", "image")
        ...     w.add("s0000", {"image": b"jpeg bytes"}, {"label": 3})
        >>> catalog = Catalog(os.path.join(tempfile.mkdtemp(), "catalog.duckdb"))
        >>> entry = catalog.add("demo", "memory://docs/catalog-example", tags=["images"])
        >>> entry.name, entry.version, entry.num_samples, entry.tags
        ('demo', 1, 1, ('images',))
        >>> [e.name for e in catalog.list(tag="images")]
        ['demo']
        >>> catalog.resolve("catalog:demo")
        'memory://docs/catalog-example'
        >>> len(catalog.open_dataset("catalog:demo"))
        1
        >>> catalog.get("dmeo")
        Traceback (most recent call last):
        ...
        ferroload_catalog._errors.CatalogEntryNotFoundError: no catalog entry 'dmeo' ...
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        self._path = Path(path).expanduser() if path is not None else default_catalog_path()
        self._lock_timeout = lock_timeout

    @property
    def path(self) -> Path:
        """The catalog's DuckDB file."""
        return self._path

    def __repr__(self) -> str:
        return f"Catalog({str(self._path)!r})"

    # ----------------------------------------------------------------- connection

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self._lock_timeout
        attempt = 0
        while True:
            try:
                con = duckdb.connect(str(self._path))
                break
            except duckdb.IOException as exc:
                if not _is_lock_error(exc):
                    raise CatalogFileError(
                        f"cannot open the catalog {str(self._path)!r}: {exc}"
                    ) from exc
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CatalogLockedError(
                        f"the catalog {str(self._path)!r} stayed locked by another process "
                        f"for {self._lock_timeout:g} s; retry, or raise lock_timeout"
                    ) from exc
                attempt += 1
                time.sleep(min(left, backoff_delay(attempt, base=0.005, cap=0.1)))
            except duckdb.Error as exc:
                raise CatalogFileError(
                    f"cannot open the catalog {str(self._path)!r}: {exc}"
                ) from exc
        try:
            con.execute(_SCHEMA)
            yield con
        finally:
            con.close()

    def _select(self, con: Any, name: str) -> CatalogEntry | None:
        row = con.execute(f"SELECT {_COLUMNS} FROM entries WHERE name = ?", [name]).fetchone()
        return None if row is None else _entry(row)

    def _not_found(self, con: Any, name: str) -> CatalogEntryNotFoundError:
        names = [r[0] for r in con.execute("SELECT name FROM entries ORDER BY name").fetchall()]
        close = tuple(difflib.get_close_matches(name, names, n=3, cutoff=0.6))
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        return CatalogEntryNotFoundError(
            f"no catalog entry {name!r} in {str(self._path)!r}{hint}",
            name=name,
            suggestions=close,
        )

    def _require(self, con: Any, name: str) -> CatalogEntry:
        entry = self._select(con, name)
        if entry is None:
            raise self._not_found(con, name)
        return entry

    # ----------------------------------------------------------------- operations

    def add(
        self,
        name: str,
        uri: str | os.PathLike[str],
        *,
        description: str = "",
        tags: Iterable[str] = (),
        storage_options: Mapping[str, Any] | None = None,
        replace: bool = False,
    ) -> CatalogEntry:
        """Register the dataset at `uri` under `name`, with its storage options.

        The dataset is opened (its manifest only) to check it and to read its latest
        version, sample count and size. The storage options are stored with the entry
        and used whenever it is opened (`catalog:<name>`, `open_dataset`, `refresh`, the
        CLI), so a custom endpoint is given once. Secrets are never stored: a secret
        key's value must be `env:NAME`, the name of an environment variable read at
        open (see `storable_options` for which keys are secrets).

        Args:
            name: the entry's name: lowercase letters, digits, `-`, `_`, `.`.
            uri: the dataset root (a local path, `s3://…`, …; `catalog:<other>` too,
                whose storage options are inherited).
            description: free text.
            tags: tags (the same rule as names).
            storage_options: backend options of the dataset (stored; secrets only as
                `env:NAME`).
            replace: overwrite an existing entry of that name (keeping its `created_at`).

        Returns:
            the new entry.

        Raises:
            InvalidCatalogNameError: if `name` or a tag breaks the naming rule.
            CatalogEntryExistsError: if `name` exists and `replace` is false.
            CatalogSecretError: for a literal secret in `storage_options`, or an
                `env:NAME` whose variable is not set.
            DatasetNotFoundError: if no dataset is at `uri`.
        """
        validate_name(name)
        tag_list = _tags(tags)
        if not replace:
            with self._connect() as con:
                if self._select(con, name) is not None:
                    raise self._exists(name)
        target = os.fspath(uri)
        inherited: dict[str, Any] = {}
        if target.startswith(CATALOG_SCHEME):
            other = self.get(target[len(CATALOG_SCHEME) :])
            target, inherited = other.uri, dict(other.storage_options)
        stored = {**inherited, **storable_options(target, storage_options, name=name)}
        ds = Dataset.open(target, storage_options=resolve_options(stored, name=name))
        manifest = ds.manifest
        now = _now()
        with self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                old = self._select(con, name)
                if old is not None and not replace:
                    raise self._exists(name)
                created = now if old is None else old.created_at.replace(tzinfo=None)
                con.execute("DELETE FROM entries WHERE name = ?", [name])
                con.execute(
                    f"INSERT INTO entries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        name,
                        ds.uri,
                        manifest.version,
                        tag_list,
                        description,
                        manifest.num_samples,
                        manifest.size_bytes,
                        created,
                        now,
                        json.dumps(stored, sort_keys=True),
                    ],
                )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return self._require(con, name)

    def _exists(self, name: str) -> CatalogEntryExistsError:
        return CatalogEntryExistsError(
            f"the catalog {str(self._path)!r} already has an entry {name!r}; "
            "pass replace=True to overwrite it",
            name=name,
        )

    def get(self, name: str) -> CatalogEntry:
        """The entry called `name`, as last stored (see `refresh` for the latest version).

        Raises:
            CatalogEntryNotFoundError: (a `KeyError`) if there is none; its message and
                `suggestions` list the closest names.
        """
        with self._connect() as con:
            return self._require(con, name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        with self._connect() as con:
            return self._select(con, name) is not None

    def list(self, tag: str | None = None) -> list[CatalogEntry]:
        """Every entry, sorted by name; only those tagged `tag` if given."""
        with self._connect() as con:
            if tag is None:
                rows = con.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY name").fetchall()
            else:
                rows = con.execute(
                    f"SELECT {_COLUMNS} FROM entries WHERE list_contains(tags, ?) ORDER BY name",
                    [tag],
                ).fetchall()
        return [_entry(r) for r in rows]

    def tag(self, name: str, *tags: str, remove: bool = False) -> CatalogEntry:
        """Add `tags` to the entry (or remove them with `remove=True`).

        Returns:
            the updated entry.

        Raises:
            CatalogEntryNotFoundError: if there is no entry `name`.
            InvalidCatalogNameError: if a tag breaks the naming rule.
        """
        wanted = _tags(tags)
        with self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                entry = self._require(con, name)
                current = set(entry.tags)
                new = current - set(wanted) if remove else current | set(wanted)
                if new != current:
                    con.execute(
                        "UPDATE entries SET tags = ?, updated_at = ? WHERE name = ?",
                        [sorted(new), _now(), name],
                    )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return self._require(con, name)

    def remove(self, name: str) -> None:
        """Remove the entry `name` (the dataset itself is untouched).

        Raises:
            CatalogEntryNotFoundError: if there is no entry `name`.
        """
        with self._connect() as con:
            if self._select(con, name) is None:
                raise self._not_found(con, name)
            con.execute("DELETE FROM entries WHERE name = ?", [name])

    def refresh(
        self, name: str, *, storage_options: Mapping[str, Any] | None = None
    ) -> CatalogEntry:
        """Read the dataset's latest version and sizes again and store them.

        Args:
            name: the entry.
            storage_options: backend options for opening the dataset, over the entry's
                stored ones (not stored).

        Returns:
            the updated entry.

        Raises:
            CatalogEntryNotFoundError: if there is no entry `name`.
            DatasetNotFoundError: if the dataset is gone.
        """
        entry = self.get(name)
        options = self._options(entry, storage_options)
        manifest = Dataset.open(entry.uri, storage_options=options).manifest
        with self._connect() as con:
            con.execute(
                "UPDATE entries SET version = ?, num_samples = ?, size_bytes = ?, "
                "updated_at = ? WHERE name = ?",
                [manifest.version, manifest.num_samples, manifest.size_bytes, _now(), name],
            )
            return self._require(con, name)

    def resolve(self, uri: str) -> str:
        """Turn `catalog:<name>` into the entry's URI; return anything else unchanged.

        Raises:
            CatalogEntryNotFoundError: if `uri` names an entry that does not exist.
        """
        if not uri.startswith(CATALOG_SCHEME):
            return uri
        return self.get(uri[len(CATALOG_SCHEME) :]).uri

    def locate(
        self, uri: str, *, storage_options: Mapping[str, Any] | None = None
    ) -> tuple[str, dict[str, Any] | None]:
        """The URI and storage options to open `uri` with.

        For `catalog:<name>`: the entry's URI, and its stored options (each `env:NAME`
        read from the environment) with `storage_options` over them. Anything else comes
        back unchanged. `Dataset.open("catalog:<name>")` calls this.

        Raises:
            CatalogEntryNotFoundError: if `uri` names an entry that does not exist.
            CatalogSecretError: if an option's environment variable is not set.

        Examples:
            >>> import os, tempfile
            >>> from ferroload_format import Writer
            >>> with Writer("memory://docs/locate-example", "demo") as w:
            ...     w.add("s0", {}, {"label": 1})
            >>> catalog = Catalog(os.path.join(tempfile.mkdtemp(), "catalog.duckdb"))
            >>> _ = catalog.add("demo", "memory://docs/locate-example", storage_options={"region": "x"})
            >>> catalog.locate("catalog:demo")
            ('memory://docs/locate-example', {'region': 'x'})
        """
        if not uri.startswith(CATALOG_SCHEME):
            return uri, None if storage_options is None else dict(storage_options)
        entry = self.get(uri[len(CATALOG_SCHEME) :])
        return entry.uri, self._options(entry, storage_options)

    def _options(self, entry: CatalogEntry, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The entry's stored options, resolved, with `given` over them (both in
        obstore's keys, so that two spellings of one key cannot both survive)."""
        stored = resolve_options(entry.storage_options, name=entry.name)
        if not given:
            return stored
        return {
            **normalize_storage_options(entry.uri, stored),
            **normalize_storage_options(entry.uri, given),
        }

    def open_dataset(self, name_or_uri: str | os.PathLike[str], **kwargs: Any) -> Dataset:
        """Open a dataset by `catalog:<name>`, by bare entry name, or by URI.

        A bare string that is a valid name of an existing entry opens that entry; any
        other string is passed to `Dataset.open` as a URI. An entry opens with its
        stored storage options (`storage_options` given here go over them).

        Args:
            name_or_uri: `catalog:<name>`, an entry name, or a dataset URI.
            **kwargs: passed to `Dataset.open` (`version`, `storage_options`, …).
        """
        target = os.fspath(name_or_uri)
        entry: CatalogEntry | None = None
        if target.startswith(CATALOG_SCHEME):
            entry = self.get(target[len(CATALOG_SCHEME) :])
        elif _NAME.fullmatch(target) is not None:
            with self._connect() as con:
                entry = self._select(con, target)
        if entry is not None:
            target = entry.uri
            kwargs["storage_options"] = self._options(entry, kwargs.get("storage_options"))
        return Dataset.open(target, **kwargs)
