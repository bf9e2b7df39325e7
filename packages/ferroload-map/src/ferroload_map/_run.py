"""`run_partition`: read one partition's inputs, call `fn` per batch, check its outputs and
stage the partition. The one place that calls `fn`."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_map._errors import MapError, MapOutputError
from ferroload_map._values import ValueProblemError, to_arrow, to_payloads

if TYPE_CHECKING:
    from ferroload_format import Dataset
    from ferroload_map._plan import Partition
    from ferroload_map._spec import MapSpec

logger = logging.getLogger(__name__)

#: How many skipped samples a partition result (and the map report) names.
MAX_SKIPPED_LISTED = 1000


class PartitionWriter(Protocol):
    """What the runner needs of a layer writer (`ferroload_format.LayerWriter`)."""

    def staged(self) -> set[int]:
        """Partitions already staged."""
        ...

    def write_partition(
        self,
        k: int,
        rows: npt.NDArray[np.int64],
        values: Mapping[str, Sequence[Any]],
        payloads: Mapping[str, Sequence[bytes | None]],
    ) -> None:
        """Stage partition `k` atomically (`values`: one Arrow array per metadata
        output, of its storage type)."""
        ...


@dataclass(frozen=True)
class SkippedSample:
    """A sample whose outputs are null because `fn` (or decoding its inputs) failed.

    Attributes:
        sample_id: the sample.
        partition: its partition.
        error: what went wrong, as `Type: message`.
    """

    sample_id: str
    partition: int
    error: str


@dataclass(frozen=True)
class PartitionResult:
    """What computing one partition did.

    Attributes:
        partition: the partition number.
        num_samples: rows in the partition.
        num_skipped: samples whose outputs are null (`on_error="skip"` / `"warn"`).
        skipped: the first `MAX_SKIPPED_LISTED` of them.
        fn_calls: calls of `fn` (batches, plus single-sample retries).
        seconds: wall time.
    """

    partition: int
    num_samples: int
    num_skipped: int
    skipped: tuple[SkippedSample, ...]
    fn_calls: int
    seconds: float


def run_partition(
    spec: MapSpec, dataset: Dataset, writer: PartitionWriter, partition: Partition
) -> PartitionResult:
    """Compute one partition of a map and stage it with `writer`.

    A top-level function, so that `functools.partial(run_partition, spec, dataset,
    writer)` pickles to worker processes and Ray tasks whenever `spec.fn` does.

    Raises:
        MapError: when `fn` raises (or an image input does not decode) and
            `spec.on_error == "raise"`; it names the first sample of the failing batch.
        MapOutputError: when `fn`'s outputs do not match `spec` (a missing or extra name,
            a wrong length always; a value that does not fit its type under "raise").
    """
    t0 = time.perf_counter()
    runner = _Runner(spec, dataset, partition)
    rows = partition.rows()
    ids: list[str] = dataset.column("sample_id", rows).to_pylist()
    meta = {
        c.name: dataset.column(c.name, rows).to_pylist() for c in spec.inputs if c.kind == "meta"
    }
    chunks: dict[str, list[pa.Array]] = {name: [] for name in spec.columns}
    payloads: dict[str, list[bytes | None]] = {m.name: [] for m in spec.modalities}
    for s in range(0, len(rows), spec.batch_size):
        e = min(len(rows), s + spec.batch_size)
        cols, pays = runner.batch(rows[s:e], ids[s:e], {k: v[s:e] for k, v in meta.items()})
        for name, arr in cols.items():
            chunks[name].append(arr)
        for name, items in pays.items():
            payloads[name].extend(items)
    stored = spec.storage_columns
    values = {name: _concat(parts, stored[name]) for name, parts in chunks.items()}
    writer.write_partition(partition.index, rows, values, payloads)
    return PartitionResult(
        partition=partition.index,
        num_samples=len(rows),
        num_skipped=runner.num_skipped,
        skipped=tuple(runner.skipped),
        fn_calls=runner.fn_calls,
        seconds=time.perf_counter() - t0,
    )


def _concat(parts: list[pa.Array], t: pa.DataType) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], type=t)


class _Runner:
    """Calls `fn` on the batches of one partition and checks what it returns."""

    def __init__(self, spec: MapSpec, dataset: Dataset, partition: Partition) -> None:
        self.spec = spec
        self.ds = dataset
        self.partition = partition
        self.skip = spec.on_error != "raise"
        self.num_skipped = 0
        self.skipped: list[SkippedSample] = []
        self.fn_calls = 0

    # ------------------------------------------------------------------ a batch

    def batch(
        self,
        rows: npt.NDArray[np.int64],
        ids: list[str],
        meta: dict[str, list[Any]],
    ) -> tuple[dict[str, pa.Array], dict[str, list[bytes | None]]]:
        """Outputs for every row of the batch (null / None where a sample failed)."""
        failed: dict[int, str] = {}
        batch: dict[str, list[Any]] = {"sample_id": list(ids)}
        for inp in self.spec.inputs:
            if inp.kind == "meta":
                batch[inp.name] = meta[inp.name]
            else:
                data = self.ds.read(rows, inp.name)
                batch[inp.name] = (
                    self._decode(data, ids, inp.name, failed) if inp.kind == "image" else data
                )
        ok = [i for i in range(len(ids)) if i not in failed]
        groups: list[tuple[list[int], dict[str, pa.Array], dict[str, list[bytes | None]]]] = []
        if ok:
            sub = batch if not failed else {k: [v[i] for i in ok] for k, v in batch.items()}
            try:
                groups.append(self._call(sub, ok, ids, failed))
            except _FnFailedError as exc:
                if not self.skip:
                    raise self._fn_error(exc.__cause__, ids[ok[0]], len(ok)) from exc.__cause__
                for j, i in enumerate(ok):  # retry sample by sample
                    one = {k: [v[j]] for k, v in sub.items()}
                    try:
                        groups.append(self._call(one, [i], ids, failed))
                    except _FnFailedError as single:
                        cause = single.__cause__
                        failed[i] = f"{type(cause).__name__}: {cause}"
        for i in sorted(failed):
            self._record_skip(ids[i], failed[i])
        return self._assemble(len(ids), groups, failed)

    def _decode(
        self, data: list[Any], ids: list[str], column: str, failed: dict[int, str]
    ) -> list[Any]:
        from ferroload_codec import DecodeError, decode_image

        out: list[Any] = []
        for i, payload in enumerate(data):
            if payload is None:
                out.append(None)
                continue
            try:
                out.append(decode_image(payload, sample_id=ids[i]))
            except DecodeError as exc:
                if not self.skip:
                    raise MapError(
                        f"input {column!r} of sample {ids[i]!r} in {self.ds.uri} could not be "
                        f"decoded for layer {self.spec.layer!r}: {exc}. Pass on_error='skip' to "
                        "skip such samples",
                        uri=self.ds.uri,
                        layer=self.spec.layer,
                        sample_id=ids[i],
                        column=column,
                        partition=self.partition.index,
                    ) from exc
                failed[i] = f"decoding {column!r}: {type(exc).__name__}: {exc}"
                out.append(None)
        return out

    def _call(
        self,
        batch: dict[str, list[Any]],
        positions: list[int],
        ids: list[str],
        failed: dict[int, str],
    ) -> tuple[list[int], dict[str, pa.Array], dict[str, list[bytes | None]]]:
        """Call fn on `batch` (rows `positions` of the whole batch) and check its outputs;
        values that do not fit are failures under skip, errors under raise."""
        self.fn_calls += 1
        try:
            result = self.spec.fn(batch)
        except Exception as exc:
            raise _FnFailedError() from exc
        sub_ids = [ids[i] for i in positions]
        self._check_shape(result, sub_ids)
        cols: dict[str, pa.Array] = {}
        pays: dict[str, list[bytes | None]] = {}
        bad: dict[int, str] = {}
        stored = self.spec.storage_columns
        for name, t in self.spec.columns.items():
            arr, problems = to_arrow(result[name], t, len(sub_ids))
            cols[name] = arr.cast(stored[name])
            self._problems(problems, name, sub_ids, bad)
        for mod in self.spec.modalities:
            pays[mod.name], problems = to_payloads(result[mod.name], mod)
            self._problems(problems, mod.name, sub_ids, bad)
        for j, why in bad.items():
            failed[positions[j]] = why
        if bad:  # a failing sample gets no output at all
            keep = [j for j in range(len(positions)) if j not in bad]
            idx = pa.array(keep, type=pa.int64())
            cols = {k: v.take(idx) for k, v in cols.items()}
            pays = {k: [v[j] for j in keep] for k, v in pays.items()}
            positions = [positions[j] for j in keep]
        return positions, cols, pays

    def _check_shape(self, result: Any, ids: list[str]) -> None:
        names = self.spec.output_names
        where = (
            f"fn {self.spec.fn_name} of layer {self.spec.layer!r}, on the batch starting at "
            f"sample {ids[0]!r} of {self.ds.uri}"
        )
        if not isinstance(result, Mapping):
            raise self._output_error(
                f"{where} returned {type(result).__name__}; it must return a dict: output "
                f"name -> values ({', '.join(names)})",
                ids[0],
            )
        missing = [n for n in names if n not in result]
        extra = [str(n) for n in result if n not in names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"misses {', '.join(map(repr, missing))}")
            if extra:
                parts.append(f"has undeclared {', '.join(map(repr, extra))}")
            raise self._output_error(
                f"{where}: its result {' and '.join(parts)}; outputs= declares {', '.join(names)}",
                ids[0],
                column=(missing or extra)[0],
            )
        for name in names:
            value = result[name]
            try:
                n = len(value) if not isinstance(value, np.ndarray) else value.shape[0]
            except (TypeError, IndexError):
                raise self._output_error(
                    f"{where}: output {name!r} is a {type(value).__name__}, not a sequence "
                    f"of {len(ids)} values",
                    ids[0],
                    column=name,
                ) from None
            if isinstance(value, (str, bytes)) or n != len(ids):
                got = f"a {type(value).__name__}" if isinstance(value, (str, bytes)) else n
                raise self._output_error(
                    f"{where}: output {name!r} has {got} values for a batch of {len(ids)} "
                    "samples; return one value per sample",
                    ids[0],
                    column=name,
                )

    def _problems(
        self, problems: list[ValueProblemError], column: str, ids: list[str], bad: dict[int, str]
    ) -> None:
        for p in problems:
            why = f"output {column!r} of sample {ids[p.index]!r}: {p.why}"
            if not self.skip:
                raise self._output_error(
                    f"fn {self.spec.fn_name} of layer {self.spec.layer!r} returned a bad value "
                    f"in {self.ds.uri}: {why}",
                    ids[p.index],
                    column=column,
                )
            bad.setdefault(p.index, f"MapOutputError: {why}")

    def _assemble(
        self,
        n: int,
        groups: list[tuple[list[int], dict[str, pa.Array], dict[str, list[bytes | None]]]],
        failed: dict[int, str],
    ) -> tuple[dict[str, pa.Array], dict[str, list[bytes | None]]]:
        where: list[int | None] = [None] * n
        k = 0
        for positions, _, _ in groups:
            for i in positions:
                where[i] = k
                k += 1
        idx = pa.array(where, type=pa.int64())
        cols = {
            name: _concat([g[1][name] for g in groups], t).take(idx)
            for name, t in self.spec.storage_columns.items()
        }
        pays: dict[str, list[bytes | None]] = {}
        for mod in self.spec.modalities:
            flat = [p for g in groups for p in g[2][mod.name]]
            pays[mod.name] = [None if w is None else flat[w] for w in where]
        return cols, pays

    # ------------------------------------------------------------------ errors

    def _record_skip(self, sample_id: str, why: str) -> None:
        self.num_skipped += 1
        if len(self.skipped) < MAX_SKIPPED_LISTED:
            self.skipped.append(SkippedSample(sample_id, self.partition.index, why))
        if self.spec.on_error == "warn":
            logger.warning(
                "layer %r of %s: sample %r skipped: %s",
                self.spec.layer,
                self.ds.uri,
                sample_id,
                why,
            )

    def _fn_error(self, cause: BaseException | None, first_id: str, size: int) -> MapError:
        return MapError(
            f"fn {self.spec.fn_name} of layer {self.spec.layer!r} raised "
            f"{type(cause).__name__}: {cause} on the batch of {size} samples starting at "
            f"sample {first_id!r} (partition {self.partition.index}) of {self.ds.uri}. Pass "
            "on_error='skip' to skip the samples that fail",
            uri=self.ds.uri,
            layer=self.spec.layer,
            sample_id=first_id,
            partition=self.partition.index,
        )

    def _output_error(self, message: str, sample_id: str, column: str | None = None) -> MapError:
        return MapOutputError(
            message,
            uri=self.ds.uri,
            layer=self.spec.layer,
            sample_id=sample_id,
            column=column,
            partition=self.partition.index,
        )


class _FnFailedError(Exception):
    """Internal: `fn` raised (the exception is the `__cause__`)."""
