"""`LocalRoot`: the keys of a local store as files under its root folder, checked,
opened, listed and deleted without following a symlink out of it."""

from __future__ import annotations

import os
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from ferroload_core import UnsafePathError, check_relative_path
from ferroload_store._errors import NotARegularFileError
from ferroload_store._info import ObjectInfo
from ferroload_store._nofollow import (
    NotRegularError,
    SymlinkSwappedError,
    open_file_below,
    unlink_below,
)


class LocalRoot:
    """The root folder of a local store, and the files of its keys.

    Its methods raise the `OSError`s of the file system as they come (the `Store`
    translates them); an unsafe key, or one that leads outside the root through a
    symlink, raises `UnsafePathError`; a file to read that is not a regular file raises
    `NotARegularFileError`.

    Args:
        path: the root folder (it need not exist yet).
        uri: the store's URI, for error messages.
    """

    def __init__(self, path: Path, uri: str) -> None:
        self.path = path
        self.uri = uri

    def real(self) -> str:
        """The root, resolved."""
        return os.path.realpath(self.path)

    def file(self, key: str, *, resolve: bool = False) -> Path:
        """The file of `key` under the root, refusing a key that leaves it.

        The key must pass `check_relative_path`, and the file (with `resolve`) or its
        folder must resolve inside the root: a symlink never leads a read, write or
        delete out of it. With `resolve` the resolved path is returned (what is opened
        is what was checked); without it, the unresolved one (a delete removes the link,
        never its target).

        Raises:
            UnsafePathError: if the key is unsafe or resolves outside the root.
        """
        what = f"key of store {self.uri}"
        check_relative_path(key, what=what)
        target = self.path / key
        real = os.path.realpath(target if resolve else target.parent)
        root = self.real()
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise UnsafePathError(
                key, what=what, reason="it resolves through a symlink to outside the root"
            )
        return Path(real) if resolve else target

    def open(self, key: str) -> int:
        """A read-only descriptor of `key`, checked by `file` and opened from the root one
        component at a time without following a symlink (`open_file_below`), so a folder
        swapped for a link after the check cannot lead the open outside the root; only a
        regular file is opened, never blocking (a FIFO) and never a device.

        Raises:
            UnsafePathError: if the key is unsafe, resolves outside the root, or became a
                symlink between the check and the open.
            NotARegularFileError: (an `ObjectNotFoundError`) if it names a FIFO, a
                device, a socket or a folder.
        """
        real = self.file(key, resolve=True)
        try:
            return open_file_below(self.real(), str(real))
        except SymlinkSwappedError as exc:
            raise UnsafePathError(
                key,
                what=f"key of store {self.uri}",
                reason="a folder on its way became a symlink while it was opened",
            ) from exc
        except NotRegularError as exc:
            raise NotARegularFileError(
                f"{self.uri}/{key} is {exc.kind}, not a regular file: a store reads only "
                "regular files (a FIFO would block every read, a device never ends); "
                "remove it or put the real file in its place",
                uri=self.uri,
                path=key,
                kind=exc.kind,
            ) from exc

    def read(self, key: str) -> bytes:
        """All of the file of `key`."""
        with os.fdopen(self.open(key), "rb") as f:
            return f.read()

    def head(self, key: str) -> ObjectInfo:
        """Size and modification time of the file of `key`."""
        fd = self.open(key)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC), None)

    def delete(self, key: str) -> None:
        """Remove the file of `key` (the link itself, when it is one), then its folder if
        that is left empty: object stores have no directories, a local one leaves no
        empty ones behind either.

        Raises:
            UnsafePathError: if the key is unsafe, or its folder became a symlink while
                it was deleted.
        """
        target = self.file(key)
        try:
            unlink_below(self.real(), os.path.realpath(target.parent), target.name)
        except SymlinkSwappedError as exc:
            raise UnsafePathError(
                key,
                what=f"key of store {self.uri}",
                reason="its folder became a symlink while it was deleted",
            ) from exc
        with suppress(OSError):
            if target.parent != self.path:
                target.parent.rmdir()

    def list(self, directory: str, prefix: str = "", offset: str | None = None) -> list[ObjectInfo]:
        """The regular files under folder `directory` of the root whose keys start with
        `prefix` and (with `offset`) sort after it, reached through no symlink: a
        listing never follows a link (so it never leaves the root, nor loops). Files of
        uploads in progress (`name#N`) are left out, as obstore does. Only the files kept
        are `stat`ed (a listing of the versions after the latest stats one or two files,
        not every version)."""
        folder = directory.rstrip("/")
        parts = folder.split("/") if folder else []
        start = os.path.join(self.path, *parts)
        if os.path.realpath(start) != os.path.join(self.real(), *parts):
            return []  # the folder is, or lies in, a symlink
        out: list[ObjectInfo] = []
        stack = [(start, folder)]
        while stack:
            path, key = stack.pop()
            try:
                it = os.scandir(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with it:
                for entry in it:
                    name = f"{key}/{entry.name}" if key else entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((entry.path, name))
                            continue
                        if not name.startswith(prefix) or (offset is not None and name <= offset):
                            continue
                        if not entry.is_file(follow_symlinks=False) or _uploading(entry.name):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted while listed
                        continue
                    when = datetime.fromtimestamp(st.st_mtime, UTC)
                    out.append(ObjectInfo(name, st.st_size, when, None))
        return out


def _uploading(name: str) -> bool:
    """True for obstore's in-progress upload files, `name#N` (its own listing skips them)."""
    _, sep, tail = name.partition("#")
    return bool(sep and tail and tail.isascii() and tail.isdigit())
