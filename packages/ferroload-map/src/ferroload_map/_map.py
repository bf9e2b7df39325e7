"""`map_dataset`: identity, plan, skip staged partitions, execute, commit; `MapReport`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack, overload

from ferroload_core import ProgressArg, progress_reporter
from ferroload_map._errors import MapSpecError
from ferroload_map._executors import (
    Executor,
    ExecutorName,
    LocalExecutor,
    RayExecutor,
    resolve_executor,
)
from ferroload_map._plan import Partition, plan_partitions
from ferroload_map._run import (
    MAX_SKIPPED_LISTED,
    PartitionResult,
    PartitionWriter,
    SkippedSample,
    run_partition,
)
from ferroload_map._spec import MapFn, MapSpec, OnError, OutputType

if TYPE_CHECKING:
    from ferroload_format import Dataset

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MapReport:
    """What one `map_dataset` call did.

    Attributes:
        layer: the layer name.
        identity: the layer identity (sha256 hex).
        num_partitions: partitions in the plan.
        computed_partitions: partitions this call computed, ascending.
        skipped_partitions: partitions already staged by an earlier (killed or other
            rank's) run, not recomputed.
        num_samples: samples this call computed (skipped ones included).
        num_skipped_samples: samples whose outputs are null because `fn` failed on them
            (`on_error="skip"` / `"warn"`).
        skipped_samples: the first 1000 of them, with their errors.
        fn_calls: calls of `fn` (batches, plus single-sample retries under skip).
        seconds: wall time of the call.
        already_committed: the layer was committed before the call (nothing was done).
        committed: the layer is committed in the returned dataset's version.
        pending: partitions of other ranks are not staged yet (static partition
            executor): the dataset was returned unchanged; the rank that finishes last
            commits.
        version: the version of the returned dataset.
    """

    layer: str
    identity: str
    num_partitions: int
    computed_partitions: tuple[int, ...]
    skipped_partitions: tuple[int, ...]
    num_samples: int
    num_skipped_samples: int
    skipped_samples: tuple[SkippedSample, ...]
    fn_calls: int
    seconds: float
    already_committed: bool
    committed: bool
    pending: bool
    version: int

    @property
    def skipped_ids(self) -> tuple[str, ...]:
        """Sample ids of `skipped_samples`."""
        return tuple(s.sample_id for s in self.skipped_samples)


class LayerWriterLike(PartitionWriter, Protocol):
    """What `map_dataset` needs of `ferroload_format.LayerWriter`."""

    @property
    def committed(self) -> bool:
        """Whether the latest version has this layer identity."""
        ...

    def commit(self, num_partitions: int) -> Dataset:
        """Commit the staged partitions; a no-op if already committed."""
        ...


class _MapOptions(TypedDict, total=False):
    """The keywords of `map_dataset` that both its overloads take (typing only)."""

    batch_size: int
    executor: ExecutorName | Executor
    version: str | None
    on_error: OnError
    partition_size: int | None
    overwrite: bool
    progress: ProgressArg


@overload
def map_dataset(
    ds: Dataset,
    fn: MapFn,
    *,
    inputs: Sequence[str],
    outputs: Mapping[str, OutputType],
    layer: str,
    return_report: Literal[False] = ...,
    **options: Unpack[_MapOptions],
) -> Dataset: ...
@overload
def map_dataset(
    ds: Dataset,
    fn: MapFn,
    *,
    inputs: Sequence[str],
    outputs: Mapping[str, OutputType],
    layer: str,
    return_report: Literal[True],
    **options: Unpack[_MapOptions],
) -> tuple[Dataset, MapReport]: ...


def map_dataset(
    ds: Dataset,
    fn: MapFn,
    *,
    inputs: Sequence[str],
    outputs: Mapping[str, OutputType],
    layer: str,
    batch_size: int = 64,
    executor: ExecutorName | Executor = "auto",
    version: str | None = None,
    on_error: OnError = "raise",
    partition_size: int | None = None,
    overwrite: bool = False,
    progress: ProgressArg = None,
    return_report: bool = False,
) -> Dataset | tuple[Dataset, MapReport]:
    """Add the outputs of `fn` to every sample of `ds` as a layer, committed as a new version.

    `fn` receives one batch as a dict: each input name -> a list with one value per
    sample (image modalities decoded to HWC uint8 numpy arrays, other modalities as
    bytes, metadata as Python values, None where a sample lacks it), plus `sample_id`.
    It returns a dict: each output name -> a sequence or numpy array as long as the batch.
    Metadata outputs are checked against their declared types; modality outputs are
    bytes, or numpy arrays that are encoded for you (images: uint8 HxW[xC] to the
    extension's format; `npy`: `np.save`), or str for text extensions.

    The map is idempotent and resumable. Its identity (a sha256 over `layer`, the fn
    identity, inputs, outputs and `ds.version`) names the layer: when the latest version
    already has it, the call does nothing. The rows are cut into partitions of
    `partition_size`; each is staged atomically when done, so a killed run, run again,
    computes only the partitions that are missing, then commits once. Nothing is visible
    to readers before the commit.

    Args:
        ds: the dataset version to enrich (a whole version, not a subset view).
        fn: the function, `fn(batch) -> outputs` (must be thread-safe with the threads
            executor, importable by worker processes with "processes").
        inputs: the columns `fn` reads.
        outputs: output name -> metadata type string (`"int64"`, `"float32"`,
            `"float32[3]"`, `"list<float32>"`, `"string"`, …), a pyarrow type, a
            modality file extension (`"png"`, `"jpg"`, `"npy"`, `"txt"`, `"bin"`, …), or
            a `ferroload_format.Modality`.
        layer: the layer's name.
        batch_size: samples per call of `fn`.
        executor: where partitions run: "auto" (see `auto_executor`), "local" /
            "threads", "processes", "static", "ray", or an `Executor`.
        version: the fn identity instead of its module, name and source (required for
            functions without source, or whose behaviour depends on more than it; change
            it when the function changes).
        on_error: "raise": a failing batch raises `MapError`. "skip": the failing batch is
            retried sample by sample; samples that fail get null outputs and are counted
            in the report (and logged in one warning). "warn": as skip, logging each one.
        partition_size: rows per partition (the unit of staging and resume; resume
            with the same value). Default: about 32 partitions, 256 to 4,096 rows each,
            a function of the row count only (`default_partition_size`).
        overwrite: replace a committed layer of the same name computed differently
            (older versions keep it).
        progress: `True` draws a bar on standard error of the samples this process
            computes (updated as each partition finishes), `False` nothing, None (the
            default) a bar when standard error is a terminal; a callable is called as
            `progress(samples_done, total)` (see `ferroload_core.progress_reporter`).
        return_report: return `(dataset, MapReport)` instead of the dataset.

    Returns:
        The dataset at the version that has the layer (`ds` itself, unchanged, when a
        static partition run leaves other ranks' partitions pending), and with
        `return_report` the `MapReport`.

    Raises:
        MapSpecError: for bad arguments, or a function whose identity cannot be
            computed (pass `version=`).
        ColumnNotFoundError: for an unknown input.
        LayerExistsError: if the layer exists with another identity and not `overwrite`.
        SchemaConflictError: if an output name is taken by the dataset or another layer.
        MapError: if `fn` raises under `on_error="raise"` (naming the first sample of the
            failing batch).
        MapOutputError: if `fn` returns outputs that do not match `outputs`.

    Examples:
        >>> from ferroload_format import Dataset, Writer
        >>> with Writer("memory://docs/map-example", "demo") as w:
        ...     for i in range(5):
        ...         w.add(f"s{i}", None, {"label": i})
        >>> def double(batch):
        ...     return {"twice": [2 * x for x in batch["label"]]}
        >>> ds = Dataset.open("memory://docs/map-example")
        >>> ds2, report = map_dataset(ds, double, inputs=["label"], outputs={"twice": "int64"},
        ...                           layer="doubled", return_report=True)
        >>> ds2.column("twice").to_pylist(), report.num_samples
        ([0, 2, 4, 6, 8], 5)
        >>> map_dataset(ds, double, inputs=["label"], outputs={"twice": "int64"},
        ...             layer="doubled", return_report=True)[1].already_committed
        True
    """
    from ferroload_format import LayerWriter

    t0 = time.perf_counter()
    spec = MapSpec.build(
        ds,
        fn,
        inputs=inputs,
        outputs=outputs,
        layer=layer,
        batch_size=batch_size,
        version=version,
        on_error=on_error,
    )
    if ds.is_view:
        raise MapSpecError(
            f"map runs over whole versions, and this is a view of {ds.uri} (from subset() or "
            "take()); map the version and filter in fn, or write the subset as its own "
            "dataset",
            uri=ds.uri,
            layer=layer,
        )
    plan = plan_partitions(ds, partition_size)  # checks partition_size
    exe = resolve_executor(executor)
    _check_reachable(ds, exe, layer)
    writer = LayerWriter(
        ds,
        layer,
        identity=spec.identity,
        columns=spec.storage_columns,
        modalities=spec.modalities,
        overwrite=overwrite,
    )
    out, report = execute_map(ds, spec, writer, plan, exe, progress=progress, started=t0)
    return (out, report) if return_report else out


def execute_map(
    ds: Dataset,
    spec: MapSpec,
    writer: LayerWriterLike,
    plan: Sequence[Partition],
    executor: Executor,
    *,
    progress: ProgressArg = False,
    started: float | None = None,
) -> tuple[Dataset, MapReport]:
    """Run a planned map with a given layer writer (the body of `map_dataset`).

    Skips the whole map when the writer's identity is committed, runs the partitions
    the writer has not staged that `executor` assigns to this process, and commits when
    every partition of `plan` is staged.
    """
    t0 = time.perf_counter() if started is None else started
    n = len(plan)

    def report(**kw: Any) -> MapReport:
        base: dict[str, Any] = {
            "layer": spec.layer,
            "identity": spec.identity,
            "num_partitions": n,
            "computed_partitions": (),
            "skipped_partitions": (),
            "num_samples": 0,
            "num_skipped_samples": 0,
            "skipped_samples": (),
            "fn_calls": 0,
            "already_committed": False,
            "committed": True,
            "pending": False,
        }
        base.update(kw)
        return MapReport(seconds=time.perf_counter() - t0, **base)

    if writer.committed:
        out = writer.commit(n)  # a no-op that returns the version holding the layer
        logger.info("layer %r of %s is already committed: nothing to do", spec.layer, ds.uri)
        return out, report(already_committed=True, version=out.version)

    staged = writer.staged()
    todo = [p for p in plan if p.index not in staged]
    mine = executor.assign(todo)
    task = functools.partial(run_partition, spec, ds, writer)
    results: list[PartitionResult] = []
    total = sum(len(p) for p in mine)
    with progress_reporter(progress, desc=f"map {spec.layer}", unit="sample", total=total) as tick:
        tick(0, total)
        done_rows = 0
        for result in executor.run(task, mine):
            results.append(result)
            done_rows += result.num_samples
            tick(done_rows, total)
    results.sort(key=lambda r: r.partition)
    skipped = [s for r in results for s in r.skipped][:MAX_SKIPPED_LISTED]
    num_skipped = sum(r.num_skipped for r in results)
    if num_skipped:
        logger.warning(
            "layer %r of %s: fn failed on %d samples, whose outputs are null (first: %s)",
            spec.layer,
            ds.uri,
            num_skipped,
            ", ".join(repr(s.sample_id) for s in skipped[:5]),
        )
    done: dict[str, Any] = {
        "computed_partitions": tuple(r.partition for r in results),
        "skipped_partitions": tuple(sorted(p.index for p in plan if p.index in staged)),
        "num_samples": sum(r.num_samples for r in results),
        "num_skipped_samples": num_skipped,
        "skipped_samples": tuple(skipped),
        "fn_calls": sum(r.fn_calls for r in results),
    }
    if set(range(n)) <= writer.staged() or writer.committed:
        out = writer.commit(n)
        return out, report(version=out.version, **done)
    logger.info(
        "layer %r of %s: this process staged its partitions; others are still missing, "
        "the last one to finish commits",
        spec.layer,
        ds.uri,
    )
    return ds, report(committed=False, pending=True, version=ds.version, **done)


def _check_reachable(ds: Dataset, executor: Executor, layer: str) -> None:
    """A memory:// dataset lives in this process: other processes cannot reach it."""
    other = isinstance(executor, RayExecutor) or (
        isinstance(executor, LocalExecutor) and executor.kind == "processes"
    )
    if other and ds.uri.startswith("memory://"):
        raise MapSpecError(
            f"{ds.uri} lives in this process's memory, so {executor!r} cannot reach it from "
            "other processes; use the threads executor or a dataset on disk or object storage",
            uri=ds.uri,
            layer=layer,
        )
