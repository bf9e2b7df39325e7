"""Enrichment layers (docs/format.md §10): stage partitions of a layer, then commit it.

A layer adds metadata columns and/or modalities to the rows of one version without
rewriting anything of it. `LayerWriter.write_partition` stages one partition (its tar
shard, then its Parquet rows: the Parquet's presence marks the partition done);
`LayerWriter.commit` merges the partitions into the layer's index part and commits a new
version whose manifest lists the layer.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ferroload_format import _commit
from ferroload_format._commit import (
    MAX_COMMIT_ATTEMPTS,
    claim_version,
    ensure_published,
    replaced_before,
)
from ferroload_format._dataset import Dataset
from ferroload_format._errors import (
    CommitConflictError,
    IncompleteLayerError,
    InvalidLayerError,
    LayerExistsError,
    SchemaConflictError,
)
from ferroload_format._index import MODALITY_TYPE, write_part
from ferroload_format._index_arrays import arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._layer_parts import (
    IDENTITY_RE,
    PARTITION_META,
    PARTITION_RE,
    LayerSchema,
    check_columns,
    check_layer_name,
    check_modalities,
    partition_shard,
    staged_partition_path,
)
from ferroload_format._manifest import (
    IndexPart,
    LayerInfo,
    Manifest,
    Modality,
    ShardInfo,
    layer_dir,
    layer_part_path,
    layer_shard_paths,
    layer_staging_dir,
    utc_now,
)
from ferroload_format._names import RESERVED_COLUMNS, member_name, new_txn_id
from ferroload_format._tar import ShardWriter
from ferroload_format._versions import read_manifest, write_hint
from ferroload_format._writer import write_side_index
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store

logger = logging.getLogger(__name__)


# Sample ids of recently used base versions, per process: worker processes (and Ray
# workers) that stage many partitions read them once.
_IDS: OrderedDict[tuple[str, int, str], pa.Array] = OrderedDict()
_IDS_LOCK = threading.Lock()
_IDS_KEEP = 4
#: Indexes of base versions, per process, for the sample ids of one partition's rows
#: (read by row group: a worker writing a partition reads the row groups it covers, not
#: every id of the base).
_INDEXES: OrderedDict[tuple[str, int, str], IndexColumns] = OrderedDict()


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
        self._check_names(ds.manifest)
        latest = read_manifest(self._store)
        self._check_existing(latest)
        if latest.version != ds.version:
            self._check_names(latest)

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
        return self._is_mine(read_manifest(self._store))

    def __repr__(self) -> str:
        return (
            f"LayerWriter({self.uri!r}, {self.name!r}, identity={self.identity!r}, "
            f"base_version={self._version})"
        )

    def _is_mine(self, manifest: Manifest) -> bool:
        layer = manifest.layer(self.name)
        return layer is not None and layer.identity == self.identity

    def _manifest(self) -> Manifest:
        with self._lock:
            if self._base is None:
                self._base = read_manifest(self._store, self._version)
            return self._base

    def _sample_ids(self) -> pa.Array:
        """Sample ids of the base version (read once per process)."""
        if self._ids is not None:
            return self._ids
        base = self._manifest()
        key = (self._store.uri, base.version, base.txn)
        with _IDS_LOCK:
            ids = _IDS.get(key)
            if ids is not None:
                _IDS.move_to_end(key)
        if ids is None:
            ids = IndexColumns(self._store, base).column("sample_id")
            with _IDS_LOCK:
                _IDS[key] = ids
                while len(_IDS) > _IDS_KEEP:
                    _IDS.popitem(last=False)
        self._ids = ids
        return ids

    def _ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Sample ids of some rows of the base version: from the whole column when this
        process read it already, else from the row groups holding them."""
        if self._ids is None:
            base = self._manifest()
            key = (self._store.uri, base.version, base.txn)
            with _IDS_LOCK:
                whole = _IDS.get(key)
                index = _INDEXES.get(key)
                if whole is None and index is None:
                    index = _INDEXES[key] = IndexColumns(self._store, base)
                    while len(_INDEXES) > _IDS_KEEP:
                        _INDEXES.popitem(last=False)
            if whole is None:
                assert index is not None
                ids: list[str] = index.take(["sample_id"], rows)["sample_id"].to_pylist()
                return ids
            self._ids = whole
        return list(self._ids.take(arrow_array(rows)).to_pylist())

    # ----------------------------------------------------------------- checks

    def _check_names(self, manifest: Manifest) -> None:
        """Refuse columns that `manifest`'s base or other layers already have."""
        # keyed by the lowercased name: SQL (subset, sql) compares names without case
        taken: dict[str, str] = dict.fromkeys(RESERVED_COLUMNS, "an index column")
        taken.update(
            (m.name.lower(), f"a modality of the dataset ({m.name!r})") for m in manifest.modalities
        )
        taken.update(
            (f.name.lower(), f"a metadata column of the dataset ({f.name!r})")
            for f in manifest.metadata
        )
        for other in manifest.layers:
            if other.name != self.name:
                taken.update(
                    (c.lower(), f"a column of layer {other.name!r} ({c!r})")
                    for c in other.column_names
                )
        mine: dict[str, str] = {}
        for col in (*(m.name for m in self.modalities), *(f.name for f in self.columns)):
            what = taken.get(col.lower())
            if what is None and mine.setdefault(col.lower(), col) != col:
                what = f"a column of this layer ({mine[col.lower()]!r})"
            if what is not None:
                raise self._schema.error(
                    SchemaConflictError,
                    f"column {col!r} is already {what} (version {manifest.version}); "
                    "name the layer's outputs differently",
                    column=col,
                )

    def _check_existing(self, latest: Manifest) -> None:
        layer = latest.layer(self.name)
        if layer is not None and layer.identity != self.identity and not self.overwrite:
            raise self._schema.error(
                LayerExistsError,
                f"version {latest.version} already has this layer, computed as "
                f"{layer.identity!r} (this is {self.identity!r}); pass overwrite=True to "
                "replace it in a new version, or choose another layer name",
                identity=layer.identity,
            )

    def _check_partition(self, k: object) -> int:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise self._schema.error(
                InvalidLayerError, f"partition numbers are ints >= 0, got {k!r}", partition=k
            )
        return int(k)

    # ----------------------------------------------------------------- staging

    def staged(self) -> set[int]:
        """Partition numbers already staged (done) under this identity."""
        prefix = layer_staging_dir(self.name, self.identity)
        out = set()
        for obj in self._store.list(prefix):
            m = PARTITION_RE.fullmatch(obj.path[len(prefix) :])
            if m is not None:
                out.add(int(m.group(1)))
        return out

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
        n = len(rows_arr)
        ids = self._ids_at(rows_arr) if n else []
        arrays = self._schema.value_arrays(k, values, ids)
        data = self._schema.payload_lists(k, payloads, ids)
        shard, locs = self._write_shard(k, ids, data)
        _commit._checkpoint("partition-shard-written")
        if shard is None:
            shard_col = pa.nulls(n, type=pa.string())
        else:  # the shard's path where the row has a payload, else null
            has = np.logical_or.reduce([loc[0] for loc in locs])
            shard_col = pc.if_else(
                arrow_array(has), pa.scalar(shard.path), pa.scalar(None, pa.string())
            )
        columns: list[Any] = [
            arrow_array(rows_arr),
            pa.array(ids, type=pa.string()),
            shard_col,
            *(
                pa.StructArray.from_arrays(
                    [arrow_array(a) for a in loc], fields=list(MODALITY_TYPE)
                )
                for loc in locs
            ),
            *arrays,
        ]
        meta = {
            "layer": self.name,
            "identity": self.identity,
            "partition": k,
            "shard": shard.to_json() if shard is not None else None,
        }
        schema = self._schema.partition_schema().with_metadata(
            {PARTITION_META: json.dumps(meta).encode()}
        )
        table = pa.Table.from_arrays(columns, schema=schema)
        self._store.put(staged_partition_path(self.name, self.identity, k), write_part(table))
        _commit._checkpoint("partition-staged")

    def _write_shard(
        self, k: int, ids: list[str], data: list[Sequence[Any]]
    ) -> tuple[ShardInfo | None, list[list[npt.NDArray[Any]]]]:
        """Write partition `k`'s shard; returns it (None: no payload) and, per modality,
        the [present, offset, length, checksum] arrays of its rows."""
        n = len(ids)
        locs = [
            [
                np.zeros(n, np.bool_),
                np.zeros(n, np.int64),
                np.zeros(n, np.int64),
                np.zeros(n, np.uint64),
            ]
            for _ in self.modalities
        ]
        if not any(item is not None for items in data for item in items):
            return None, locs
        path, side_path = layer_shard_paths(self.name, new_txn_id(), k)
        shard = ShardWriter(self._store.open_writer(path), path)
        try:
            for i, sid in enumerate(ids):
                had = False
                for m, items, loc in zip(self.modalities, data, locs, strict=True):
                    item = items[i]
                    if item is None:
                        continue
                    off, length, checksum = shard.add(member_name(sid, m.name, m.ext), item)
                    loc[0][i], loc[1][i], loc[2][i], loc[3][i] = True, off, length, checksum
                    had = True
                shard.num_samples += had
            size = shard.close()
        except BaseException:
            shard.abort()
            raise
        write_side_index(self._store, side_path, shard.members)
        info = ShardInfo(path, side_path, size, shard.num_samples, len(shard.members.names), 0)
        return info, locs

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
        store = self._store
        latest = read_manifest(store)
        if self._is_mine(latest):
            logger.info("layer %r of %s is already committed", self.name, self.uri)
            return Dataset(store, latest)
        self._check_existing(latest)
        missing = sorted(set(range(num_partitions)) - self.staged())
        if missing:
            latest = read_manifest(store)
            if self._is_mine(latest):  # a concurrent committer won and removed staging
                return Dataset(store, latest)
            raise self._incomplete(missing, num_partitions)
        try:
            tables = [self._read_partition(k) for k in range(num_partitions)]
        except ObjectNotFoundError:
            latest = read_manifest(store)
            if self._is_mine(latest):  # a concurrent committer won and removed staging
                return Dataset(store, latest)
            raise self._incomplete(
                sorted(set(range(num_partitions)) - self.staged()), num_partitions
            ) from None
        shards = [
            partition_shard(
                t, where=f"{staged_partition_path(self.name, self.identity, k)} of {self.uri}"
            )
            for k, t in enumerate(tables)
        ]
        table = self._schema.merge(tables, self._sample_ids())
        txn = new_txn_id()
        staged = f"{layer_staging_dir(self.name, self.identity)}index-{txn}.parquet"
        part_bytes = write_part(table)
        store.put(staged, part_bytes)
        _commit._checkpoint("part-staged")
        for _attempt in range(MAX_COMMIT_ATTEMPTS):
            latest = read_manifest(store)
            if self._is_mine(latest):
                with suppress(OSError):
                    store.delete(staged)
                return Dataset(store, latest)
            self._check_existing(latest)
            self._check_names(latest)
            if replaced_before(latest) > self._version:  # rows match by position
                raise self._schema.error(
                    CommitConflictError,
                    f"version {replaced_before(latest)} overwrote the content this layer was "
                    f"computed on (version {self._version}); nothing was committed: run the "
                    "map again on the latest version",
                )
            ensure_published(store, latest)
            manifest = self._next_manifest(latest, shards, staged, len(part_bytes), txn)
            self._check_shards_exist([s for s in shards if s is not None])
            _commit._checkpoint("before-commit")
            if claim_version(store, manifest):
                break
        else:
            raise self._schema.error(
                CommitConflictError,
                f"gave up committing after {MAX_COMMIT_ATTEMPTS} attempts: other writers "
                "kept committing first",
            )
        _commit._checkpoint("committed")
        with suppress(ObjectExistsError):
            store.put_if_absent(layer_part_path(self.name, manifest.version), part_bytes)
        _commit._checkpoint("published")
        write_hint(store, manifest.version)
        prefix = layer_staging_dir(self.name, self.identity)
        try:
            store.delete([o.path for o in store.list(prefix)])
        except OSError:
            logger.warning("could not remove staging %s of %s; gc will", prefix, self.uri)
        logger.info(
            "committed layer %r of %s as version %d (%d rows)",
            self.name,
            self.uri,
            manifest.version,
            table.num_rows,
        )
        return Dataset(store, manifest)

    def _incomplete(self, missing: list[int], num_partitions: int) -> Exception:
        shown = ", ".join(map(str, missing[:20])) + (" …" if len(missing) > 20 else "")
        return self._schema.error(
            IncompleteLayerError,
            f"{len(missing)} of {num_partitions} partitions are not staged ({shown}); "
            "run them (write_partition), then commit",
            missing=missing,
        )

    def _read_partition(self, k: int) -> pa.Table:
        key = staged_partition_path(self.name, self.identity, k)
        data = self._store.get(key)
        table = pq.ParquetFile(pa.BufferReader(data)).read()
        want = self._schema.partition_schema()
        if not table.schema.remove_metadata().equals(want):
            raise self._schema.error(
                InvalidLayerError,
                f"staged partition {key} has columns ({table.schema.remove_metadata()}) "
                f"that differ from the layer's ({want}); was it staged by other code under "
                "the same identity? Delete it or use another identity",
                partition=k,
            )
        return table

    def _next_manifest(
        self,
        latest: Manifest,
        shards: list[ShardInfo | None],
        staged: str,
        part_size: int,
        txn: str,
    ) -> Manifest:
        version = latest.version + 1
        layer = LayerInfo(
            name=self.name,
            identity=self.identity,
            base_version=self._version,
            num_rows=self._manifest().num_samples,
            columns=self.columns,
            modalities=self.modalities,
            shards=tuple(
                ShardInfo(s.path, s.side_index, s.size, s.num_samples, s.num_members, version)
                for s in shards
                if s is not None
            ),
            index_parts=(
                IndexPart(
                    layer_part_path(self.name, version),
                    staged,
                    self._manifest().num_samples,
                    part_size,
                    version,
                ),
            ),
            created_at=utc_now(),
        )
        old = latest.layer(self.name)
        if old is None:
            layers = (*latest.layers, layer)
        else:
            layers = tuple(layer if la.name == self.name else la for la in latest.layers)
        return latest.derive(
            version=version,
            parent_version=latest.version,
            created_at=utc_now(),
            txn=txn,
            operation="layer",
            layers=layers,
        )

    def _check_shards_exist(self, shards: list[ShardInfo]) -> None:
        """Refuse to commit shards that are gone (a `gc` with too short a grace period)."""
        expected = {p for s in shards for p in (s.path, s.side_index)}
        if not expected:
            return
        found = {o.path for o in self._store.list(f"{layer_dir(self.name)}shards/")}
        gone = sorted(expected - found)
        if gone:
            raise self._schema.error(
                CommitConflictError,
                f"{len(gone)} staged object(s) disappeared before the commit (first: "
                f"{gone[0]}); was gc run with a grace period shorter than the map? Run the "
                "partitions again, then commit",
                shard=gone[0],
            )


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
