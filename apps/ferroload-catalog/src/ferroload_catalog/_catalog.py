"""The embedded catalog: one DuckDB file, one connection per operation."""

from __future__ import annotations

import difflib
import errno
import json
import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb

if sys.platform != "win32":
    import fcntl

from ferroload_catalog._entry import (
    CATALOG_SCHEME,
    NAME_PATTERN,
    CatalogEntry,
    checked_tags,
    default_catalog_path,
    entry_from_row,
    utc_now,
    validate_name,
)
from ferroload_catalog._errors import (
    CatalogEntryExistsError,
    CatalogEntryNotFoundError,
    CatalogFileError,
    CatalogLockedError,
)
from ferroload_catalog._options import resolve_options, storable_options
from ferroload_core import backoff_delay
from ferroload_format import Dataset, hide_progress_bar
from ferroload_store import normalize_storage_options

#: Seconds an operation waits for another process to release the catalog file.
DEFAULT_LOCK_TIMEOUT = 30.0

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


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def _wait(attempt: int, deadline: float, path: Path, timeout: float, exc: Exception | None) -> None:
    """Sleep before the next try to take the catalog, or raise `CatalogLockedError`
    once `deadline` has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise CatalogLockedError(
            f"the catalog {str(path)!r} stayed locked by another process for {timeout:g} s; "
            "retry, or raise lock_timeout"
        ) from exc
    time.sleep(min(left, backoff_delay(attempt, base=0.005, cap=0.1)))


_NOT_REGULAR = "it is not a regular file"  # a FIFO (which would block), a device, a folder


def _cannot_open(what: str, path: Path, why: object) -> CatalogFileError:
    """The error for a catalog file (`what`: the catalog, its lock file) that cannot be
    opened, naming it."""
    return CatalogFileError(f"cannot open {what} {str(path)!r}: {why}")


def _check_side_files(path: Path) -> None:
    """Refuse the files DuckDB writes beside catalog `path` unless they are its own:
    `<catalog>.wal` (its write-ahead log) must be absent or a regular file, and
    `<catalog>.tmp` (where it spills) absent or a folder; neither may be a symlink.

    DuckDB opens them by name and follows links: a symlink planted as the WAL made an
    `add` overwrite whatever it pointed at, a FIFO would block. Checked with `lstat`
    while `<catalog>.lock` is held, right before DuckDB opens the catalog (a process
    that ignores the lock can still swap one in between: the same window DuckDB's own
    open has).

    Raises:
        CatalogFileError: naming the file.
    """
    for suffix, want, kind in (
        (".wal", stat.S_ISREG, _NOT_REGULAR),
        (".tmp", stat.S_ISDIR, "it is not a directory"),
    ):
        side = path.with_name(path.name + suffix)
        try:
            mode = os.lstat(side).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _cannot_open("a file of the catalog", side, exc) from exc
        if stat.S_ISLNK(mode):
            raise _cannot_open("a file of the catalog", side, "it is a symbolic link")
        if not want(mode):
            raise _cannot_open("a file of the catalog", side, kind)


@contextmanager
def _session_lock(path: Path, deadline: float, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on `<catalog>.lock` (`flock`) for one operation.

    DuckDB's own lock on the file did not keep concurrent processes apart: 8 processes
    adding 5 entries each now and then failed to read the file ("Could not read enough
    bytes") or, in the suite, all exited 0 with 19 of 20 entries in the file. With this
    lock only one ferroload process opens the file at a time; DuckDB's lock (and its
    retry in `_connect`) still guards against other programs. Without `fcntl` (Windows)
    there is only DuckDB's."""
    if sys.platform == "win32":
        yield
        return
    lock = path.with_name(path.name + ".lock")
    try:
        # read-only is enough to lock; a symlink in its place is not followed (it would
        # make the lock file wherever it points), a FIFO does not block the open
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(lock, flags, 0o644)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
        raise _cannot_open("the catalog's lock file", lock, why) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device
            raise _cannot_open("the catalog's lock file", lock, _NOT_REGULAR)
        attempt = 0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                attempt += 1
                _wait(attempt, deadline, path, timeout, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


class Catalog:
    """A registry of datasets: name to URI, version, tags, description and sizes.

    The catalog is one DuckDB file: `path`, else `$FERROLOAD_CATALOG`, else
    `catalog.duckdb` in the user data directory (`platformdirs`). Every operation opens
    its own connection and closes it at once, so several processes can share the file:
    one operation at a time holds it (a lock on `<path>.lock` beside it, and DuckDB's
    own on the file against other programs), and an operation that finds it locked
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
        with _session_lock(self._path, deadline, self._lock_timeout):
            with suppress(FileNotFoundError):  # (a new catalog is made by DuckDB)
                if not stat.S_ISREG(os.stat(self._path).st_mode):  # DuckDB waits on a FIFO
                    raise _cannot_open("the catalog", self._path, _NOT_REGULAR)
            _check_side_files(self._path)
            attempt = 0
            while True:
                try:
                    con = duckdb.connect(str(self._path))
                    break
                except duckdb.IOException as exc:
                    if not _is_lock_error(exc):
                        raise _cannot_open("the catalog", self._path, exc) from exc
                    attempt += 1
                    _wait(attempt, deadline, self._path, self._lock_timeout, exc)
                except duckdb.Error as exc:
                    raise _cannot_open("the catalog", self._path, exc) from exc
            try:
                hide_progress_bar(con)  # never drawn on stdout
                con.execute(_SCHEMA)
                yield con
            finally:
                con.close()

    def _select(self, con: Any, name: str) -> CatalogEntry | None:
        row = con.execute(f"SELECT {_COLUMNS} FROM entries WHERE name = ?", [name]).fetchone()
        return None if row is None else entry_from_row(row)

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
        tag_list = checked_tags(tags)
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
        now = utc_now()
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
        return [entry_from_row(r) for r in rows]

    def tag(self, name: str, *tags: str, remove: bool = False) -> CatalogEntry:
        """Add `tags` to the entry (or remove them with `remove=True`).

        Returns:
            the updated entry.

        Raises:
            CatalogEntryNotFoundError: if there is no entry `name`.
            InvalidCatalogNameError: if a tag breaks the naming rule.
        """
        wanted = checked_tags(tags)
        with self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                entry = self._require(con, name)
                current = set(entry.tags)
                new = current - set(wanted) if remove else current | set(wanted)
                if new != current:
                    con.execute(
                        "UPDATE entries SET tags = ?, updated_at = ? WHERE name = ?",
                        [sorted(new), utc_now(), name],
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
                [manifest.version, manifest.num_samples, manifest.size_bytes, utc_now(), name],
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
        elif NAME_PATTERN.fullmatch(target) is not None:
            with self._connect() as con:
                entry = self._select(con, target)
        if entry is not None:
            target = entry.uri
            kwargs["storage_options"] = self._options(entry, kwargs.get("storage_options"))
        return Dataset.open(target, **kwargs)
