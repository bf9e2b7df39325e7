"""Imports as jobs of units: on this machine, or cut into tasks on an executor (Ray) whose
staged writes one commit publishes, equal sample for sample to the one-machine import.

An importer describes its work as an `ImportJob`: the ordered units of its input (tars,
files, row batches), how a session is started (the modalities it declares), how a run of
units adds samples, and the order-dependent state that run carries (WebDataset's
extension -> modality names; the sample ids, which every importer makes unique in input
order, are the session's). `run_job` runs it all in one session, or, given an executor,
cuts the units into consecutive chunks, runs each chunk as a task that stages its write
(`ImportSession.stage`), and folds the results in input order:

* A chunk ran from a state it was given (the dataset's ids, the initial names); the true
  state before it is the fold of every earlier chunk. Its result is what the one-machine
  import would have made if no id it added was added by an earlier chunk (an id
  allocator's choice depends only on the ids taken, and any difference shows as an id
  both chose) and the job finds its other decisions unchanged (`ImportJob.consistent`).
* Otherwise that chunk and every later one are run again, in parallel, from the true
  state before it, and the fold goes on from there: each round makes at least one more
  chunk exact, and in practice one round settles every chunk (a key repeated across
  tars, the first tar with a `__ferroload__` marker).

Then one `commit_staged` publishes every chunk's shards as one version; a failure
anywhere discards every staged write (nothing is committed).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ferroload_convert._errors import BadInputError
from ferroload_convert._report import (
    MAX_SKIPPED_LISTED,
    ImportReport,
    OnError,
    PassedOver,
    Progress,
    SkippedInput,
)
from ferroload_convert._session import ImportSession, StagedPart, existing_ids
from ferroload_core import progress_reporter
from ferroload_format import WriteMode, Writer, commit_staged, discard_staged

logger = logging.getLogger(__name__)

U = TypeVar("U")
S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: Units a task imports by default, per importer (tars, files, row batches).
DEFAULT_CHUNK_SIZES = {"wds": 1, "parquet": 1, "imagefolder": 2000, "hf": 8}


#: A job's fields that only the driver needs: a task gets its chunk of the units.
_PLANNED = ("units", "ignored", "bad")


class Executor(Protocol):
    """What runs the tasks of a cluster import: `ferroload_map`'s `RayExecutor` (or any
    object with this `run`). Results may come in any order."""

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]: ...


class ImportJob(Protocol[U, S]):
    """One importer's work (see the module); a dataclass, whose planned fields (`units`,
    `ignored`, `bad`) the driver empties in the copy each task gets."""

    @property
    def kind(self) -> str:
        """The importer (`wds`, `parquet`, `imagefolder`, `hf`): its default chunk size."""

    @property
    def units(self) -> Sequence[U]:
        """The input's units, in order."""

    @property
    def ignored(self) -> PassedOver:
        """Inputs passed over while planning (files that are not inputs of the importer)."""

    @property
    def bad(self) -> Sequence[BadInputError]:
        """Bad inputs found while planning (unreadable files), reported as the units' are."""

    def initial_state(self) -> S: ...

    def start(self, session: ImportSession) -> None:
        """Declare what the session needs before the first unit (modalities)."""

    def run(self, session: ImportSession, units: Sequence[U], state: S) -> S:
        """Add the samples of `units` in order, from `state`; the state after them."""

    def consistent(self, given: S, truth: S, after: S) -> bool:
        """Whether a run from `given` that ended in `after` decided as a run from `truth`
        would have (ids aside)."""

    def merge(self, given: S, truth: S, after: S) -> S:
        """The true state after a consistent run from `given` that ended in `after`."""

    def report_columns(self, state: S) -> Mapping[str, str | list[str]]:
        """The report's input name -> column mapping."""


class StatelessJob:
    """The state methods of a job whose only order-dependent state is the sample ids."""

    ignored = PassedOver()  # nothing (read only)
    bad: Sequence[BadInputError] = ()

    def initial_state(self) -> None:
        return None

    def consistent(self, given: None, truth: None, after: None) -> bool:
        return True

    def merge(self, given: None, truth: None, after: None) -> None:
        return None


@dataclass(frozen=True)
class SessionOptions:
    """What every session of one import is opened with."""

    dst: str
    name: str | None
    shard_size: int
    storage_options: Mapping[str, Any] | None
    on_error: OnError
    mode: WriteMode
    desc: str
    unit: str
    total: int | None = None

    def open(self, progress: Progress, taken: Any = None) -> ImportSession:
        return ImportSession(
            self.dst,
            name=self.name,
            shard_size=self.shard_size,
            storage_options=self.storage_options,
            on_error=self.on_error,
            progress=progress,
            total=self.total,
            mode=self.mode,
            desc=self.desc,
            unit=self.unit,
            taken=taken,
        )


@dataclass(frozen=True)
class _Chunk(Generic[U, S]):
    """One task: the chunk's place, its units and the state it starts from."""

    index: int
    job: ImportJob[U, S]
    options: SessionOptions
    units: Sequence[U]
    taken: frozenset[str]
    state: S


