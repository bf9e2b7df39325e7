"""Opening a checked local path without a window for a symlink swap.

`LocalRoot.file` resolves a key and checks that it lies inside the root; opening that
resolved path by name afterwards would follow a folder that was swapped for a symlink in
between. Here the path is opened one component at a time from the root's descriptor with
`O_NOFOLLOW`, so a swap fails the open instead of leading outside the root.
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


class SymlinkSwappedError(OSError):
    """A component of a checked path became a symlink before it was opened."""


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
