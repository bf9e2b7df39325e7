"""WebDataset tars to a dataset, losslessly.

Members are grouped into samples the way WebDataset groups them: the key is the member
path up to the first dot of its file name, the rest is the extension (`a/b/x.seg.png` is
key `a/b/x`, extension `seg.png`). Unlike WebDataset's stream, members of one key need
not be adjacent: a tar's headers are read first (no data), so any member order works.

What the import records so that `export_webdataset` writes the same members back
(names and bytes): see `WDS_COLUMNS`. `.cls`, `.txt` and `.json` members are stored once,
as metadata columns, whenever their bytes come back exactly from the value (see
`import_webdataset`); a ferroload export's `.json` turns back into its columns
(`_wds_meta`).
"""

from __future__ import annotations

import bz2
import contextlib
import functools
import gzip
import io
import json
import logging
import lzma
import os
import re
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ferroload_convert._errors import BadInputError, ConvertOptionError
from ferroload_convert._files import (
    DEFAULT_MAX_FILE_BYTES,
    check_max_bytes,
    check_utf8_name,
    open_regular,
    shown_path,
)
from ferroload_convert._ids import column_name
from ferroload_convert._pipeline import Failed, ordered_streams
from ferroload_convert._report import (
    DEFAULT_WORKERS,
    ImportReport,
    OnError,
    Progress,
    check_common,
)
from ferroload_convert._session import ImportSession
from ferroload_convert._sniff import check_image, is_image_ext, kind_of
from ferroload_convert._sources import InputFile, Source, source_files
from ferroload_convert._wds_meta import MARKER, MAX_MARKER_BYTES, from_json, read_marker
from ferroload_core import FerroloadError
from ferroload_format import DEFAULT_SHARD_SIZE, WriteMode
from ferroload_store import StoreError

logger = logging.getLogger(__name__)

#: Metadata of a sample imported from WebDataset: the original key, the tar it came from
#: (relative to the source folder), and its members in tar order as `{ext, modality}`:
#: the payload of each is in that modality, or in the metadata column of that name
#: (`label`, `text`, `json_text`), or, for modality None, it is a ferroload export's
#: metadata member (the other columns). Their presence marks a dataset as imported from
#: WebDataset; `export_webdataset` then writes `<wds_key>.<ext>` per member.
WDS_COLUMNS = ("wds_key", "wds_shard", "wds_members")
#: Small text members also lifted into queryable metadata: extension -> (column, type).
LIFTED: dict[str, tuple[str, type]] = {
    "cls": ("label", int),
    "txt": ("text", str),
    "json": ("json_text", str),
}
_LIFTED_TYPES = {int: pa.int64(), str: pa.string()}
#: Lifted text larger than this stays a payload only.
MAX_LIFTED_BYTES = 1 << 16
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: A compressed tar may inflate to this many times its size (plus 1 MiB) by default.
DEFAULT_MAX_INFLATE_RATIO = 100.0

# WebDataset's own rules (webdataset.tariterators): key and extension, and the names of
# meta members it skips (`__…__`).
_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ")
_BLOCK = 512
# Bytes read at once when a tar is copied from an object store (fetched as parallel
# parts of `IOOptions.part_size`, 8 MiB by default)
_SPOOL_CHUNK = 32 << 20
# What reading a damaged (or damaged compressed) tar raises
_READ_ERRORS = (OSError, EOFError, tarfile.TarError, lzma.LZMAError, zlib.error)


@dataclass(frozen=True)
class _Sample:
    key: str
    members: list[tuple[str, bytes]]  # (extension, data) in tar order


@dataclass(frozen=True)
class _Ignored:
    name: str


@dataclass(frozen=True)
class _Marker:
    """What a tar's `__ferroload__` member says: its metadata member's extension and the
    types of the columns that member holds."""

    json_ext: str
    columns: dict[str, pa.DataType]


