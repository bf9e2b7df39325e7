"""Reading one WebDataset tar: its members grouped into samples by key, with bounded reads.

Members are grouped the way WebDataset groups them: the key is the member path up to the
first dot of its file name, the rest is the extension (`a/b/x.seg.png` is key `a/b/x`,
extension `seg.png`). A tar's headers are read first (no data), so members of one key need
not be adjacent. A tar in an object store is spooled to a temporary file first; a
compressed tar may not inflate past a limit (a decompression bomb).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import re
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ferroload_convert._errors import BadInputError
from ferroload_convert._files import check_utf8_name, open_regular, shown_path
from ferroload_convert._pipeline import Failed
from ferroload_convert._sniff import check_image, is_image_ext
from ferroload_convert._sources import InputFile
from ferroload_convert._wds_meta import MARKER, MAX_MARKER_BYTES, MarkerInfo, read_marker
from ferroload_store import StoreError

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
class Sample:
    """The members of one key, as `(extension, data)` in tar order."""

    key: str
    members: list[tuple[str, bytes]]


@dataclass(frozen=True)
class Ignored:
    """A member left out (a directory, no extension, a `__…__` meta member), named, and
    why."""

    name: str
    reason: str


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


def read_tar(
    item: InputFile, *, max_bytes: int, ratio: float
) -> Iterator[Sample | Ignored | MarkerInfo | Failed]:
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
            if isinstance(group, Ignored):
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
                yield Sample(key, members)


def _read_marker(tar: tarfile.TarFile, path: str, max_bytes: int) -> MarkerInfo | None:
    """The tar's `__ferroload__` member, if it has one of ours (the last one counts)."""
    info = next((i for i in reversed(tar.getmembers()) if i.name == MARKER and i.isreg()), None)
    if info is None or info.size > MAX_MARKER_BYTES:
        return None
    return read_marker(_read_member(tar, info, path, max_bytes))


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
) -> dict[str, list[tuple[str, tarfile.TarInfo]] | Ignored]:
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
    groups: dict[str, list[tuple[str, tarfile.TarInfo]] | Ignored] = {}
    seen: set[str] = set()
    for info in infos:
        if info.name == MARKER and info.isreg():
            continue  # a ferroload export's description: `_read_marker` reads it
        match = _KEY_EXT.match(info.name)
        reason = _left_out(info, match)
        if reason is not None or match is None:
            groups[f"\0{len(groups)}"] = Ignored(f"{info.name} in {path}", reason or "")
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


def _left_out(info: tarfile.TarInfo, match: re.Match[str] | None) -> str | None:
    """Why a member is not part of a sample (None: it is)."""
    if not info.isreg():
        return "a directory entry" if info.isdir() else "not a regular file"
    if _SKIP_META.match(info.name):
        return "a WebDataset meta member (__…__)"
    if match is None:
        return "no extension: WebDataset cannot tell which field it is"
    return None


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