@dataclass
class _Done(Generic[S]):
    index: int
    part: StagedPart
    given: S
    after: S


def _run_chunk(chunk: _Chunk[U, S]) -> _Done[S]:
    """A task of a cluster import (runs on a worker): import the chunk, stage it."""
    with chunk.options.open(False, chunk.taken) as session:
        chunk.job.start(session)
        after = chunk.job.run(session, chunk.units, chunk.state)
        return _Done(chunk.index, session.stage(), chunk.state, after)


def _planning_skips(bad: Sequence[BadInputError], on_error: OnError) -> list[SkippedInput]:
    """The bad inputs found while planning, as `ImportSession.bad` treats them."""
    if bad and on_error == "raise":
        raise bad[0]
    for error in bad:
        log = logger.warning if on_error == "warn" else logger.debug
        log("skipped %s: %s", error.where, error)
    return [SkippedInput(e.where, str(e)) for e in bad]


def run_job(
    job: ImportJob[U, S],
    options: SessionOptions,
    *,
    progress: Progress,
    executor: Executor | None = None,
    chunk_size: int | None = None,
) -> ImportReport:
    """Run `job` in one session on this machine, or in tasks on `executor` (module)."""
    if executor is None:
        with options.open(progress) as session:
            session.passed_over(job.ignored)
            for error in job.bad:
                session.bad(error)
            job.start(session)
            state = job.run(session, job.units, job.initial_state())
            return session.finish(job.report_columns(state))
    size = DEFAULT_CHUNK_SIZES[job.kind] if chunk_size is None else chunk_size
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return _run_on(job, options, executor, size, progress)


def _run_on(
    job: ImportJob[U, S],
    options: SessionOptions,
    executor: Executor,
    size: int,
    progress: Progress,
) -> ImportReport:
    start = time.perf_counter()
    # the checks a Writer makes (mode, name, an upgrade needed) before any task runs
    Writer(options.dst, options.name, mode=options.mode,
           storage_options=options.storage_options).abort()  # fmt: skip
    taken = frozenset(existing_ids(options.dst, options.mode, options.storage_options))
    planned = _planning_skips(job.bad, options.on_error)
    units = list(job.units)
    bounds = [(i, min(i + size, len(units))) for i in range(0, len(units), size)] or [(0, 0)]
    # each task gets its own units: not the job's whole list (nor what planning found)
    job_: Any = job
    light: ImportJob[U, S] = dataclasses.replace(
        job_, **{f.name: () for f in dataclasses.fields(job_) if f.name in _PLANNED}
    )
    staged: dict[int, _Done[S]] = {}
    with ExitStack() as stack:
        bar = stack.enter_context(
            progress_reporter(progress, desc=options.desc, unit=options.unit, total=options.total)
        )
        done = 0

        def submit(first: int, ids: frozenset[str], state: S) -> None:
            nonlocal done
            chunks = [
                _Chunk(i, light, options, units[a:b], ids, state)
                for i, (a, b) in enumerate(bounds)
                if i >= first
            ]
            for result in executor.run(_run_chunk, chunks):
                old = staged.pop(result.index, None)
                if old is not None:
                    discard_staged(
                        options.dst, [old.part.staged], storage_options=options.storage_options
                    )
                else:
                    done += result.part.done
                    bar(done, options.total)
                staged[result.index] = result

        try:
            submit(0, taken, job.initial_state())
            added: set[str] = set()
            state = job.initial_state()
            i = 0
            while i < len(bounds):
                result = staged[i]
                # (a task never picks an id it was told is taken: any id it shares with
                # an earlier chunk is one the fold would have told it)
                if not added.isdisjoint(result.part.added) or not job.consistent(
                    result.given, state, result.after
                ):
                    submit(i, taken | added, state)
                    continue
                added.update(result.part.added)
                state = job.merge(result.given, state, result.after)
                i += 1
            parts = [staged[i].part for i in range(len(bounds))]
            version = commit_staged(
                options.dst,
                [p.staged for p in parts],
                mode=options.mode,
                name=options.name,
                storage_options=options.storage_options,
            )
        except BaseException:
            discard_staged(options.dst, [d.part.staged for d in staged.values()],
                           storage_options=options.storage_options)  # fmt: skip
            raise
        bar(done, done if options.total is None else options.total)
    skipped = [*planned, *(s for p in parts for s in p.skipped)][:MAX_SKIPPED_LISTED]
    return ImportReport(
        uri=parts[0].staged.uri if parts else os.fspath(options.dst),
        version=version,
        num_samples=sum(len(p.added) for p in parts),
        num_bytes=sum(p.num_bytes for p in parts),
        num_skipped=len(job.bad) + sum(p.num_skipped for p in parts),
        skipped=tuple(skipped),
        num_ignored=job.ignored.count + sum(p.num_ignored for p in parts),
        ignored=tuple(
            [*job.ignored.listed, *(s for p in parts for s in p.ignored)][:MAX_SKIPPED_LISTED]
        ),
        columns=job.report_columns(state),
        seconds=time.perf_counter() - start,
    )