def import_webdataset(
    src: Source,
    dst: str | os.PathLike[str],
    *,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_inflate_ratio: float = DEFAULT_MAX_INFLATE_RATIO,
    mode: WriteMode = "create",
) -> ImportReport:
    """Import WebDataset tars: every member kept, byte for byte.

    Each extension becomes a modality named after it (`jpg`, `seg.png` -> `seg_png`,
    `JPG` -> `jpg_2` when `jpg` is taken), with the extension's last part as the format
    extension; image extensions get kind `tensor` / codec `image`, audio and video
    theirs, text ones kind `text`, others `bytes`. Metadata: `wds_key` (the original
    key), `wds_shard` (the tar, relative to `src`), `wds_members` (the extensions in
    tar order, each with the modality or column holding it: what lets
    `export_webdataset` write the same members back). The sample id is the key,
    sanitized (`a/b/x` -> `a~b~x`); a key seen in two tars gets `#2`.

    Stored once, as metadata columns rather than modalities: a `.cls` holding an int
    as `str(int)` writes it (what `webdataset.TarWriter` writes) becomes `label`; a
    `.txt` in UTF-8 becomes `text`; a `.json` in UTF-8 becomes `json_text` (the exact
    text, which DuckDB's JSON functions read), all up to 64 KiB; export writes their
    bytes back from the columns. Any other such member stays a payload (a `.cls` that
    reads as an int but is spelled otherwise, `" 4\\n"`, also gives `label`). In a tar
    written by `export_webdataset` (it has a `__ferroload__` member naming the columns
    and their types), each `.json` becomes those metadata columns again, with the same
    types.

    Directory entries, members without an extension and WebDataset's `__…__` meta
    members are ignored and counted. Image members are checked without decoding; a
    damaged or truncated tar is a bad input as a whole, named by its path.

    Reads are bounded: a tar must be a regular file (a FIFO or device is never opened),
    a member larger than `max_file_bytes` is a bad input (its sample is left out, the
    rest of the tar is read), and a compressed tar (gzip, bzip2, xz) that inflates to
    more than `max_inflate_ratio` times its size (plus 1 MiB) is a bad input as a whole:
    reading stops at the limit.

    Sources are WebDataset's: a brace pattern (`train-{0000..0003}.tar`, `{a,b}.tar`,
    as `braceexpand` expands it, zero-padding kept), several joined by `::`, or a list;
    each may be local or an object-store URL (`s3://…`, `gs://…`, `az://…`,
    `memory://…`: an object, a prefix searched, or a glob over one prefix). A tar in an
    object store is streamed in 32 MiB range reads (parallel parts) into a temporary
    file, read there with the same checks and limits as a local one, and removed:
    memory stays bounded.

    Args:
        src: a tar (`.tar`, `.tar.gz`, `.tgz`), a folder (or URL prefix) searched for
            them, a glob, a brace pattern, or a list of these; local or URLs.
        dst: the dataset URI.
        name: the dataset name (default: the last part of `dst`).
        workers: tars read at once (each by one thread).
        on_error: a bad tar or member raises `BadInputError` (`"raise"`, nothing is
            committed), or is left out and listed in the report (`"skip"`, `"warn"`).
        shard_size: target bytes per ferroload shard.
        progress: `True` draws a bar of samples on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, None)` in samples (the total is not known up front).
        storage_options: backend options of `dst` and of the sources' object stores.
        max_file_bytes: the largest member read (default 2 GiB).
        mode: what to do with a dataset already at `dst`: `"create"` (the default)
            refuses it with `DatasetExistsError`; `"append"` adds to it (an id it already
            has gets a `#2` suffix); `"overwrite"` replaces its content in a new version.
        max_inflate_ratio: how many times its size a compressed tar may inflate to
            (default 100).

    Returns:
        What was imported; `columns` maps each extension to its modality (or to the
        column it became: `cls` -> `label`, `txt` -> `text`, `json` -> `json_text`).

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `dst`.
        InputNotFoundError: if `src` (or a name a pattern expands to) matches no tar.
        BadInputError: for a damaged tar, a duplicate member, a damaged image member, a
            tar that is not a regular file, a member over `max_file_bytes` or a tar that
            inflates beyond `max_inflate_ratio` (with `on_error="raise"`).
        ConvertOptionError: for a bad `on_error`, `workers`, `max_file_bytes` or
            `max_inflate_ratio`, or a brace pattern standing for over a million names.

    Examples:
        >>> import io, tarfile, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "shard-0.tar")
        >>> with tarfile.open(path, "w") as tar:
        ...     for name, data in [("a/k1.txt", b"hello"), ("a/k1.cls", b"3")]:
        ...         info = tarfile.TarInfo(name); info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> report = import_webdataset(path, "memory://docs/wds-import")
        >>> report.num_samples, dict(report.columns)
        (1, {'txt': 'text', 'cls': 'label'})
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/wds-import").get(0, ["sample_id", "label", "text"])
        {'sample_id': 'a~k1', 'label': 3, 'text': 'hello'}
    """
    check_common(on_error, workers)
    check_max_bytes(max_file_bytes)
    if not isinstance(max_inflate_ratio, int | float) or not max_inflate_ratio >= 1:
        raise ConvertOptionError(
            f"max_inflate_ratio must be a number >= 1, got {max_inflate_ratio!r}",
            column="max_inflate_ratio",
        )
    read = functools.partial(_read_tar, max_bytes=max_file_bytes, ratio=max_inflate_ratio)
    tars = source_files(
        src, suffixes=TAR_SUFFIXES, what="WebDataset tars", storage_options=storage_options
    )
    with ImportSession(
        dst,
        name=name,
        shard_size=shard_size,
        storage_options=storage_options,
        on_error=on_error,
        progress=progress,
        mode=mode,
        desc="import wds",
        unit="sample",
    ) as session:
        names = _Modalities(session)
        markers: dict[str, _Marker] = {}
        declared: dict[str, pa.DataType] = {}  # column -> type, from markers
        for tar, item in ordered_streams(tars, read, workers=workers, buffer=32):
            if isinstance(item, _Marker):
                if _accept_marker(item, tar.path, session, declared, names):
                    markers[tar.path] = item
                continue
            if isinstance(item, _Ignored):
                session.ignore(item.name)
                continue
            if isinstance(item, Failed):
                if not isinstance(item.error, BadInputError):
                    raise item.error
                session.bad(item.error)
            else:
                data: dict[str, bytes] = {}
                members: list[dict[str, str | None]] = []
                meta: dict[str, Any] = {"wds_key": item.key, "wds_shard": tar.name}
                for ext, payload in item.members:
                    marker = markers.get(tar.path)
                    kept, lifted = _lift(ext, payload, meta, marker, declared)
                    if kept:
                        members.append({"ext": ext, "modality": lifted})
                        if lifted is not None:
                            names.lifted.setdefault(ext, lifted)
                        continue
                    modality = names.of(ext)
                    data[modality] = payload
                    members.append({"ext": ext, "modality": modality})
                meta["wds_members"] = members
                session.add(item.key, data, meta)
            session.advance()
        return session.finish({**names.lifted, **names.assigned})


