"""What an import or export did, and the options every importer shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ferroload_convert._errors import ConvertOptionError
from ferroload_core import ProgressArg

#: What to do with a bad input: raise `BadInputError`, leave it out, or leave it out
#: and log a warning.
OnError = Literal["raise", "skip", "warn"]
#: What `progress=` takes (`ferroload_core.ProgressArg`): True (a bar), False (nothing),
#: None (a bar when standard error is a terminal) or `progress(done, total)`, inputs done
#: so far and their total (None while unknown).
Progress = ProgressArg
#: Threads that read and check inputs by default.
DEFAULT_WORKERS = 8
#: Skipped inputs listed in a report (all of them are counted).
MAX_SKIPPED_LISTED = 10_000


class SkippedInput(NamedTuple):
    """An input left out of an import (`on_error="skip"` / `"warn"`, or passed over as
    not an input of the importer) or of an export.

    Attributes:
        where: the input: a file path, `path (member m)` for a tar member, `path (row r)`
            for a row, or a sample id for an export.
        reason: why, in words.
    """

    where: str
    reason: str


class PassedOver:
    """What an importer passes over while it plans (files that are not its inputs): all
    counted, the first `MAX_SKIPPED_LISTED` listed, so that a folder of a million other
    files costs a count, not a million entries."""

    def __init__(self) -> None:
        self.count = 0
        self.listed: list[SkippedInput] = []

    def add(self, where: str, reason: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_SKIPPED_LISTED:
            self.listed.append(SkippedInput(where, reason))

    def extend(self, other: PassedOver) -> None:
        """Take in what `other` passed over (its count, what it listed)."""
        self.count += other.count
        self.listed.extend(other.listed[: MAX_SKIPPED_LISTED - len(self.listed)])


@dataclass(frozen=True)
class ImportReport:
    """What one import did.

    Attributes:
        uri: the destination dataset.
        version: the version the import committed (with nothing to add, a new or
            overwritten dataset gets an empty version); None when an append added nothing.
        num_samples: samples added.
        num_bytes: payload bytes added (all modalities).
        num_skipped: bad inputs left out (`on_error="skip"` / `"warn"`).
        skipped: the first 10,000 of them, as `(where, reason)`.
        num_ignored: files or tar members that are not inputs of this importer and were
            passed over (a text file in an image folder, a directory entry in a tar).
        ignored: the first 10,000 of them, as `(where, reason)`.
        columns: how the input's columns (or WebDataset extensions, or the image files)
            are named in the dataset: input name -> modality or metadata column, or the
            list of columns it fills (a Hugging Face image: the bytes and their path; a
            class label: the index and its name).
        seconds: wall time.
    """

    uri: str
    version: int | None
    num_samples: int
    num_bytes: int
    num_skipped: int
    skipped: tuple[SkippedInput, ...]
    num_ignored: int
    columns: Mapping[str, str | list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    ignored: tuple[SkippedInput, ...] = ()


@dataclass(frozen=True)
class ExportReport:
    """What one export did.

    Attributes:
        dst: the folder written.
        num_samples: samples written.
        num_files: files written (tars, or images).
        num_bytes: payload bytes written (tar headers and JSON metadata not counted).
        skipped: samples not written, as `(sample_id, reason)` (a sample without the
            exported image, for instance).
        seconds: wall time.
    """

    dst: str
    num_samples: int
    num_files: int
    num_bytes: int
    skipped: tuple[SkippedInput, ...] = ()
    seconds: float = 0.0


def check_common(on_error: str, workers: int) -> None:
    """Validate the options every importer shares.

    Raises:
        ConvertOptionError: for an unknown `on_error` or a `workers` below 1.
    """
    if on_error not in ("raise", "skip", "warn"):
        raise ConvertOptionError(
            f"on_error must be 'raise', 'skip' or 'warn', got {on_error!r}", column="on_error"
        )
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConvertOptionError(f"workers must be an int >= 1, got {workers!r}", column="workers")
