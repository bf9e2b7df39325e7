"""Opening a checked local path without a window for a symlink swap, and reading only
regular files.

`LocalRoot.file` resolves a key and checks that it lies inside the root; opening that
resolved path by name afterwards would follow a folder that was swapped for a symlink in
between. Here the path is opened one component at a time from the root's descriptor with
`O_NOFOLLOW`, so a swap fails the open instead of leading outside the root.

A file to read (`open_file_below`) must be a regular file: a FIFO would block the open
(and every read) until some writer came, a device such as `/dev/zero` never ends, and
`tar x` recreates both from an archive. It is checked with `lstat` through the folder's
descriptor before it is opened (a device is never opened), opened with `O_NONBLOCK`
(a FIFO swapped in meanwhile cannot block), and checked again with `fstat`.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress

#: Whether this platform can open relative to a folder descriptor without following links.
RACE_FREE = (
    os.open in os.supports_dir_fd
    and os.unlink in os.supports_dir_fd
    and hasattr(os, "O_NOFOLLOW")
    and hasattr(os, "O_DIRECTORY")
)


#: Not following a symlink in the last component (0 where the platform has no such flag).
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: Flags of a file opened for reading: never blocking (a FIFO), never becoming the
#: controlling terminal (a tty), not inherited by child processes.
READ_FLAGS = os.O_RDONLY | _O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a symlink",
}


class SymlinkSwappedError(OSError):
    """A component of a checked path became a symlink before it was opened."""


class NotRegularError(OSError):
    """A file to read is not a regular file.

    Attributes:
        kind: what it is, in words (`a FIFO`, `a character device`, …).
    """

    def __init__(self, name: str, mode: int) -> None:
        self.kind = file_kind(mode)
        super().__init__(f"{name!r} is {self.kind}, not a regular file")


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, in words (`a FIFO`, `a folder`, …)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_file_below(root: str, real: str) -> int:
    """A read-only descriptor of `real` (a resolved path inside the resolved folder
    `root`), following no symlink below `root`, once it is known to be a regular file.

    Raises:
        NotRegularError: if `real` is not a regular file (nothing is opened for a device).
        SymlinkSwappedError: if a component below `root` is a symlink now.
        OSError: as `os.open` raises it otherwise (a missing file, …).
    """
    if not RACE_FREE:
        _check_regular(real, os.stat(real).st_mode)
        return _opened_regular(real, os.open(real, READ_FLAGS))
    folder = open_below(root, os.path.dirname(real), os.O_RDONLY | os.O_DIRECTORY)
    try:
        name = os.path.basename(real)
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise SymlinkSwappedError(errno.ELOOP, f"{name!r} is a symlink", name)
        _check_regular(name, mode)
        return _opened_regular(name, _open_at(folder, name, READ_FLAGS))
    finally:
        os.close(folder)


def _check_regular(name: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularError(name, mode)


def _opened_regular(name: str, fd: int) -> int:
    """`fd` once `fstat` says it is a regular file (it may have been swapped since the
    `lstat`), back in blocking mode; else it is closed and `NotRegularError` raised."""
    try:
        _check_regular(name, os.fstat(fd).st_mode)
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_below(root: str, real: str, flags: int = os.O_RDONLY) -> int:
    """Open `real`, a resolved path inside the resolved folder `root`, following no symlink
    below `root`.

    Raises:
        SymlinkSwappedError: if a component below `root` is a symlink now.
        OSError: as `os.open` raises it otherwise (a missing file, …).
    """
    if not RACE_FREE:
        return os.open(real, flags)
    parts = os.path.relpath(real, root).split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            below = _open_at(fd, part, os.O_RDONLY | os.O_DIRECTORY)
            os.close(fd)
            fd = below
        return _open_at(fd, parts[-1], flags)
    finally:
        os.close(fd)


def unlink_below(root: str, real_parent: str, name: str) -> None:
    """Remove entry `name` of folder `real_parent` (resolved, inside resolved `root`),
    reaching the folder through no symlink; the entry itself, if a link, is removed, never
    its target. A missing entry is not an error.

    Raises:
        SymlinkSwappedError: if a folder below `root` is a symlink now.
    """
    with suppress(FileNotFoundError):
        if not RACE_FREE:
            os.unlink(os.path.join(real_parent, name))
            return
        fd = open_below(root, real_parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)


def _open_at(folder: int, name: str, flags: int) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW, dir_fd=folder)
    except OSError as exc:
        # O_NOFOLLOW on a symlink fails with ELOOP, or ENOTDIR when O_DIRECTORY is set.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(folder, name)):
            raise SymlinkSwappedError(exc.errno, f"{name!r} is a symlink", name) from exc
        raise


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
