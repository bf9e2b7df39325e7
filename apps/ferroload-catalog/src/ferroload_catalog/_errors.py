"""Errors of the catalog. Each derives from `FerroloadError` and from a builtin."""

from __future__ import annotations

from ferroload_core import ContextError


class CatalogError(ContextError):
    """Base of the catalog's errors.

    Attributes:
        name: the catalog entry involved, if any.
    """

    name: str | None = None


class InvalidCatalogNameError(CatalogError, ValueError):
    """A name or tag that is not lowercase letters, digits, `-`, `_` and `.`."""


class CatalogEntryNotFoundError(CatalogError, KeyError):
    """The catalog has no entry of that name.

    Attributes:
        suggestions: the closest existing names, best first (may be empty).
    """

    def __init__(
        self, message: str, *, name: str | None = None, suggestions: tuple[str, ...] = ()
    ) -> None:
        self.suggestions = suggestions
        super().__init__(message, name=name)


class CatalogEntryExistsError(CatalogError, FileExistsError):
    """`Catalog.add` named an entry that already exists (pass `replace=True`)."""


class CatalogLockedError(CatalogError, TimeoutError):
    """Another process held the catalog file for longer than the lock timeout."""


class CatalogFileError(CatalogError, OSError):
    """The catalog file cannot be opened (not a DuckDB file, no permission, …)."""


class CatalogSecretError(CatalogError, ValueError):
    """A storage option that would put a secret in the catalog, or a secret's environment
    variable that is not set when the entry is opened.

    Attributes:
        key: the storage option.
    """

    def __init__(self, message: str, *, name: str | None = None, key: str = "") -> None:
        self.key = key
        super().__init__(message, name=name)