def _accept_marker(
    marker: _Marker,
    path: str,
    session: ImportSession,
    declared: dict[str, pa.DataType],
    names: _Modalities,
) -> bool:
    """Declare the columns a tar's `__ferroload__` member names; False (the tar is read
    as any other: its `.json` stays `json_text`) when they cannot be columns here: a
    name of ours (`wds_*`, `sample_id`, a modality), or a type that conflicts with the
    dataset's or another tar's."""
    for column, dtype in marker.columns.items():
        if (
            column in WDS_COLUMNS
            or column == "sample_id"
            or column in names.assigned.values()
            or column in session.modalities
            or declared.get(column, dtype) != dtype
        ):
            logger.warning(
                "%s: its __ferroload__ member names column %r (%s), which cannot be one "
                "here; its .json members are kept as json_text",
                path,
                column,
                dtype,
            )
            return False
    try:
        for column, dtype in marker.columns.items():
            if column not in declared:
                session.declare_column(column, dtype)
                declared[column] = dtype
    except FerroloadError as exc:
        logger.warning("%s: its __ferroload__ member is not usable here (%s)", path, exc)
        return False
    names.reserve(marker.columns)
    return True


class _Modalities:
    """Extension -> modality, assigned at first sight (input order: deterministic)."""

    def __init__(self, session: ImportSession) -> None:
        self._session = session
        self.assigned: dict[str, str] = {}
        self.lifted: dict[str, str] = {}  # extension -> the column it became
        self._reserved = {*WDS_COLUMNS, *(col for col, _ in LIFTED.values())}

    def reserve(self, columns: Iterable[str]) -> None:
        """Metadata columns no modality may be named after."""
        self._reserved |= set(columns)

    def of(self, ext: str) -> str:
        modality = self.assigned.get(ext)
        if modality is not None:
            return modality
        taken = self._reserved | set(self.assigned.values())
        modality = column_name(ext, taken, prefix="x")
        fmt_ext = re.sub(r"[^A-Za-z0-9_]", "_", ext.rsplit(".", 1)[-1].lower())[:16] or "bin"
        # an existing dataset (append) already has the modality: reuse it as declared
        old = next((m for m in self._session.existing_modalities if m.name == modality), None)
        if old is not None:
            fmt_ext, kind, hint = old.ext, old.kind, old.codec_hint
        else:
            kind, hint = kind_of(ext)
        self._session.declare(modality, fmt_ext, kind, hint)
        self.assigned[ext] = modality
        return modality


