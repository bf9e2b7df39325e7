"""`Dataset`: opening a version, views of it (slices, `take`, `subset`), SQL, and the
operations on a whole version (map, copy, compact, verify, history)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_core import ProgressArg
from ferroload_format._dataset_base import DatasetBase
from ferroload_format._errors import CommitConflictError
from ferroload_format._history import VersionInfo, version_history
from ferroload_format._manifest import Manifest
from ferroload_format._plugins import plugin, resolve_uri
from ferroload_format._positions import IndexLike
from ferroload_format._versions import latest_version, read_manifest
from ferroload_store import BlockCache, IOOptions, Store, open_store

if TYPE_CHECKING:
    from ferroload_format._verify_report import VerifyReport
    from ferroload_format._write_modes import WriteMode

_ITER_CHUNK = 256


#: What Hugging Face `datasets` (or pandas) users call, and ferroload's way to do it.
_ELSEWHERE = {
    "to_pandas": "use ds.to_table().to_pandas()",
    "filter": 'use ds.subset("label = 3"), a SQL WHERE over the index',
    "select": "use ds.take(indices)",
    "shuffle": "use ds.take(numpy.random.default_rng(seed).permutation(len(ds))), or "
    "make_loader(ds, seed=...) for a training order",
    "select_columns": "use ds.to_table(columns), or ds.get(i, columns)",
    "remove_columns": "use ds.to_table(columns) with the columns to keep",
    "column_names": "use ds.columns",
    "num_rows": "use len(ds)",
    "features": "use ds.schema (Arrow types) and ds.modalities",
    "train_test_split": "use ds.subset(\"split = 'train'\") on a split column, or ds.take",
    "set_format": "the loaders choose the output: make_loader(ds, out='torch')",
    "with_format": "the loaders choose the output: make_loader(ds, out='torch')",
}


class Dataset(DatasetBase):
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

    def __repr__(self) -> str:
        view = ", view" if self.is_view else ""
        mods = [m.name for m in self.modalities]
        return (
            f"Dataset({self.uri!r}, name={self.name!r}, version={self.version}, "
            f"samples={len(self)}, modalities={mods}{view})"
        )

    @overload
    def __getitem__(self, i: IndexLike) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Dataset: ...

    def __getitem__(self, i: IndexLike | slice) -> dict[str, Any] | Dataset:
        """The full sample at position `i` (a dict), or a view for a slice.

        Raises:
            TypeError: for a column name (`ds["label"]`, as Hugging Face `datasets`
                reads a column), naming `column` and `to_table`.
        """
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        key: object = i  # typed as a position; a user may pass anything
        if isinstance(key, str):
            raise TypeError(
                f"ds[{i!r}]: a ferroload Dataset is indexed by sample position (ds[0], "
                f"ds[10:20]); for a column use ds.column({i!r}) (an Arrow array) or "
                f"ds.to_table([{i!r}])"
            )
        return self.get(i)

    if not TYPE_CHECKING:  # type checkers keep flagging unknown attributes

        def __getattr__(self, name: str) -> Any:
            """Only for a missing attribute: one that Hugging Face `datasets` or pandas
            users reach for gets an error that names ferroload's way."""
            hint = _ELSEWHERE.get(name)
            if hint is None:
                raise AttributeError(f"'Dataset' object has no attribute {name!r}", name=name)
            raise AttributeError(
                f"a ferroload Dataset has no {name!r} (as Hugging Face datasets has); {hint}",
                name=name,
            )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every sample, in order, read in coalesced chunks."""
        for start in range(0, len(self), _ITER_CHUNK):
            yield from self.get_many(np.arange(start, min(start + _ITER_CHUNK, len(self))))

    def take(self, indices: npt.ArrayLike) -> Self:
        """A view of the samples at `indices` (in that order)."""
        return type(self)(
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
        several shard lists is compacted for them alone. The new part lives outside the
        `index/part-*.parquet` glob, which keeps one file per version that added rows
        (the same rows); the old parts stay for readers of older versions and are deleted
        by `gc` once no kept version references them.
        A writer appending at the same time either lands on top of the compacted version
        or, if it committed first, makes `compact` fail: open the dataset again and
        compact that.

        Returns:
            The compacted version (this dataset itself when it has one part and at most
            one shard list already).

        Raises:
            CommitConflictError: this is not the latest version (a dataset opened with
                `version=` an older one, or one committed on since it was opened: compact
                works on the latest version, so open the dataset again without
                `version=`), or a version was committed while `compact` ran; nothing of
                the compaction was committed.

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

        latest = latest_version(self._store)
        if latest != self._manifest.version:
            raise CommitConflictError(
                f"{self.uri} is open at version {self._manifest.version}, but version "
                f"{latest} is the latest: compact works on the latest version; open the "
                "dataset again, without version=, and compact that",
                uri=self.uri,
            )
        manifest = compact_store(self._store, self._manifest)
        if manifest is self._manifest:
            return self
        return type(self)(self._store, manifest, verify_checksums=self._verify)

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
