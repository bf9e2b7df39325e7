"""ferroload-rs 0.1.1's dataset catalog (`$FERROLOAD_HOME/catalog.json`): read it, and
import its entries once into the 0.2 catalog the caller passes in.

0.1.1's `ferroload` command kept a JSON list of datasets (`ferroload add`, `ferroload
list`, and the importers registered what they wrote). 0.2's catalog is a DuckDB file
(`ferroload_catalog.Catalog`, an app above this facade: it is passed in, never imported).
The first time the `ferroload` command uses its catalog and finds a 0.1.1 catalog it has
not imported yet, `import_rs011_catalog` adds the 0.1.1 entries to it and returns what
to say, once: a marker file beside the 0.2 catalog records what was imported. The 0.1.1
file is only read, never changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from ferroload_core import FerroloadError

#: The environment variable naming 0.1.1's folder (`~/.ferroload` when unset).
RS011_HOME_ENV = "FERROLOAD_HOME"
#: The tag every imported entry gets.
IMPORTED_TAG = "ferroload-rs-0.1.1"
#: The largest 0.1.1 catalog file read (0.1.1 wrote a few hundred bytes per entry).
MAX_CATALOG_BYTES = 64 << 20
#: What the marker beside the 0.2 catalog is called: `<catalog file><suffix>`.
MARKER_SUFFIX = ".rs011-imported.json"

_NOT_NAME = re.compile(r"[^a-z0-9._-]+")
_NAME_MAX = 128


class Rs011CatalogError(FerroloadError, ValueError):
    """ferroload-rs 0.1.1's catalog file cannot be read (not JSON, not 0.1.1's shape,
    too large)."""


class CatalogEntryLike(Protocol):
    """What `import_rs011_catalog` reads of an entry of the 0.2 catalog."""

    @property
    def name(self) -> str:
        """The entry's name."""

    @property
    def uri(self) -> str:
        """The dataset's URI, as the catalog stores it."""


class CatalogLike(Protocol):
    """What `import_rs011_catalog` needs of the 0.2 catalog (`ferroload_catalog.Catalog`)."""

    @property
    def path(self) -> Path:
        """The catalog's file."""

    def list(self, tag: str | None = None) -> Sequence[CatalogEntryLike]:
        """Every entry."""

    def add(
        self, name: str, uri: str, *, description: str = "", tags: Iterable[str] = ()
    ) -> CatalogEntryLike:
        """Register the dataset at `uri` under `name` (it is opened to check it)."""


def rs011_catalog_path() -> Path:
    """Where ferroload-rs 0.1.1 kept its catalog: `$FERROLOAD_HOME/catalog.json`, else
    `~/.ferroload/catalog.json` (the path 0.1.1's `ferroload.cli.CATALOG` held)."""
    home = os.environ.get(RS011_HOME_ENV)
    base = Path(home) if home else Path.home() / ".ferroload"
    return base / "catalog.json"


@dataclass(frozen=True)
class Rs011CatalogEntry:
    """One entry of ferroload-rs 0.1.1's catalog, as 0.1.1 wrote it.

    Attributes:
        uri: the dataset as 0.1.1 was given it: a path (absolute when an importer
            registered it, as typed for `ferroload add`) or a URL.
        name: its name (the manifest's name, `--name`, or the last part of the URI).
        location: `"local"` or `"remote"` (0.1.1: a URI with `://` other than `file://`).
        last_seen: when 0.1.1 last registered it (UTC, ISO 8601), or "".
    """

    uri: str
    name: str
    location: str
    last_seen: str = ""

    @property
    def is_remote(self) -> bool:
        """Whether 0.1.1 took the URI for an object store (its own rule)."""
        return "://" in self.uri and not self.uri.startswith("file://")

    @property
    def local_path(self) -> str | None:
        """The local path of the dataset (`file://` URLs as paths), None for a remote
        one."""
        if self.is_remote:
            return None
        if self.uri.startswith("file://"):
            return unquote(urlsplit(self.uri).path)
        return self.uri


