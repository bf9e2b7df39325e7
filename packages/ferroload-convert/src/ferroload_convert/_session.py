"""The calling thread's side of an import: writer, ids, `on_error`, progress and report.

It holds the `Writer`, makes the sample ids unique, applies `on_error`, draws the progress
and builds the report.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa

from ferroload_convert._errors import BadInputError
from ferroload_convert._ids import IdAllocator
from ferroload_convert._report import (
    MAX_SKIPPED_LISTED,
    ImportReport,
    OnError,
    PassedOver,
    Progress,
    SkippedInput,
)
from ferroload_core import progress_reporter
from ferroload_format import Dataset, DatasetNotFoundError, StagedWrite, WriteMode, Writer

logger = logging.getLogger(__name__)

#: Least time between two progress calls (the first and the last always happen).
_PROGRESS_EVERY_S = 0.05


def existing_ids(uri: str, mode: WriteMode, storage_options: Mapping[str, Any] | None) -> list[str]:
    """The sample ids an import must not reuse: the dataset's for an append, else none."""
    if mode != "append":
        return []
    try:
        existing = Dataset.open(uri, storage_options=storage_options, cache=None)
    except DatasetNotFoundError:
        return []
    return existing.column("sample_id").to_pylist() if len(existing) else []


@dataclass
class StagedPart:
    """What one task of a cluster import wrote, uncommitted, and its account.

    Attributes:
        staged: its staged write (`Writer.stage`).
        added: the sample ids it added, in order.
        num_bytes: payload bytes it added.
        num_skipped: bad inputs it left out.
        skipped: the first of them, listed.
        num_ignored: inputs it passed over.
        ignored: the first of them, listed.
        done: inputs it did (what the progress counts).
    """

    staged: StagedWrite
    added: list[str]
    num_bytes: int
    num_skipped: int
    skipped: list[SkippedInput]
    num_ignored: int
    ignored: list[SkippedInput]
    done: int


