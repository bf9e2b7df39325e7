"""The one rule for paths read from a dataset (docs/format.md, "Paths").

Every path that comes from a manifest, an index part, a side index, a staged partition
or a cache directory goes through `check_relative_path` where it enters ferroload; the
rest of the code may then trust it.
"""

from __future__ import annotations

import re

from ferroload_core._core import FerroloadError

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafePathError(FerroloadError, ValueError):
    """A path read from a dataset that could leave the dataset root.

    Attributes:
        path: the path as it was read.
        what: where it came from (e.g. ``shard path in manifest …``).
        reason: what is wrong with it.
    """

    def __init__(self, path: str, *, what: str, reason: str) -> None:
        self.path = path
        self.what = what
        self.reason = reason
        super().__init__(
            f"unsafe path {path!r} ({what}): {reason}; paths in a dataset must be relative, "
            "'/'-separated and stay inside the dataset root"
        )


def check_relative_path(path: object, *, what: str) -> str:
    """`path` if it is a safe relative path inside a dataset root, else raise.

    A safe path is a non-empty string of `/`-separated segments, none of them empty,
    `.` or `..`; it is not absolute, has no URL scheme or drive (`s3:`, `C:`), no
    backslash, and no NUL or other control character.

    Args:
        path: the path to check (anything read from untrusted input).
        what: where it came from, for the error message.

    Returns:
        `path`, unchanged.

    Raises:
        UnsafePathError: naming the path, `what`, and what is wrong with it.

    Examples:
        >>> check_relative_path("shards/a-00000.tar", what="shard path")
        'shards/a-00000.tar'
        >>> check_relative_path("../secret", what="shard path")
        Traceback (most recent call last):
        ...
        ferroload_core._paths.UnsafePathError: unsafe path '../secret' (shard path): ...
    """
    if not isinstance(path, str):
        raise UnsafePathError(repr(path), what=what, reason="not a string")
    reason = _problem(path)
    if reason is not None:
        raise UnsafePathError(path, what=what, reason=reason)
    return path


def _problem(path: str) -> str | None:
    if not path:
        return "it is empty"
    if _CONTROL.search(path):
        return "it holds a NUL or control character"
    if "\\" in path:
        return "it holds a backslash"
    if path.startswith("/"):
        return "it is absolute"
    if _SCHEME.match(path):
        return "it has a URL scheme or drive"
    for segment in path.split("/"):
        if segment == "..":
            return "it climbs out with '..'"
        if segment in ("", "."):
            return "it is not normalized (empty or '.' segment)"
    return None