def _lift(
    ext: str,
    payload: bytes,
    meta: dict[str, Any],
    marker: _Marker | None,
    declared: Mapping[str, pa.DataType],
) -> tuple[bool, str | None]:
    """Lift a small `.cls` / `.txt` / `.json` member into `meta`: (whether it is kept
    there only, what `wds_members` records as its modality: the column, or None for the
    metadata member of a ferroload export, whose columns the marker names).

    A member is kept as metadata only when its bytes come back exactly from the value
    (`.cls` the decimal of an int64 as `str(int)` writes it; UTF-8 text); a `.cls` that
    reads as an int but is spelled otherwise (`" 4\\n"`) gives `label` and keeps its
    payload as well; anything else stays a payload only.
    """
    if marker is not None and ext == marker.json_ext and _expand(payload, meta, marker):
        return True, None
    lifted = LIFTED.get(ext.lower())
    if lifted is None or len(payload) > MAX_LIFTED_BYTES or lifted[0] in meta:
        return False, None
    if declared.get(lifted[0], _LIFTED_TYPES[lifted[1]]) != _LIFTED_TYPES[lifted[1]]:
        return False, None  # a ferroload export made the column another type
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return False, None
    if lifted[1] is not int:
        meta[lifted[0]] = text
        return True, lifted[0]
    try:
        label = int(text.strip())
    except ValueError:  # a class that is not an integer: the payload only
        return False, None
    if not -(2**63) <= label < 2**63:
        return False, None
    meta[lifted[0]] = label
    return str(label) == text, lifted[0]


def _expand(payload: bytes, meta: dict[str, Any], marker: _Marker) -> bool:
    """Put the columns of a ferroload export's metadata member into `meta`; False (and
    `meta` unchanged) when it is not a JSON object of the marker's columns."""
    try:
        doc = json.loads(payload)
        if not isinstance(doc, dict) or not set(doc) <= set(marker.columns) - set(meta):
            return False
        values = {k: from_json(v, marker.columns[k]) for k, v in doc.items()}
        for k, v in values.items():  # each value fits its declared type
            pa.array([v], type=marker.columns[k])
    except (ValueError, TypeError, AttributeError, OverflowError, pa.ArrowException):
        return False
    meta.update(values)
    return True


class _Inflated:
    """A decompressed stream that refuses to go past `limit` bytes (a decompression
    bomb): tarfile reads and seeks through it, and nothing beyond the limit is inflated."""

    def __init__(self, stream: io.BufferedIOBase, limit: int, path: str, ratio: float) -> None:
        self.stream, self.limit, self.path, self.ratio = stream, limit, path, ratio

    def _refuse(self, end: int) -> BadInputError:
        return BadInputError(
            f"{self.path} inflates to more than {self.limit:,} bytes (needs {end:,}): over "
            f"max_inflate_ratio={self.ratio:g} times its size, a decompression bomb? Raise "
            "max_inflate_ratio if it is genuine, or pass on_error='skip'",
            path=self.path,
        )

    def tell(self) -> int:
        return self.stream.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        end = pos if whence == 0 else self.stream.tell() + pos if whence == 1 else sys.maxsize
        if end > self.limit:
            raise self._refuse(end)
        return self.stream.seek(pos, whence)

    def read(self, n: int | None = -1) -> bytes:
        at = self.stream.tell()
        if n is None or n < 0 or at + n > self.limit:
            n = self.limit + 1 - at
        data = self.stream.read(n)
        if at + len(data) > self.limit:
            raise self._refuse(at + len(data))
        return data


