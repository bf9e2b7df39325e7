"""Bounded reads of import inputs: the one place an importer opens a file of the source.

An import source may come from a stranger: a FIFO named `x.png` would block a reader
forever, a symlink to `/dev/zero` never ends, a huge file (or a tar member that inflates
to gigabytes) exhausts memory, and a symlink may point out of the folder being imported.
Every input file goes through `open_regular` (or `read_regular`), which refuses those with
a `BadInputError` naming the path, before anything is read.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO

from ferroload_convert._errors import BadInputError, ConvertOptionError

#: The largest input file (or tar member) an importer reads by default: 2 GiB.
DEFAULT_MAX_FILE_BYTES = 2 << 30

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def shown_path(path: str) -> str:
    """`path` as text that encodes to UTF-8: bytes that are not UTF-8 (kept by Python as
    surrogate escapes) shown as `\\xff`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_utf8_name(path: str, rel: str) -> str:
    """`rel` (the name of `path` recorded in the dataset) if it is valid UTF-8 text.

    A file name that is not UTF-8 cannot be stored as metadata (Parquet strings are
    UTF-8); the file is a bad input rather than a crash when the import commits.

    Raises:
        BadInputError: naming the path (the repr of its bytes in the message; `path`
            with the odd bytes as `\\xff` escapes).
    """
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInputError(
            f"{os.fsencode(path)!r}: the file name is not valid UTF-8 and cannot be "
            "recorded; rename it, or pass on_error='skip' to leave it out",
            path=shown_path(path),
        ) from None
    return rel


def check_max_bytes(max_file_bytes: int) -> int:
    """`max_file_bytes` if it is a positive int; else `ConvertOptionError`."""
    if (
        not isinstance(max_file_bytes, int)
        or isinstance(max_file_bytes, bool)
        or max_file_bytes <= 0
    ):
        raise ConvertOptionError(
            f"max_file_bytes must be a positive int, got {max_file_bytes!r}",
            column="max_file_bytes",
        )
    return max_file_bytes


def inside(path: str, root: str) -> bool:
    """Whether `path`, its symlinks resolved, lies inside the folder `root` (resolved too)."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _check_stat(path: str, st: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise BadInputError(
            f"{path} is {kind}, not a regular file: importers read regular files only; "
            "remove it, or pass on_error='skip' to leave it out",
            path=path,
        )
    if st.st_size > max_bytes:
        raise BadInputError(
            f"{path} holds {st.st_size:,} bytes, more than max_file_bytes={max_bytes:,}; "
            "raise max_file_bytes if it is genuine, or pass on_error='skip'",
            path=path,
        )


def open_regular(path: str, *, max_bytes: int, root: str | None = None) -> BinaryIO:
    """`path` opened for reading, once it is known to be a regular file of at most
    `max_bytes` (inside `root`, symlinks resolved, when given).

    The file is checked with `os.stat` before it is opened (a FIFO or a device is never
    opened), opened with `O_NONBLOCK` and checked again with `fstat` (it may have been
    swapped in between).

    Raises:
        BadInputError: naming the path, for anything else or a file that cannot be read.
    """
    if root is not None and not inside(path, root):
        raise BadInputError(
            f"{path} is a symlink to {os.path.realpath(path)}, outside the folder being "
            f"imported ({root}); importers do not follow links out of it",
            path=path,
        )
    try:
        _check_stat(path, os.stat(path), max_bytes)
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}", path=path) from exc
    try:
        _check_stat(path, os.fstat(fd), max_bytes)
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str, root: str | None = None) -> None:
    """Refuse `path` unless it is a regular file (inside `root` when given), as
    `open_regular` does, for a reader that opens the file itself (pyarrow).

    Raises:
        BadInputError: naming the path.
    """
    with open_regular(path, max_bytes=sys.maxsize, root=root):
        pass


def read_regular(path: str, *, max_bytes: int, root: str | None = None) -> bytes:
    """The bytes of `path`, checked as `open_regular` checks it; never more than
    `max_bytes` (a file that grows while it is read is refused, not cut short).

    Raises:
        BadInputError: naming the path.
    """
    with open_regular(path, max_bytes=max_bytes, root=root) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            data = f.read(min(size, max_bytes) + 1)
            if len(data) > size:  # it grew (or it is a /proc-like file): read on, bounded
                parts = [data]
                while (got := sum(map(len, parts))) <= max_bytes:
                    part = f.read(min(1 << 20, max_bytes + 1 - got))
                    if not part:
                        break
                    parts.append(part)
                data = b"".join(parts)
        except OSError as exc:
            raise BadInputError(f"cannot read {path}: {exc.strerror or exc}", path=path) from exc
    if len(data) > max_bytes:
        raise BadInputError(
            f"{path} holds more than max_file_bytes={max_bytes:,} bytes; raise "
            "max_file_bytes if it is genuine, or pass on_error='skip'",
            path=path,
        )
    return data
