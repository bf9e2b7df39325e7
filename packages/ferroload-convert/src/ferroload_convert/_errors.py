"""Errors of the importers and exporters: each a `FerroloadError` and the matching builtin."""

from __future__ import annotations

from ferroload_core import ContextError


class ConvertError(ContextError):
    """Base of the convert errors; carries the context that explains them.

    Attributes:
        path: the input (or output) file involved: an image, a tar, a Parquet file, a
            `save_to_disk` folder.
        member: the tar member involved (WebDataset).
        row: the row involved (Hugging Face, Parquet), counted from 0 within `path`.
        column: the column involved.
        uri: the dataset involved (the destination of an import, the source of an export).
    """

    path: str | None = None
    member: str | None = None
    row: int | None = None
    column: str | None = None
    uri: str | None = None

    @property
    def where(self) -> str:
        """The input in one string: `path`, `path (member m)` or `path (row r)`."""
        where = self.path or self.uri or "?"
        if self.member is not None:
            where += f" (member {self.member})"
        if self.row is not None:
            where += f" (row {self.row})"
        return where


class BadInputError(ConvertError, ValueError):
    """An input that cannot be imported as it is: an unreadable file, an image whose
    header does not parse or that is cut short, a damaged tar, a media cell whose file is
    missing. Pass `on_error="skip"` (or `"warn"`) to leave such inputs out; they are then
    listed in `ImportReport.skipped`."""


class InputNotFoundError(ConvertError, FileNotFoundError):
    """The source of an import (a folder, file, glob or `save_to_disk` folder) does not
    exist or holds nothing to import."""


class OutputExistsError(ConvertError, FileExistsError):
    """The destination folder of an export is not empty; exporters never overwrite."""


class UnsafeNameError(ConvertError, ValueError):
    """A name read from the dataset being exported (a WebDataset member or sample id) that
    would not be a safe relative path in the output: absolute, with `..`, empty or `.`
    segments, a backslash, a URL scheme, or a NUL or other control character. Exporters
    refuse such a dataset, naming the sample, rather than write outside `dst` or rename
    members silently."""


class ConvertOptionError(ConvertError, ValueError):
    """An option that cannot work: an unknown `on_error`, a split the dataset lacks, a
    column that is not in the input, a modality that is not an image."""


class MissingDependencyError(ConvertError, ImportError):
    """An importer whose optional dependency is not installed (the `hf` extra)."""
