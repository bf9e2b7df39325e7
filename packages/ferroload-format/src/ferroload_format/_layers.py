"""`LayerWriter`: stages an enrichment layer's partitions, then commits it (docs/format.md §10).

A layer adds metadata columns and/or modalities to the rows of one version without
rewriting anything of it. `LayerWriter.write_partition` stages one partition (its tar
shard, then its Parquet rows: the Parquet's presence marks the partition done; see
`_layer_staging`); `LayerWriter.commit` merges the partitions into the layer's index part
and commits a new version whose manifest lists the layer (`_layer_commit`). The rules the
partitions follow are `_layer_parts`'; the base version's sample ids, `_layer_ids`'.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._dataset import Dataset
from ferroload_format._errors import InvalidLayerError
from ferroload_format._index_arrays import arrow_array
from ferroload_format._layer_commit import (
    check_existing,
    check_names,
    commit_layer,
    is_mine,
    staged_partitions,
)
from ferroload_format._layer_ids import base_ids, ids_at, kept_ids
from ferroload_format._layer_parts import (
    IDENTITY_RE,
    LayerSchema,
    check_columns,
    check_layer_name,
    check_modalities,
)
from ferroload_format._layer_staging import stage_partition
from ferroload_format._manifest import Manifest
from ferroload_format._records import Modality
from ferroload_format._rs011 import refuse_write
from ferroload_format._versions import read_manifest
from ferroload_store import Store


class LayerWriter:
    """Stages the partitions of one layer and commits them as a new version.

    A layer adds metadata columns and/or modalities to every row of the version `ds`
    opened (its *base version*), leaving everything already committed untouched. The
    work is cut into partitions of rows; each `write_partition` call stages one, and can
    run in any process or machine (a `LayerWriter` pickles). A partition is staged
    atomically, so a run that was killed resumes with the partitions `staged()` does not
    list. `commit()` merges the partitions into the layer's index part and commits it.
    Nothing is visible to readers before that.

    Args:
        ds: the dataset (version) the layer is computed from; row positions given to
            `write_partition` are positions in this version (not in a view).
        name: the layer's name (lowercase letters, digits and `_`, starting with a letter).
        identity: what computes the layer (for example a hash of the function, its inputs
            and the base version); the same identity means the same layer, so a
            committed identity makes `commit()` a no-op. Letters, digits, `_ = -`.
        columns: the layer's metadata columns and their types (ferroload metadata types:
            bool, int64, float64, string, binary, lists and structs of them).
        modalities: the layer's modalities (payloads stored in the layer's own shards).
        overwrite: replace a committed layer of the same name but another identity
            (older versions keep the old one).

    Raises:
        InvalidLayerError: for a bad layer name or identity.
        InvalidModalityError: for a bad modality.
        SchemaConflictError: for a column or modality whose name the dataset (or another
            layer) already uses, or a type ferroload cannot store.
        LayerExistsError: if the latest version has a layer `name` of another identity
            and `overwrite` is False.

    Examples:
        >>> import numpy as np, pyarrow as pa
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/layer-example", "demo") as w:
        ...     for i in range(4):
        ...         w.add(f"s{i}", None, {"label": i})
        >>> ds = Dataset.open("memory://docs/layer-example")
        >>> lw = LayerWriter(ds, "stats", identity="v1", columns={"double": pa.int64()})
        >>> lw.write_partition(0, np.array([0, 1]), {"double": [0, 2]}, {})
        >>> lw.write_partition(1, np.array([2, 3]), {"double": [4, 6]}, {})
        >>> ds2 = lw.commit(2)
        >>> ds2.column("double").to_pylist(), ds2.layers[0].name
        ([0, 2, 4, 6], 'stats')
    """

    _base: Manifest | None

    def __init__(
        self,
        ds: Dataset,
        name: str,
        *,
        identity: str,
        columns: Mapping[str, pa.DataType],
        modalities: Sequence[Modality] = (),
        overwrite: bool = False,
    ) -> None:
        if not isinstance(ds, Dataset):
            raise TypeError(f"LayerWriter needs a Dataset, got {type(ds).__name__}")
        uri = ds.uri
        check_layer_name(name, uri)
        if not isinstance(identity, str) or not IDENTITY_RE.fullmatch(identity):
            raise InvalidLayerError(
                f"identity {identity!r} of layer {name!r} of {uri} is invalid: use 1 to 128 "
                "letters, digits and _ = - (for example a sha256 hex digest)",
                uri=uri,
                layer=name,
            )
        self._setup(
            ds.store,
            ds.version,
            name,
            identity,
            check_columns(columns, name, uri),
            check_modalities(modalities, name, uri),
            bool(overwrite),
        )
        self._base = ds.manifest
        refuse_write(ds.manifest, ds.uri, "adding a layer (map)")
        check_names(self._schema, ds.manifest)
        latest = read_manifest(self._store)
        check_existing(self._schema, self.identity, self.overwrite, latest)
        if latest.version != ds.version:
            check_names(self._schema, latest)

    def _setup(
        self,
        store: Store,
        version: int,
        name: str,
        identity: str,
        columns: tuple[pa.Field, ...],
        modalities: tuple[Modality, ...],
        overwrite: bool,
    ) -> None:
        self._schema = LayerSchema(store.uri, name, columns, modalities, version)
        self._store = store
        self._version = version
        self.name = name
        self.identity = identity
        self.columns = columns
        self.modalities = modalities
        self.overwrite = overwrite
        self._base = None
        self._ids: pa.Array | None = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # The store pickles as its URI and storage options; the base manifest and sample
        # ids are read again, lazily, where the writer lands.
        return (
            _rebuild,
            (
                self._store,
                self._version,
                self.name,
                self.identity,
                self.columns,
                self.modalities,
                self.overwrite,
            ),
        )

    # ----------------------------------------------------------------- description

    @property
    def uri(self) -> str:
        """The dataset root."""
        return self._store.uri

    @property
    def base_version(self) -> int:
        """The version whose rows the layer covers."""
        return self._version

    @property
    def committed(self) -> bool:
        """True when the latest version has layer `name` with this identity (re-read)."""
        return is_mine(read_manifest(self._store), self.name, self.identity)

    def __repr__(self) -> str:
        return (
            f"LayerWriter({self.uri!r}, {self.name!r}, identity={self.identity!r}, "
            f"base_version={self._version})"
        )

    def _manifest(self) -> Manifest:
        with self._lock:
            if self._base is None:
                self._base = read_manifest(self._store, self._version)
            return self._base

    def _sample_ids(self) -> pa.Array:
        """Sample ids of the base version (read once per process)."""
        if self._ids is None:
            self._ids = base_ids(self._store, self._manifest())
        return self._ids

    def _ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Sample ids of some rows of the base version: from the whole column when this
        process read it already, else from the row groups holding them."""
        if self._ids is None:
            self._ids = kept_ids(self._store, self._manifest())
            if self._ids is None:
                return ids_at(self._store, self._manifest(), rows)
        return list(self._ids.take(arrow_array(rows)).to_pylist())

    # ----------------------------------------------------------------- checks

    def _check_partition(self, k: object) -> int:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise self._schema.error(
                InvalidLayerError, f"partition numbers are ints >= 0, got {k!r}", partition=k
            )
        return int(k)

    # ----------------------------------------------------------------- staging

    def staged(self) -> set[int]:
        """Partition numbers already staged (done) under this identity."""
        return staged_partitions(self._store, self.name, self.identity)

    def write_partition(
        self,
        k: int,
        rows: npt.NDArray[np.int64],
        values: Mapping[str, Sequence[Any]],
        payloads: Mapping[str, Sequence[bytes | bytearray | memoryview | None]],
    ) -> None:
        """Stage partition `k`: its shard (if it has payloads), then its rows.

        Rewriting a staged partition is harmless (the last write wins; its earlier shard
        becomes a leftover for `gc`).

        Args:
            k: the partition number (0 .. num_partitions - 1).
            rows: ascending row positions of the base version the partition covers.
            values: for every layer metadata column, one value per row (None: null), or
                an Arrow array of the column's type (taken as it is).
            payloads: for every layer modality, one bytes-like or None per row.

        Raises:
            InvalidLayerError: for a bad partition number, rows out of order or range, or
                value lists whose length is not `len(rows)`.
            SchemaConflictError: for a missing or unknown column, or a value that does not
                fit its column's type (naming the column and sample).
            InvalidPayloadError: for a payload that is not bytes-like.
            InvalidSampleIdError: when a member name `<sample_id>.<modality>.<ext>` would
                not fit a tar header.
        """
        k = self._check_partition(k)
        rows_arr = self._schema.check_rows(k, rows, self._manifest().num_samples)
        ids = self._ids_at(rows_arr) if len(rows_arr) else []
        stage_partition(
            self._store, self._schema, self.identity, k, rows_arr, ids, values, payloads
        )

    # ----------------------------------------------------------------- commit

    def commit(self, num_partitions: int) -> Dataset:
        """Merge partitions 0 .. `num_partitions` - 1 into the layer and commit it as a
        new version (the layer's index part then covers every row of the base version;
        rows no partition covered read as null / absent).

        A no-op when the latest version already has this layer with this identity (it
        was committed before, or by a concurrent committer).

        Returns:
            The dataset at the version that has the layer.

        Raises:
            IncompleteLayerError: if some of the partitions are not staged (it names them).
            InvalidLayerError: if two partitions cover the same row, or a partition was
                computed on other rows than the base version's.
            LayerExistsError: if a layer of this name but another identity was committed
                meanwhile (and not `overwrite`).
            SchemaConflictError: if a layer committed meanwhile took one of the names.
            CommitConflictError: if other writers kept committing first.
        """
        if type(num_partitions) is not int or num_partitions < 0:
            raise self._schema.error(
                InvalidLayerError, f"num_partitions must be an int >= 0, got {num_partitions!r}"
            )
        manifest = commit_layer(
            self._store, self._schema, self.identity, num_partitions,
            overwrite=self.overwrite, base=self._manifest, sample_ids=self._sample_ids,
        )  # fmt: skip
        return Dataset(self._store, manifest)


def _rebuild(
    store: Store,
    version: int,
    name: str,
    identity: str,
    columns: tuple[pa.Field, ...],
    modalities: tuple[Modality, ...],
    overwrite: bool,
) -> LayerWriter:
    writer = LayerWriter.__new__(LayerWriter)
    writer._setup(store, version, name, identity, columns, modalities, overwrite)
    return writer