def _spool(item: InputFile, stack: contextlib.ExitStack) -> str:
    """A local copy of a tar in an object store: streamed in `_SPOOL_CHUNK` ranges into a
    temporary file (removed with `stack`), so memory stays bounded however large it is."""
    assert item.store is not None
    tmp = stack.enter_context(
        tempfile.NamedTemporaryFile(prefix="ferroload-wds-", suffix=".tar")  # noqa: SIM115
    )
    try:
        for start in range(0, item.size, _SPOOL_CHUNK):
            length = min(_SPOOL_CHUNK, item.size - start)
            (part,) = item.store.get_ranges(item.key, [start], [length], size=item.size)
            if len(part) != length:  # the object changed since it was listed
                raise BadInputError(
                    f"{item.path} changed while it was read (it ends before {start + length:,} "
                    f"bytes, {item.size:,} when listed)",
                    path=item.path,
                )
            tmp.write(part)
        tmp.flush()
    except StoreError as exc:
        raise BadInputError(f"cannot read {item.path}: {exc}", path=item.path) from exc
    return tmp.name


def _open_tar(
    path: str, local: str, root: str | None, ratio: float, stack: contextlib.ExitStack
) -> tuple[Any, bool]:
    """(the tar `path`, read from the file `local`, whether it is compressed), opened
    bounded; closed with `stack`."""
    f = stack.enter_context(open_regular(local, max_bytes=sys.maxsize, root=root))
    head = f.read(6)
    f.seek(0)
    if not head.startswith(_COMPRESSED):
        return stack.enter_context(tarfile.open(fileobj=f, mode="r:")), False
    stream: io.BufferedIOBase
    if head.startswith(b"\x1f\x8b"):
        stream = stack.enter_context(gzip.GzipFile(fileobj=f, mode="rb"))
    elif head.startswith(b"BZh"):
        stream = stack.enter_context(bz2.BZ2File(f))
    else:
        stream = stack.enter_context(lzma.LZMAFile(f))  # noqa: SIM115 (it is one)
    limit = int(ratio * os.fstat(f.fileno()).st_size) + (1 << 20)
    inflated: Any = _Inflated(stream, limit, path, ratio)
    return stack.enter_context(tarfile.open(fileobj=inflated, mode="r:")), True


def _read_tar(
    item: InputFile, *, max_bytes: int, ratio: float
) -> Iterator[_Sample | _Ignored | _Marker | Failed]:
    """The samples of one tar, grouped by key in first-seen order (runs on the pool)."""
    path = item.path
    check_utf8_name(path, item.name)  # the tar's own name is recorded as wds_shard
    with contextlib.ExitStack() as stack:
        local = path if item.store is None else _spool(item, stack)
        try:
            tar, compressed = _open_tar(path, local, item.root, ratio, stack)
        except _READ_ERRORS as exc:
            raise BadInputError(f"cannot open {path} as a tar: {exc}", path=path) from exc
        groups = _scan(tar, path, local, compressed)
        marker = _read_marker(tar, path, max_bytes)
        if marker is not None:
            yield marker
        for key, group in groups.items():
            if isinstance(group, _Ignored):
                yield group
                continue
            try:
                for _, info in group:
                    _check_member_name(info.name, path)
                members = [(ext, _read_member(tar, info, path, max_bytes)) for ext, info in group]
            except BadInputError as exc:
                if exc.member is None:  # the tar as a whole (it inflates too far)
                    raise
                yield Failed(exc)
            else:
                yield _Sample(key, members)


