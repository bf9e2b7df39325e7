"""Storage errors. `FerroloadError`, their root, comes from ferroload-core.

Each concrete error also subclasses the builtin a caller would catch without knowing
ferroload (`FileNotFoundError`, `ValueError`, …), and carries the context needed to act
on it (`uri`, `path`).
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


class UnsupportedOperationError(StoreError, NotImplementedError):
    """The backend cannot do what was asked (for example a conditional put)."""
