"""How a version (or a view of one) is read: `DatasetBase` holds a `Dataset`'s state and its
methods that read samples, columns and payload locations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._index_arrays import ModalityArrays, arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import Manifest
from ferroload_format._positions import IndexLike, all_present_at, row_at, rows_at, view_shard_runs
from ferroload_format._reads import SampleReader
from ferroload_format._records import LayerInfo, Modality
from ferroload_format._rs011 import is_view
from ferroload_store import Store


class DatasetBase:
    """The state of a `Dataset` and its reading methods (see `Dataset`, the public class)."""

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
    def format(self) -> str:
        """What wrote the opened version's layout: `"ferroload"`, or `"ferroload-rs 0.1.1"`
        for a dataset of the Rust original read as it is (readable, not writable until
        `ferroload upgrade`; docs/format.md §11)."""
        return "ferroload-rs 0.1.1" if is_view(self._manifest) else "ferroload"

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

    # ----------------------------------------------------------------- positions

    def _row(self, i: IndexLike) -> int:
        return row_at(i, self._len, self._rows, self.uri)

    def _rows_of(self, indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return rows_at(indices, self._len, self._rows, self.uri)

    # ----------------------------------------------------------------- reading

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
            >>> from ferroload_format import Dataset, Writer
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