class ImportSession:
    """Writes the samples an importer produces, in the order it gives them, and keeps the
    account. Used as a context manager: an exception inside aborts the writer, so a failed
    import commits nothing.

    Args:
        dst: the dataset URI.
        name: the dataset name (`Writer`'s default when None).
        shard_size: the writer's target shard size.
        storage_options: backend options of `dst`.
        on_error: what `bad()` does.
        progress: the importer's `progress=` (`ferroload_core.progress_reporter`): a bar,
            nothing, or `progress(done, total)` called from this thread.
        total: inputs to do, when known up front.
        mode: what to do with a dataset at `dst` (`Writer`'s `mode`): `create` refuses
            it (`DatasetExistsError`), `append` adds to it (repeated ids get a suffix),
            `overwrite` replaces its content in a new version.
        desc: the progress bar's label.
        unit: what the bar counts.
        taken: the sample ids already taken (default: the dataset's, for an append);
            a task of a cluster import gets them from the driver.
    """

    def __init__(
        self,
        dst: str | os.PathLike[str],
        *,
        name: str | None,
        shard_size: int,
        storage_options: Mapping[str, Any] | None,
        on_error: OnError,
        progress: Progress,
        total: int | None = None,
        mode: WriteMode = "create",
        desc: str = "import",
        unit: str = "it",
        taken: Iterable[str] | None = None,
    ) -> None:
        self._start = time.perf_counter()
        self._writer = Writer(
            dst, name, shard_size=shard_size, storage_options=storage_options, mode=mode
        )
        self.uri = self._writer.uri
        self.existing_modalities = self._writer.modalities
        """The modalities of the dataset appended to (empty for a new one)."""
        if taken is None:
            taken = existing_ids(self.uri, self._writer.mode, storage_options)
        self.ids = IdAllocator(taken)
        self.added: list[str] = []
        """The ids this session added, in order."""
        self._on_error = on_error
        self._bar = ExitStack()
        self._progress = self._bar.enter_context(
            progress_reporter(progress, desc=desc, unit=unit, total=total)
        )
        self.total = total
        self.done = 0
        self._last_call = 0.0
        self.num_samples = 0
        self.num_bytes = 0
        self.num_ignored = 0
        self.num_skipped = 0
        self._skipped: list[SkippedInput] = []
        self._ignored: list[SkippedInput] = []

    # ----------------------------------------------------------------- writing

    @property
    def modalities(self) -> tuple[str, ...]:
        """The modalities declared so far."""
        return tuple(m.name for m in self._writer.modalities)

    def declare(self, modality: str, ext: str, kind: str, codec_hint: str) -> None:
        """Declare a modality (again, identically, is a no-op)."""
        self._writer.declare(modality, ext, kind, codec_hint)

    def declare_column(self, name: str, dtype: pa.DataType) -> None:
        """Declare a metadata column's Arrow type (`Writer.declare_column`)."""
        self._writer.declare_column(name, dtype)

    def add(
        self, name: str, data: Mapping[str, bytes] | None, meta: Mapping[str, Any] | None
    ) -> str:
        """Add one sample under a unique id made from `name`; return the id."""
        sample_id = self.ids.take(name)
        self._writer.add(sample_id, data or None, meta or None)
        self.added.append(sample_id)
        self.num_samples += 1
        if data:
            self.num_bytes += sum(len(v) for v in data.values())
        return sample_id

    def bad(self, error: BadInputError) -> None:
        """A bad input: raise it (`on_error="raise"`) or record it as skipped."""
        if self._on_error == "raise":
            raise error
        where, reason = error.where, str(error)
        if self._on_error == "warn":
            logger.warning("skipped %s: %s", where, reason)
        else:
            logger.debug("skipped %s: %s", where, reason)
        self.num_skipped += 1
        if len(self._skipped) < MAX_SKIPPED_LISTED:
            self._skipped.append(SkippedInput(where, reason))

    def ignore(self, where: str, reason: str) -> None:
        """An input that is not for this importer: counted, listed in the report (the
        first `MAX_SKIPPED_LISTED`) and logged at info level."""
        self.num_ignored += 1
        logger.info("ignored %s: %s", where, reason)
        if len(self._ignored) < MAX_SKIPPED_LISTED:
            self._ignored.append(SkippedInput(where, reason))

    def passed_over(self, planned: PassedOver) -> None:
        """What planning passed over, as `ignore` takes each (the count beyond the ones
        listed is counted only)."""
        for where, reason in planned.listed:
            self.ignore(where, reason)
        self.num_ignored += planned.count - len(planned.listed)

    def advance(self, n: int = 1) -> None:
        """`n` more inputs done: call `progress` (at most every 50 ms, and at the end)."""
        self.done += n
        now = time.perf_counter()
        if now - self._last_call >= _PROGRESS_EVERY_S or self.done == self.total:
            self._last_call = now
            self._progress(self.done, self.total)

    # ----------------------------------------------------------------- finishing

    def finish(self, columns: Mapping[str, str | list[str]]) -> ImportReport:
        """Commit what was added; the report. An append that added nothing commits
        nothing; a `create` or `overwrite` commits an empty version."""
        version = self._writer.close()
        self._progress(self.done, self.done if self.total is None else self.total)
        logger.info(
            "imported %d samples into %s (%d skipped, %d ignored)",
            self.num_samples,
            self.uri,
            self.num_skipped,
            self.num_ignored,
        )
        return ImportReport(
            uri=self.uri,
            version=version,
            num_samples=self.num_samples,
            num_bytes=self.num_bytes,
            num_skipped=self.num_skipped,
            skipped=tuple(self._skipped),
            num_ignored=self.num_ignored,
            ignored=tuple(self._ignored),
            columns=dict(columns),
            seconds=time.perf_counter() - self._start,
        )

    def stage(self) -> StagedPart:
        """Stage what was added without committing it (a task of a cluster import): the
        staged write and this session's account, for the driver's one commit."""
        staged = self._writer.stage()
        return StagedPart(
            staged=staged,
            added=self.added,
            num_bytes=self.num_bytes,
            num_skipped=self.num_skipped,
            skipped=self._skipped,
            num_ignored=self.num_ignored,
            ignored=self._ignored,
            done=self.done,
        )

    def __enter__(self) -> ImportSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.close()
        if exc_type is not None:
            self._writer.abort()