def read_rs011_catalog(data: bytes, *, source: str = "catalog.json") -> list[Rs011CatalogEntry]:
    """The entries of a ferroload-rs 0.1.1 catalog file's content (`{"datasets": [...]}`).

    An entry without a `uri` string is left out; one without a name gets the last part
    of its URI, as 0.1.1 named it.

    Args:
        data: the file's bytes.
        source: the file, for error messages.

    Raises:
        Rs011CatalogError: if it is not JSON or not shaped as 0.1.1 wrote it.
    """
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Rs011CatalogError(f"{source} is not JSON: {exc}") from exc
    datasets = doc.get("datasets") if isinstance(doc, dict) else None
    if not isinstance(datasets, list):
        raise Rs011CatalogError(
            f'{source} is not a ferroload-rs 0.1.1 catalog ({{"datasets": [...]}})'
        )
    out: list[Rs011CatalogEntry] = []
    for item in datasets:
        if not isinstance(item, dict) or not isinstance(item.get("uri"), str) or not item["uri"]:
            continue
        uri = item["uri"]
        name = item.get("name")
        if not isinstance(name, str) or not name:
            name = os.path.basename(uri.rstrip("/"))
        location = item.get("location")
        last_seen = item.get("last_seen")
        entry = Rs011CatalogEntry(
            uri=uri,
            name=name,
            location=location if isinstance(location, str) else "",
            last_seen=last_seen if isinstance(last_seen, str) else "",
        )
        out.append(entry)
    return out


def catalog_name(text: str, taken: Iterable[str] = ()) -> str:
    """A valid 0.2 catalog name for the 0.1.1 name `text` (0.1.1 took any string): ASCII,
    lowercase, runs of other characters as `-`, at most 128 characters; `-2`, `-3`, ...
    after it while the name is in `taken`.

    Examples:
        >>> catalog_name("My Data (v2)")
        'my-data-v2'
        >>> catalog_name("pets", taken={"pets", "pets-2"})
        'pets-3'
        >>> catalog_name("...")
        'dataset'
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    base = _NOT_NAME.sub("-", ascii_text.lower()).strip("-._")[:_NAME_MAX] or "dataset"
    used = set(taken)
    name, n = base, 1
    while name in used:
        n += 1
        suffix = f"-{n}"
        name = base[: _NAME_MAX - len(suffix)] + suffix
    return name


def _shown(text: str) -> str:
    """`text` for a message: control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def dataset_key(uri: str) -> str:
    """A key under which two spellings of one dataset's URI agree (absolute local paths,
    `file://` URLs as paths, no trailing `/`)."""
    if uri.startswith("file://"):
        return os.path.normpath(unquote(urlsplit(uri).path))
    if "://" in uri:
        return uri.rstrip("/")
    return os.path.normpath(os.path.abspath(os.path.expanduser(uri)))


@dataclass
class Rs011CatalogImport:
    """What one import of ferroload-rs 0.1.1's catalog did.

    Attributes:
        source: the 0.1.1 catalog file (left as it was).
        catalog: the 0.2 catalog file the entries went into.
        imported: `(name, 0.1.1 name, uri)` of each entry added.
        skipped: `(uri, why)` of each entry not added, with what to do.
        error: why the whole file could not be read ("" when it could).
    """

    source: Path
    catalog: Path
    imported: list[tuple[str, str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    error: str = ""

    def message(self) -> str:
        """The one message the `ferroload` command prints about it (several lines)."""
        head = (
            f"ferroload-rs 0.1.1's catalog {_shown(str(self.source))} (left as it is) "
            f"was read once into the catalog {_shown(str(self.catalog))}"
        )
        if self.error:
            return f"{head}: nothing imported: {_shown(self.error)}"
        lines = [
            f"{head}: {len(self.imported)} entr{'y' if len(self.imported) == 1 else 'ies'} imported (tag {IMPORTED_TAG})"
        ]
        for name, old, uri in self.imported:
            was = "" if name == old else f" (0.1.1's name {_shown(old)!r})"
            lines.append(f"  catalog:{name}{was} -> {_shown(uri)}")
        if self.skipped:
            lines.append(f"  not imported ({len(self.skipped)}; it will not be tried again):")
            lines += [f"  {_shown(uri)}: {_shown(why)}" for uri, why in self.skipped]
        return "\n".join(lines)


def marker_path(catalog_file: Path) -> Path:
    """The file beside the 0.2 catalog that records which 0.1.1 catalogs it imported."""
    return catalog_file.with_name(catalog_file.name + MARKER_SUFFIX)


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_CATALOG_BYTES))
    except (OSError, ValueError):
        return {"sources": {}}
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        return {"sources": {}}
    return data


def _write_marker(path: Path, data: dict[str, Any]) -> None:
    """Write the marker atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def _read_source(path: Path) -> bytes | None:
    """The 0.1.1 catalog's bytes, None when there is no such file.

    Raises:
        Rs011CatalogError: if it is not a regular file (a FIFO is opened without
            blocking, then refused) or holds more than `MAX_CATALOG_BYTES`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CATALOG_BYTES:
            raise Rs011CatalogError(
                f"{path} is not a regular file of at most {MAX_CATALOG_BYTES:,} bytes"
            )
        return f.read(MAX_CATALOG_BYTES + 1)


