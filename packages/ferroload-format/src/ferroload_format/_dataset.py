"""`Dataset`: random access, projection, coalesced batch reads and SQL subsets of a version."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_core import ProgressArg
from ferroload_format._history import VersionInfo, version_history
from ferroload_format._index_arrays import ModalityArrays, arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import Manifest
from ferroload_format._plugins import plugin, resolve_uri
from ferroload_format._positions import IndexLike, all_present_at, row_at, rows_at, view_shard_runs
from ferroload_format._reads import SampleReader
from ferroload_format._records import LayerInfo, Modality
from ferroload_format._versions import read_manifest
from ferroload_store import BlockCache, IOOptions, Store, open_store

if TYPE_CHECKING:
    from ferroload_format._verify_report import VerifyReport
    from ferroload_format._write_modes import WriteMode

_ITER_CHUNK = 256


class Dataset:
    """A committed version of a ferroload dataset, or a view (subset) of one.

    Open one with `Dataset.open`. Opening reads only the manifest; index columns load on
    first use, only those needed. Positions are 0-based row numbers; a view created by
    `subset()` or `take()` renumbers its rows from 0.

    Examples:
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/dataset-example", "demo") as w:
        ...     w.declare("image", "jpg", "tensor", "image")
        ...     w.add("s0000", {"image": b"jpeg bytes"}, {"label": 3})
        >>> ds = Dataset.open("memory://docs/dataset-example")
        >>> len(ds), ds.get(0, ["label"]), ds.get(0)["image"]
        (1, {'label': 3}, b'jpeg bytes')
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        *,
        index: IndexColumns | None = None,
        rows: npt.NDArray[np.int64] | None = None,
        verify_checksums: bool = False,
    ) -> None:
        self._store = store
        self._manifest = manifest
        self._index = index if index is not None else IndexColumns(store, manifest)
        self._rows = rows
        self._verify = verify_checksums
        self._reader = SampleReader(store, manifest, self._index, verify=verify_checksums)
        self._len = manifest.num_samples if rows is None else len(rows)

    def __reduce__(self) -> tuple[Any, ...]:
        # For worker processes: the store and manifest travel, the index is read again
        # lazily there (its cache and lock stay behind).
        return (_rebuild, (self._store, self._manifest, self._rows, self._verify))

    @classmethod
    def open(
        cls,
        uri: str | os.PathLike[str],
        *,
        version: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        verify_checksums: bool = False,
        io: IOOptions | None = None,
        cache: BlockCache | Literal["default"] | None = "default",
    ) -> Dataset:
        """Open a dataset, reading only its manifest.

        Args:
            uri: dataset root: a local path, `memory://…`, `s3://…`, `gs://…`, `az://…`,
                or `catalog:name` (a dataset registered in the catalog, see
                `ferroload_catalog.Catalog`; it opens with the entry's stored storage
                options, `storage_options` going over them).
            version: the version to open (default: the latest).
            storage_options: backend options for obstore (credentials, endpoint, …).
            verify_checksums: check every payload read against its recorded xxh3-64.
            io: concurrency, retries and timeouts of object-store requests.
            cache: the block cache of an object store's payload reads (`"default"`:
                `FERROLOAD_CACHE_DIR`, else the user cache directory; None: no cache);
                see `ferroload_store.open_store`.

        Raises:
            DatasetNotFoundError: if nothing is at `uri` (`NotADatasetError` if something
                that is not a dataset is).
            VersionNotFoundError: if `version` does not exist.
            UnsupportedFormatVersionError: if the dataset needs a newer ferroload.
        """
        if isinstance(uri, str):  # `catalog:name` and the other schemes plugins resolve
            uri, storage_options = resolve_uri(uri, storage_options)
        store = open_store(uri, storage_options=storage_options, io=io, cache=cache)
        return cls(store, read_manifest(store, version), verify_checksums=verify_checksums)

    # ----------------------------------------------------------------- description

    @property
    def uri(self) -> str:
        """The dataset root."""
        return self._store.uri

    @property
    def store(self) -> Store:
        """The storage backend (its `stats` count requests and bytes)."""
        return self._store

    @property
    def manifest(self) -> Manifest:
        """The manifest of the opened version."""
        return self._manifest

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._manifest.name

    @property
    def version(self) -> int:
        """The opened version."""
        return self._manifest.version

    @property
    def modalities(self) -> tuple[Modality, ...]:
        """Modalities, in column order: the declared ones, then those of each layer."""
        return tuple(self._reader.modalities.values())

    @property
    def metadata_columns(self) -> tuple[str, ...]:
        """Names of the metadata columns: the base ones, then those of each layer."""
        return self._reader.meta_names

    @property
    def columns(self) -> tuple[str, ...]:
        """What a sample dict holds: `sample_id`, the modalities, the metadata columns
        (layer columns included)."""
        return self._reader.all_columns

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the Parquet index (sample_id, shard, modalities, metadata),
        followed by each layer's modalities and metadata columns."""
        return self._index.schema

    @property
    def layers(self) -> tuple[LayerInfo, ...]:
        """The enrichment layers of this version (see `LayerWriter`, docs/format.md §10)."""
        return self._manifest.layers

    @property
    def num_samples(self) -> int:
        """Samples in this dataset or view."""
        return len(self)

    @property
    def num_shards(self) -> int:
        """Tar shards of the opened version (base shards: the codes of `shard_of()`;
        layer shards are not counted). Reads no shard list."""
        return self._manifest.num_shards

    @property
    def is_view(self) -> bool:
        """True for a subset of a version rather than the whole of it."""
        return self._rows is not None

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        view = ", view" if self.is_view else ""
        mods = [m.name for m in self.modalities]
        return (
            f"Dataset({self.uri!r}, name={self.name!r}, version={self.version}, "
            f"samples={len(self)}, modalities={mods}{view})"
        )

    # ----------------------------------------------------------------- positions

    def _row(self, i: IndexLike) -> int:
        return row_at(i, self._len, self._rows, self.uri)

    def _rows_of(self, indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return rows_at(indices, self._len, self._rows, self.uri)

    # ----------------------------------------------------------------- reading

    @overload
    def __getitem__(self, i: IndexLike) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Dataset: ...

    def __getitem__(self, i: IndexLike | slice) -> dict[str, Any] | Dataset:
        """The full sample at position `i` (a dict), or a view for a slice."""
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        return self.get(i)

    def get(self, i: IndexLike, columns: Sequence[str] | str | None = None) -> dict[str, Any]:
        """One sample, optionally only some of its columns.

        Args:
            i: position (negative counts from the end).
            columns: modality and metadata names to return (default: all, plus
                `sample_id`). Modalities come back as `bytes`, or None when the sample
                lacks them.

        Raises:
            SampleIndexError: if `i` is out of range.
            ColumnNotFoundError: for an unknown column.
            ShardNotFoundError, ShardTruncatedError: if the shard is missing or short.
            ChecksumMismatchError: with `verify_checksums`, if the bytes are damaged.
        """
        return self._reader.sample(self._row(i), columns)

    def get_many(
        self, indices: npt.ArrayLike, columns: Sequence[str] | str | None = None
    ) -> list[dict[str, Any]]:
        """Several samples, with the reads of each shard coalesced into few requests.

        Args:
            indices: positions, in any order, repeats allowed.
            columns: as in `get`.

        Returns:
            One dict per position, in the order given.
        """
        return self._reader.samples(self._rows_of(indices), columns)

    def read(
        self,
        indices: npt.ArrayLike,
        modality: str,
        *,
        copy: bool = True,
        locations: ModalityArrays | None = None,
    ) -> list[bytes | memoryview | None]:
        """The payloads of one modality at several positions, reads coalesced per shard
        region (the column-wise form of `get_many`, for loaders).

        Args:
            indices: positions.
            modality: the modality to read.
            copy: `False` returns read-only memoryviews into the store's buffers (for a
                local dataset, its memory-mapped shards) instead of copying each payload.
            locations: what `locate(modality, indices)` returned for these positions,
                when the caller has it already (a loader locates many batches at once):
                the index is not asked again.

        Returns:
            One payload per position, None where the sample lacks the modality.

        Raises:
            ColumnNotFoundError: for an unknown modality.
            ShardNotFoundError, ShardTruncatedError, ChecksumMismatchError: as `get`.
        """
        self._reader.check_modality(modality)
        rows = self._rows_of(indices)
        return self._reader.read(rows, modality, copy=copy, locations=locations)

    def column(self, name: str, indices: npt.ArrayLike | None = None) -> pa.Array:
        """An index column (`sample_id`, a metadata column, or a modality's location
        struct), whole or at some positions.

        At some positions only the row groups holding them are read (and kept in the
        index's bounded cache): what a loader asks for each batch. Whole, the column is
        read at once and kept.

        Raises:
            ColumnNotFoundError: for an unknown column.
            SampleIndexError: for a position out of range.
        """
        if indices is None:
            arr = self._index.column(name)
            return arr if self._rows is None else arr.take(arrow_array(self._rows))
        return self._index.take([name], self._rows_of(indices))[name]

    def preload(self, columns: Sequence[str]) -> None:
        """Read these index columns (and the shard of every row) now, together: one
        ranged read per index part instead of one per column on first use. Loaders call
        it before their first batch; it matters on object stores, where every read is a
        round trip.

        Raises:
            ColumnNotFoundError: for an unknown column.
        """
        self._index.columns(list(dict.fromkeys(columns)))
        self._index.shard_codes()

    def present(self, modality: str) -> npt.NDArray[np.bool_]:
        """For every position, whether the sample has `modality`."""
        mask = self._index.modality(modality).present
        return mask if self._rows is None else mask[self._rows]

    def sizes(self, modality: str) -> npt.NDArray[np.int64]:
        """For every position, the stored bytes of `modality` (0 where absent)."""
        lengths = self._index.modality(modality).length
        return lengths if self._rows is None else lengths[self._rows]

    def offsets(self, modality: str) -> npt.NDArray[np.int64]:
        """For every position, where `modality`'s bytes start in its shard (with `sizes`
        and `shard_of`, the byte range a loader's read-ahead plans with)."""
        offsets = self._index.modality(modality).offset
        return offsets if self._rows is None else offsets[self._rows]

    def locate(self, modality: str, indices: npt.ArrayLike) -> ModalityArrays:
        """Where `modality`'s payloads of some positions live: `present`, `shard` (codes
        for `shard_ref`, -1 where a layer stored none), `offset`, `length` and `checksum`,
        one entry per position, in the order given. What a loader plans its reads with.

        Raises:
            ColumnNotFoundError: for an unknown modality.
            SampleIndexError: for a position out of range.
        """
        if modality not in self._reader.modalities:
            self._index.modality(modality)  # raises ColumnNotFoundError
        return self._index.locate(modality, self._rows_of(indices))

    def all_present(self, modality: str) -> bool:
        """Whether every sample of this dataset or view has `modality`.

        For a whole version the index parts' statistics answer without reading rows
        (row groups they leave open are read); a view not answered that way reads its
        rows' locations in bounded chunks.

        Raises:
            ColumnNotFoundError: for an unknown modality.

        Examples:
            >>> from ferroload_format import Writer
            >>> with Writer("memory://docs/all-present-example", "demo") as w:
            ...     w.declare("text", "txt")
            ...     for i in range(4):
            ...         w.add(f"s{i}", {"text": b"hi"} if i % 2 else None)
            >>> ds = Dataset.open("memory://docs/all-present-example")
            >>> ds.all_present("text"), ds.take([1, 3]).all_present("text")
            (False, True)
        """
        if modality not in self._reader.modalities:
            self._index.modality(modality)  # raises ColumnNotFoundError
        if self._index.all_present(modality):
            return True
        return self._rows is not None and all_present_at(self._index, modality, self._rows)

    def shard_runs(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """The positions split into runs of one base shard: (`starts`, `codes`), the
        first position of each run and its shard's code (for `shard_ref`). A shard may
        have more than one run (rows of two appends interleaved by a view's order).
        What a streaming order visits shard by shard.

        Computed per row group, not from every row: a row group whose Parquet
        statistics name one shard is one run unread (the Writer fills shards in row
        order); only row groups spanning shards read their (dictionary-encoded) shard
        column. A view maps its positions onto those runs (O(its length)).
        """
        starts, codes = self._index.shard_runs()
        return (starts, codes) if self._rows is None else view_shard_runs(starts, codes, self._rows)

    def shard_ref(self, code: int) -> tuple[str, int, str]:
        """(path, size, cache version) of shard `code` (a value of `shard_of`, of the
        base or of a layer modality): what a block cache needs to know about it, without
        a `HEAD`.

        Raises:
            SampleIndexError: for a code that names no shard (such as -1).
        """
        return self._reader.shard_ref(code)

    def shard_of(self, modality: str | None = None) -> npt.NDArray[np.int32]:
        """For every position, the code of the shard holding it (for `shard_ref`).

        Args:
            modality: None: the shard of the sample's base payloads, an index into
                `manifest.shards`. A modality: the shard of that modality's payload; for
                a layer modality, an index into the base shards followed by each layer's
                shards, and -1 where the layer stored no payload.

        Raises:
            ColumnNotFoundError: for an unknown modality.
        """
        if modality is None:
            codes = self._index.shard_codes()
        else:
            codes = self._index.modality(modality).shard
        return codes if self._rows is None else codes[self._rows]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every sample, in order, read in coalesced chunks."""
        for start in range(0, len(self), _ITER_CHUNK):
            yield from self.get_many(np.arange(start, min(start + _ITER_CHUNK, len(self))))

    # ----------------------------------------------------------------- tables and views

    def to_table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Index columns as an Arrow table (default: every column of the index).

        Modalities appear as their location structs (present, offset, length, checksum),
        not as bytes.
        """
        names = list(self._index.column_names if columns is None else columns)
        arrays = self._index.columns(names)
        schema = pa.schema([self.schema.field(n) for n in names])
        table = pa.Table.from_arrays([arrays[n] for n in names], schema=schema)
        return table if self._rows is None else table.take(arrow_array(self._rows))

    def take(self, indices: npt.ArrayLike) -> Dataset:
        """A view of the samples at `indices` (in that order)."""
        return Dataset(
            self._store,
            self._manifest,
            index=self._index,
            rows=self._rows_of(indices),
            verify_checksums=self._verify,
        )

    def map(
        self,
        fn: Callable[[dict[str, list[Any]]], Mapping[str, Any]],
        *,
        inputs: Sequence[str],
        outputs: Mapping[str, Any],
        layer: str,
        batch_size: int = 64,
        executor: Any = "auto",
        version: str | None = None,
        on_error: Any = "raise",
        partition_size: int | None = None,
        overwrite: bool = False,
        progress: ProgressArg = None,
    ) -> Dataset:
        """Add `fn`'s outputs to this dataset as an additive, idempotent, resumable layer
        (see [`map_dataset`][ferroload_map.map_dataset], which also returns a report).

        Raises:
            ImportError: when the ferroload-map package is not installed (it registers
                itself as the `dataset.map` entry point of `ferroload.plugins`).
        """
        map_dataset = plugin("dataset.map", needed_by="Dataset.map")
        out: Dataset = map_dataset(
            self, fn, inputs=inputs, outputs=outputs, layer=layer, batch_size=batch_size,
            executor=executor, version=version, on_error=on_error,
            partition_size=partition_size, overwrite=overwrite, progress=progress,
        )  # fmt: skip
        return out

    @overload
    def subset(
        self, where: str, *, return_indices: Literal[True], timeout: float = ...
    ) -> npt.NDArray[np.int64]: ...
    @overload
    def subset(
        self, where: str, *, return_indices: Literal[False] = ..., timeout: float = ...
    ) -> Dataset: ...

    def subset(
        self, where: str, *, return_indices: bool = False, timeout: float = 30.0
    ) -> Dataset | npt.NDArray[np.int64]:
        """Samples matching a SQL WHERE clause, evaluated by DuckDB over the index.

        The clause sees one table, `samples`, with the index columns (`sample_id`,
        `shard`, one struct per modality with `present`/`offset`/`length`/`checksum`,
        and the metadata columns), layer columns joined to their rows by position (null
        where a layer does not cover a row). It can read nothing else (docs/format.md,
        "The query sandbox"): no files, no temp directory, no settings, secrets or
        extensions; the clause is one expression, and it runs for at most `timeout` seconds.

        Args:
            where: the condition, e.g. `"label = 3 AND caption LIKE '%cat%'"`.
            return_indices: return positions (int64, ascending) instead of a view.
            timeout: seconds DuckDB may take before it is interrupted.

        Raises:
            UnsafeQueryError: if the clause tries to read files, settings or tables other
                than `samples`, or to be more than one condition.
            QueryTimeoutError: if it runs longer than `timeout`.
            QueryError: if DuckDB cannot run the clause (syntax, unknown column, …).

        Examples:
            >>> from ferroload_format import Writer
            >>> with Writer("memory://docs/subset-example", "demo") as w:
            ...     for i in range(6):
            ...         w.add(f"s{i}", None, {"label": i % 3, "caption": f"cat {i}"})
            >>> ds = Dataset.open("memory://docs/subset-example")
            >>> ds.subset("label = 2 AND caption LIKE 'cat%'", return_indices=True).tolist()
            [2, 5]
        """
        from ferroload_format._query import where_positions

        positions = where_positions(self._index, self._rows, where, uri=self.uri, timeout=timeout)
        return positions if return_indices else self.take(positions)

    def copy_to(
        self,
        uri: str | os.PathLike[str],
        *,
        name: str | None = None,
        shard_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        mode: WriteMode = "create",
        progress: ProgressArg = None,
    ) -> Dataset:
        """Materialize this dataset or view as a new dataset at `uri`, in this order.

        The samples' payloads are copied byte for byte into new shards and their metadata
        keeps its Arrow types; the result no longer depends on the source. Layer columns
        (see `layers`) are not copied: a layer belongs to its base version. A view with no
        sample (a WHERE that matched nothing) makes an empty dataset (0 samples).

        Args:
            uri: where to write (any URI `Writer` takes).
            name: the new dataset's name (default: the source's; when appending or
                overwriting, the destination's).
            shard_size: target tar shard size in bytes (default: `Writer`'s, 256 MiB).
            storage_options: backend options for `uri`.
            mode: what to do with a dataset already at `uri`: `"create"` (the default)
                refuses it, `"append"` adds these samples to it (the schemas must agree),
                `"overwrite"` replaces its content in a new version (history kept; see
                `Writer`).
            progress: `True` draws a bar of samples copied, `False` nothing, None (the
                default) a bar when standard error is a terminal; a callable is called
                as `progress(samples_done, total)` (see `ferroload_core.progress_reporter`).

        Returns:
            The new dataset, opened at its committed version.

        Raises:
            DatasetExistsError: `mode="create"` and a dataset is already at `uri`.
            DuplicateSampleError: a view that repeats a sample (ids must stay unique), or
                an append of samples the destination already has.
            SchemaConflictError: an append to a dataset with another schema.

        Examples:
            >>> from ferroload_format import Writer
            >>> with Writer("memory://docs/copy-src", "demo") as w:
            ...     for i in range(6):
            ...         w.add(f"s{i}", None, {"label": i % 3})
            >>> ds = Dataset.open("memory://docs/copy-src")
            >>> small = ds.subset("label = 1").copy_to("memory://docs/copy-dst")
            >>> small.column("sample_id").to_pylist(), small.version
            (['s1', 's4'], 1)
        """
        from ferroload_format._copy import copy_dataset
        from ferroload_format._writer import DEFAULT_SHARD_SIZE

        version = copy_dataset(
            self, uri, name=name, shard_size=shard_size or DEFAULT_SHARD_SIZE,
            storage_options=storage_options, mode=mode, progress=progress,
        )  # fmt: skip
        return Dataset.open(uri, version=version, storage_options=storage_options)

    def sql(self, query: str, *, timeout: float = 30.0) -> pa.Table:
        """Run one SELECT over the index and return its result as an Arrow table.

        The query sees one table, `samples`, as `subset` does (the index columns, layer
        columns joined by position; for a view, only its rows), in the same sandbox: no
        files, no network, no settings, no table but `samples`, a single SELECT, at most
        `timeout` seconds.

        Args:
            query: e.g. `"SELECT label, count(*) AS n FROM samples GROUP BY label"`.
            timeout: seconds DuckDB may take before it is interrupted.

        Raises:
            UnsafeQueryError: not a single SELECT, or it reaches for files, settings or
                tables other than `samples`.
            QueryTimeoutError: it runs longer than `timeout`.
            QueryError: DuckDB cannot run the query (syntax, unknown column, …).

        Examples:
            >>> from ferroload_format import Writer
            >>> with Writer("memory://docs/sql-example", "demo") as w:
            ...     for i in range(6):
            ...         w.add(f"s{i}", None, {"label": i % 3})
            >>> ds = Dataset.open("memory://docs/sql-example")
            >>> ds.sql("SELECT label, count(*) AS n FROM samples GROUP BY 1 ORDER BY 1").to_pylist()
            [{'label': 0, 'n': 2}, {'label': 1, 'n': 2}, {'label': 2, 'n': 2}]
        """
        from ferroload_format._query import select

        return select(self._index, self._rows, query, uri=self.uri, timeout=timeout)

    # ----------------------------------------------------------------- history and health

    def versions(self) -> list[VersionInfo]:
        """Every committed version of the dataset, oldest first."""
        return version_history(self._store, self._manifest)

    def compact(self) -> Dataset:
        """Merge the index parts of this version into one, as a new committed version.

        After many appends a version has several index parts (an append merges the
        newest ones into its own, so about log2 N of them remain; docs/format.md §7.6),
        and every first batch or `subset` reads each of their footers. `compact` writes the same rows, in
        the same order and with the same types, as one part, and commits it (operation
        `compact`) on top of this version. The shards and layers are kept as they are,
        in the same order; the shards' records move into one shard list (all inline when
        there are at most 256; docs/format.md §6.2), and a version with one part but
        several shard lists is compacted for them alone. The old parts leave the `index/part-*.parquet` glob (readers of older versions
        still find them) and are deleted by `gc` once no kept version references them.
        A writer appending at the same time either lands on top of the compacted version
        or, if it committed first, makes `compact` fail: run it again.

        Returns:
            The compacted version (this dataset itself when it has one part and at most
            one shard list already).

        Raises:
            CommitConflictError: a version was committed after this one; nothing of the
                compaction was committed.

        Examples:
            >>> from ferroload_format import Writer
            >>> for k, n in enumerate([9, 3, 1]):  # each append smaller: no merging
            ...     with Writer("memory://docs/compact-example", "demo") as w:
            ...         w.declare("text", "txt")
            ...         for i in range(n):
            ...             w.add(f"s{k}-{i}", {"text": b"hello"}, {"label": i})
            >>> ds = Dataset.open("memory://docs/compact-example")
            >>> small = ds.compact()
            >>> len(ds.manifest.index_parts), len(small.manifest.index_parts), len(small)
            (3, 1, 13)
        """
        from ferroload_format._compact import compact_store

        manifest = compact_store(self._store, self._manifest)
        if manifest is self._manifest:
            return self
        return Dataset(self._store, manifest, verify_checksums=self._verify)

    def verify(
        self,
        *,
        raise_on_error: bool = False,
        progress: ProgressArg = None,
    ) -> VerifyReport:
        """Check every shard and payload of this version against the index and checksums.

        Args:
            raise_on_error: raise `DatasetDamagedError` (listing the problems) instead of
                returning a report with problems.
            progress: `True` draws a bar of shards checked (layer shards included),
                `False` nothing, None (the default) a bar when standard error is a
                terminal; a callable is called as `progress(shards_done, total)` before
                each shard and once at the end.

        Returns:
            A report: `ok`, the problems found (each naming shard, sample and column),
            and how much was checked.
        """
        from ferroload_format._verify import verify_dataset

        report = verify_dataset(self._store, self._manifest, self._index, progress)
        if raise_on_error:
            report.raise_for_problems()
        return report


def _rebuild(
    store: Store, manifest: Manifest, rows: npt.NDArray[np.int64] | None, verify: bool
) -> Dataset:
    return Dataset(store, manifest, rows=rows, verify_checksums=verify)
