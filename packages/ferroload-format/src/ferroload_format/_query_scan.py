"""`Scan`: a WHERE clause run over the index in batches, by row groups or by rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format import _pruning, _sandbox
from ferroload_format._errors import ManifestError
from ferroload_format._index_arrays import arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._part_files import (
    check_part_rows,
    column_chunks,
    no_column,
    open_part,
    read_row_groups,
)
from ferroload_format._pruning import Pruner, ScanStats
from ferroload_format._sandbox import TABLE


class Scan:
    """A WHERE clause over the index, about `BATCH_ROWS` rows per DuckDB call."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        index: IndexColumns,
        names: Sequence[str],
        pos: str,
        fetch: Callable[[duckdb.DuckDBPyConnection], npt.NDArray[np.int64]],
        *,
        timeout: float,
    ) -> None:
        self.con, self.index, self.names, self.pos = con, index, list(names), pos
        self.fetch = fetch
        self.left = timeout  # seconds DuckDB may still take, over all the batches
        self.types = {n: index.schema.field(n).type for n in names}
        self.found: list[npt.NDArray[np.int64]] = []
        self.batch: list[pa.Table] = []
        self.batch_rows = 0
        self.ran = False

    def rows(
        self, rows: npt.NDArray[np.int64] | None, pruner: Pruner, stats: ScanStats
    ) -> npt.NDArray[np.int64]:
        """Over `rows` (a view's; None: every row), in batches of rows read through
        `IndexColumns.take` (which reads the row groups holding them; layer columns
        too), leaving out the rows of base row groups that `pruner` rules out. A view's
        rows are taken in ascending order (sorted first if they are not, then the
        positions found sorted back), so that a batch reads a run of row groups."""
        starts, stops = self._kept(pruner, stats)
        order: npt.NDArray[np.intp] | None = None
        if rows is None:
            for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
                for start in range(lo, hi, _pruning.BATCH_ROWS):
                    at = np.arange(start, min(hi, start + _pruning.BATCH_ROWS), dtype=np.int64)
                    self._take(at, at, stats)
        else:
            ascending = len(rows) < 2 or bool((rows[1:] >= rows[:-1]).all())
            order = None if ascending else np.argsort(rows, kind="stable")
            ordered = rows if order is None else rows[order]
            firsts = np.searchsorted(ordered, starts).tolist()
            lasts = np.searchsorted(ordered, stops).tolist()
            for lo, hi in zip(firsts, lasts, strict=True):
                for start in range(lo, hi, _pruning.BATCH_ROWS):
                    stop = min(hi, start + _pruning.BATCH_ROWS)
                    at = np.arange(start, stop, dtype=np.int64)
                    self._take(ordered[start:stop], at if order is None else order[at], stats)
        if self.batch or not self.ran:
            self._flush(stats)
        found = np.concatenate(self.found) if self.found else np.zeros(0, np.int64)
        return found if rows is None or order is None else np.sort(found)

    def _take(
        self, at: npt.NDArray[np.int64], positions: npt.NDArray[np.int64], stats: ScanStats
    ) -> None:
        """Run the clause over rows `at` of the index, known as `positions`."""
        columns = self.index.take(self.names, at) if self.names else {}
        self.batch.append(pa.table({self.pos: arrow_array(positions), **columns}))
        self.batch_rows += len(at)
        stats.add(rows_read=len(at))
        if self.batch_rows >= _pruning.BATCH_ROWS:
            self._flush(stats)

    def _kept(
        self, pruner: Pruner, stats: ScanStats
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(starts, stops) of the runs of base rows whose row groups `pruner` keeps:
        every row, as one run, when it tests nothing."""
        index = self.index
        n = index.manifest.num_samples
        if not pruner:
            return np.array([0], np.int64), np.array([n], np.int64)
        bounds: list[int] = [0]
        keep: list[npt.NDArray[np.bool_]] = []
        start = 0
        for part in index.manifest.index_parts:
            metadata = open_part(index.store, part, index._files)[0].metadata
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            if sum(sizes) != part.num_rows:  # the reads refuse the part; prune none of it
                sizes, mask = [part.num_rows], np.ones(1, dtype=bool)
            else:
                mask = pruner.may_match(self.con, metadata)
                stats.add(row_groups=len(sizes), groups_skipped=len(sizes) - int(mask.sum()))
            bounds.extend((start + np.cumsum(sizes, dtype=np.int64)).tolist())
            keep.append(mask)
            start += part.num_rows
        edges = np.asarray(bounds, dtype=np.int64)
        kept = np.concatenate(keep) if keep else np.zeros(0, dtype=bool)
        # runs of kept groups: where `kept` turns on and off
        flips = np.diff(np.concatenate([[False], kept, [False]]).astype(np.int8))
        return edges[np.flatnonzero(flips == 1)], edges[np.flatnonzero(flips == -1)]

    def row_groups(self, pruner: Pruner, stats: ScanStats) -> npt.NDArray[np.int64]:
        """Over the base index parts, a batch of row groups at a time, skipping those
        `pruner` rules out."""
        index = self.index
        start = 0
        for part in index.manifest.index_parts:
            opened = open_part(index.store, part, index._files)
            metadata = opened[0].metadata
            check_part_rows(index.store, part, metadata.num_rows)
            for name in self.names:
                if opened[0].schema_arrow.get_field_index(name) < 0:
                    raise no_column(index.store, part, name)
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            offsets = start + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
            keep = pruner.may_match(self.con, metadata)
            groups: list[int] = []
            for g in np.flatnonzero(keep).tolist():
                groups.append(g)
                self.batch_rows += sizes[g]
                if self.batch_rows >= _pruning.BATCH_ROWS:
                    self._read(opened, groups, offsets, stats)
                    groups = []
                    self._flush(stats)
            self._read(opened, groups, offsets, stats)
            skipped = len(sizes) - int(keep.sum())
            stats.add(row_groups=len(sizes), groups_skipped=skipped)
            start += part.num_rows
        if self.batch or not self.ran:  # one run at least: DuckDB binds the clause
            self._flush(stats)
        return np.concatenate(self.found) if self.found else np.zeros(0, np.int64)

    def _read(
        self,
        opened: tuple[Any, Any],
        groups: list[int],
        offsets: npt.NDArray[np.int64],
        stats: ScanStats,
    ) -> None:
        """Add row groups `groups` of one part to the batch, with their positions."""
        if not groups:
            return
        positions = np.concatenate([np.arange(offsets[g], offsets[g + 1]) for g in groups])
        columns: dict[str, pa.Array | pa.ChunkedArray] = {self.pos: arrow_array(positions)}
        if self.names:
            table = read_row_groups(opened, groups, self.names)
            for name, dtype in self.types.items():
                columns[name] = self._typed(table.column(name), dtype, name)
            _, lengths = column_chunks(opened[0].metadata, self.names, groups)
            stats.add(bytes_read=sum(lengths))
        stats.add(groups_read=len(groups), rows_read=len(positions))
        self.batch.append(pa.table(columns))

    def _typed(self, column: pa.ChunkedArray, dtype: pa.DataType, name: str) -> pa.ChunkedArray:
        if column.type == dtype:
            return column
        try:
            return column.cast(dtype)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            uri = self.index.store.uri
            raise ManifestError(
                f"column {name!r} of the index of {uri} does not hold {dtype} as the "
                f"manifest's schema says ({exc}). The manifest or the index was altered; "
                "run verify()",
                uri=uri,
                column=name,
            ) from exc

    def _flush(self, stats: ScanStats) -> None:
        """Run the clause over the batch (an empty table if there is none)."""
        if self.batch:
            table = pa.concat_tables(self.batch)
        else:
            empty = {self.pos: pa.array([], pa.int64())}
            table = pa.table({**empty, **{n: pa.array([], t) for n, t in self.types.items()}})
        self.batch, self.batch_rows, self.ran = [], 0, True
        if self.left <= 0:
            raise _sandbox.TimedOutError
        self.con.register(TABLE, table)
        began = time.monotonic()
        try:
            self.found.append(_sandbox.run(self.con, self.fetch, timeout=self.left))
        finally:
            self.left -= time.monotonic() - began
            self.con.unregister(TABLE)
        stats.add(batches=1)