def import_rs011_catalog(
    catalog: CatalogLike, *, source: str | os.PathLike[str] | None = None
) -> Rs011CatalogImport | None:
    """Import ferroload-rs 0.1.1's catalog into `catalog`, once.

    Each 0.1.1 entry whose dataset opens is added under a valid 0.2 name (see
    `catalog_name`; `-2` after a name already taken), tagged `ferroload-rs-0.1.1`, with
    a description saying where it came from. An entry whose dataset the catalog already
    has (the same URI) is left as it is. These are not added, and said why with what to
    type instead: remote entries (opening them may need storage options 0.1.1 never
    stored), relative paths (0.1.1 stored them as typed, relative to a folder it did
    not record) and datasets that do not open.

    A marker beside the 0.2 catalog (`marker_path`) records the 0.1.1 file's content
    hash and the URIs it handled: the same file is never read twice into the same
    catalog, and a 0.1.1 file that changed later (a ferroload-rs 0.1.1 in another
    environment added entries) adds only its new URIs. The 0.1.1 file is never written.

    Args:
        catalog: the 0.2 catalog (`ferroload_catalog.Catalog()`).
        source: the 0.1.1 catalog file (default: `rs011_catalog_path()`).

    Returns:
        what was done, or None when there was nothing to do (no 0.1.1 catalog, already
        imported, or no new entry).
    """
    path = Path(os.path.abspath(source if source is not None else rs011_catalog_path()))
    marker = marker_path(Path(catalog.path))
    try:
        data = _read_source(path)
    except (Rs011CatalogError, OSError) as exc:
        data, error = b"", str(exc)
    else:
        error = ""
    if data is None:
        return None
    digest = hashlib.sha256(data).hexdigest()
    state = _read_marker(marker)
    record = state["sources"].get(str(path))
    if isinstance(record, dict) and record.get("sha256") == digest:
        return None
    handled: set[str] = set()
    if isinstance(record, dict) and isinstance(record.get("uris"), list):
        handled = {u for u in record["uris"] if isinstance(u, str)}
    report = Rs011CatalogImport(source=path, catalog=Path(catalog.path))
    entries: list[Rs011CatalogEntry] = []
    if error:
        report.error = error
    else:
        try:
            entries = read_rs011_catalog(data, source=str(path))
        except Rs011CatalogError as exc:
            report.error = str(exc)
    if entries:
        _import_entries(catalog, entries, handled, report)
    state["sources"][str(path)] = {"sha256": digest, "uris": sorted(handled)}
    _write_marker(marker, state)
    if report.error or report.imported or report.skipped:
        return report
    return None


def _import_entries(
    catalog: CatalogLike,
    entries: list[Rs011CatalogEntry],
    handled: set[str],
    report: Rs011CatalogImport,
) -> None:
    existing = catalog.list()
    names = {e.name for e in existing}
    have = {dataset_key(e.uri) for e in existing}
    for entry in entries:
        if entry.uri in handled:
            continue
        handled.add(entry.uri)
        path = entry.local_path
        if path is None:
            report.skipped.append(
                (
                    entry.uri,
                    "a remote dataset (0.1.1 stored no storage options for it): "
                    f"ferroload catalog add {catalog_name(entry.name, names)} {entry.uri} "
                    "[-o KEY=VALUE ...]",
                )
            )
            continue
        if not os.path.isabs(os.path.expanduser(path)):
            report.skipped.append(
                (
                    entry.uri,
                    "a relative path, as 0.1.1's `ferroload add` stored it (relative to a "
                    "folder it did not record): ferroload catalog add "
                    f"{catalog_name(entry.name, names)} /absolute/path/of/it",
                )
            )
            continue
        if dataset_key(path) in have:
            continue
        name = catalog_name(entry.name, names)
        seen = f", last registered {entry.last_seen}" if entry.last_seen else ""
        description = (
            f"imported from ferroload-rs 0.1.1's catalog {report.source}, "
            f"where it was named {entry.name!r}{seen}"
        )
        try:
            added = catalog.add(name, path, description=description, tags=[IMPORTED_TAG])
        except (FerroloadError, OSError) as exc:
            why = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            report.skipped.append(
                (entry.uri, f"{why} (once it opens: ferroload catalog add {name} {path})")
            )
            continue
        names.add(added.name)
        have.add(dataset_key(added.uri))
        report.imported.append((added.name, entry.name, path))