def _read_marker(tar: tarfile.TarFile, path: str, max_bytes: int) -> _Marker | None:
    """The tar's `__ferroload__` member, if it has one of ours (the last one counts)."""
    info = next((i for i in reversed(tar.getmembers()) if i.name == MARKER and i.isreg()), None)
    if info is None or info.size > MAX_MARKER_BYTES:
        return None
    parsed = read_marker(_read_member(tar, info, path, max_bytes))
    return None if parsed is None else _Marker(parsed[0], parsed[2])


def _check_member_name(name: str, path: str) -> None:
    """Refuse a member whose name is not UTF-8 (tarfile keeps such bytes as surrogate
    escapes; the key is recorded as metadata, which must be UTF-8)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInputError(
            f"member {os.fsencode(name)!r} of {path} has a name that is not valid UTF-8 "
            "and cannot be recorded; rename it, or pass on_error='skip' to leave its "
            "sample out",
            path=path,
            member=shown_path(name),
        ) from None


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str, max_bytes: int) -> bytes:
    if info.size > max_bytes:
        raise BadInputError(
            f"member {info.name} of {path} holds {info.size:,} bytes, more than "
            f"max_file_bytes={max_bytes:,}; raise max_file_bytes if it is genuine, or pass "
            "on_error='skip' to leave its sample out",
            path=path,
            member=info.name,
        )
    try:
        f = tar.extractfile(info)
        assert f is not None  # regular members only
        data = f.read()
    except _READ_ERRORS as exc:
        raise BadInputError(
            f"{path} is damaged at member {info.name}: {exc}", path=path, member=info.name
        ) from exc
    if is_image_ext(info.name):
        problem = check_image(data)
        if problem is not None:
            raise BadInputError(
                f"member {info.name} of {path} is not a usable image: {problem}; pass "
                "on_error='skip' to leave its sample out",
                path=path,
                member=info.name,
            )
    return data


def _scan(
    tar: tarfile.TarFile, path: str, local: str, compressed: bool
) -> dict[str, list[tuple[str, tarfile.TarInfo]] | _Ignored]:
    """(extension, member) grouped by key, in first-seen order, from the headers only.

    Raises:
        BadInputError: for a damaged or truncated tar, or a member name seen twice.
    """
    try:
        infos = tar.getmembers()
    except _READ_ERRORS as exc:
        raise BadInputError(f"{path} is not a readable tar: {exc}", path=path) from exc
    if not compressed:
        _check_complete(tar, infos, path, local)
    groups: dict[str, list[tuple[str, tarfile.TarInfo]] | _Ignored] = {}
    seen: set[str] = set()
    for info in infos:
        if info.name == MARKER and info.isreg():
            continue  # a ferroload export's description: `_read_marker` reads it
        match = _KEY_EXT.match(info.name)
        if not info.isreg() or _SKIP_META.match(info.name) or match is None:
            groups[f"\0{len(groups)}"] = _Ignored(f"{info.name} in {path}")
            continue
        if info.name in seen:
            raise BadInputError(
                f"{path} holds member {info.name} twice; WebDataset cannot tell them apart "
                "either: rewrite the tar without the duplicate",
                path=path,
                member=info.name,
            )
        seen.add(info.name)
        group = groups.setdefault(match[1], [])
        assert isinstance(group, list)
        group.append((match[2], info))
    return groups


def _check_complete(
    tar: tarfile.TarFile, infos: list[tarfile.TarInfo], path: str, local: str
) -> None:
    """Every member's data is in the file and the archive ends with its zero block."""
    size = os.path.getsize(local)
    for info in infos:
        if info.isreg() and info.offset_data + info.size > size:
            raise BadInputError(
                f"{path} is truncated: member {info.name} needs bytes up to "
                f"{info.offset_data + info.size}, the file has {size}",
                path=path,
                member=info.name,
            )
    fileobj = tar.fileobj
    assert fileobj is not None
    fileobj.seek(tar.offset)
    tail = fileobj.read(_BLOCK)
    if len(tail) < _BLOCK or tail.count(0) != _BLOCK:
        raise BadInputError(
            f"{path} is damaged or truncated after {tar.offset} bytes (no end-of-archive "
            "block where the next header should be)",
            path=path,
        )
