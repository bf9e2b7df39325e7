"""Storage errors, each a `FerroloadError` and the builtin error it is a kind of.

`FerroloadError`, their root, comes from ferroload-core. Each concrete error also
subclasses the builtin a caller would catch without knowing ferroload
(`FileNotFoundError`, `ValueError`, …), and carries the context needed to act on it
(`uri`, `path`).
"""

from __future__ import annotations

from ferroload_core import FerroloadError


class InvalidURIError(FerroloadError, ValueError):
    """A URI or path that no storage backend understands."""

    def __init__(self, uri: str, reason: str) -> None:
        self.uri = uri
        super().__init__(f"invalid storage URI {uri!r}: {reason}")


class StoreError(FerroloadError, OSError):
    """A storage operation failed."""

    def __init__(self, message: str, *, uri: str = "", path: str = "") -> None:
        self.uri = uri
        self.path = path
        super().__init__(message)

    def __str__(self) -> str:  # OSError formats its args oddly; keep our message
        return str(self.args[0]) if self.args else ""


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """The object (file) does not exist."""


class NotARegularFileError(ObjectNotFoundError):
    """A key of a local store names something other than a regular file: a FIFO, a
    device, a socket, a folder. It is never read (a FIFO would block for ever, a device
    never ends), and counts as no object: listings leave it out, so callers treat it as
    a missing file (`verify()` reports it).

    Attributes:
        kind: what the key names, in words (`a FIFO`, `a character device`, …).
    """

    def __init__(self, message: str, *, uri: str = "", path: str = "", kind: str = "") -> None:
        super().__init__(message, uri=uri, path=path)
        self.kind = kind


class ObjectExistsError(StoreError, FileExistsError):
    """A put-if-absent found the object already there."""


class ObjectTruncatedError(StoreError, EOFError):
    """A range read asked for bytes past the end of the object.

    Attributes:
        size: the object's actual size in bytes.
        end: the end offset the read asked for.
    """

    def __init__(self, message: str, *, uri: str = "", path: str = "", size: int = 0, end: int = 0):
        super().__init__(message, uri=uri, path=path)
        self.size = size
        self.end = end


def truncated_error(uri: str, path: str, *, end: int, size: int) -> ObjectTruncatedError:
    """The error of a read of `path` that needed bytes up to `end` of an object that ends
    at `size`."""
    return ObjectTruncatedError(
        f"{uri}/{path} is truncated: a read needed bytes up to {end} but the object ends at {size}",
        uri=uri,
        path=path,
        size=size,
        end=end,
    )


class UnsupportedOperationError(StoreError, NotImplementedError):
    """The backend cannot do what was asked (for example a conditional put)."""


class CacheError(StoreError):
    """The block cache's directory cannot be created, read or written.

    `path` is the cache directory; point `FERROLOAD_CACHE_DIR` (or `BlockCache(directory)`)
    at a writable local directory to fix it.
    """


class CacheConfigError(FerroloadError, ValueError):
    """A block cache setting (size, block size, `FERROLOAD_CACHE_SIZE`) is invalid."""


class InvalidCacheKeyError(FerroloadError, ValueError):
    """A block cache key that `BlockCache.key` could not have made (not lowercase hex)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"invalid block cache key {key!r}: expected 16 to 128 lowercase hex digits, "
            "as made by BlockCache.key(...)"
        )


class StoreTimeoutError(StoreError, TimeoutError):
    """A request to an object store took longer than its timeout, on every attempt.

    Raise `IOOptions(timeout=…)` (or `connect_timeout`) for slow links.
    """
