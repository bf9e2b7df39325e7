"""`IndexColumns`: the index of one version, read lazily (whole columns, or rows by row group)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._errors import ColumnNotFoundError, ManifestError, PayloadRangeError
from ferroload_format._index import MODALITY_TYPE, index_schema
from ferroload_format._index_arrays import (
    ModalityArrays,
    absent_values,
    arrow_array,
    numpy_column,
    typed_column,
)
from ferroload_format._index_groups import GroupReader
from ferroload_format._index_rows import (
    group_runs,
    locate_rows,
    present_in_groups,
    runs_of,
    shard_codes_at,
    take_rows,
)
from ferroload_format._manifest import Manifest
from ferroload_format._part_files import PartFiles, read_part_table
from ferroload_format._records import LayerInfo, Modality, ShardInfo
from ferroload_format._rowgroups import GroupCache, default_cache_bytes
from ferroload_format._shard_lists import shards_of
from ferroload_format._tar import BLOCK
from ferroload_store import Store


class IndexColumns:
    """The index of one version, read lazily: some rows by row group (`take`, `locate`,
    `shard_runs`), or whole columns on first use and cached (`columns`, `modality`).

    The row-group path reads only the asked columns of only the row groups holding the
    asked rows (an object store fetches only those column chunks) and keeps what it read
    in an LRU bounded by `cache_bytes` (default `INDEX_CACHE_BYTES`, 256 MiB, or
    `FERROLOAD_INDEX_CACHE_BYTES`); a column already loaded whole is used as it is.

    Layer columns (docs/format.md §10) are part of it: they are read from the layer's own
    index part, only when asked for, and padded to the version's length (null metadata,
    absent payloads) when the version has rows the layer does not cover. Thread-safe;
    views of a dataset (subsets) share one instance.

    Attributes:
        shards: the base shards, then every layer's shards: the list that modality shard
            codes (`modality(name).shard`) index into.
        modalities: every modality, base then layers, by name.
    """

    def __init__(self, store: Store, manifest: Manifest, *, cache_bytes: int | None = None) -> None:
        self.store = store
        self.manifest = manifest
        base = index_schema([m.name for m in manifest.modalities], manifest.metadata)
        fields = list(base)
        self.modalities: dict[str, Modality] = {m.name: m for m in manifest.modalities}
        self._layer_of: dict[str, LayerInfo] = {}
        self._shard_start: dict[str, int] = {}
        start = manifest.num_shards  # no shard list read: `shards` reads them when needed
        for layer in manifest.layers:
            self._shard_start[layer.name] = start
            start += len(layer.shards)
            own = [pa.field(m.name, MODALITY_TYPE, nullable=False) for m in layer.modalities]
            for f in (*own, *layer.columns):
                if f.name in base.names or f.name in self._layer_of:
                    raise ManifestError(
                        f"column {f.name!r} of layer {layer.name!r} of {store.uri} is also "
                        "a column of the dataset or of another layer",
                        uri=store.uri,
                        column=f.name,
                        layer=layer.name,
                    )
                self._layer_of[f.name] = layer
                fields.append(f)
            self.modalities.update((m.name, m) for m in layer.modalities)
        self._shards: tuple[ShardInfo, ...] | None = None
        self.schema = pa.schema(fields)
        self._cache: dict[str, pa.Array] = {}
        self._modality: dict[str, ModalityArrays] = {}
        self._shard_codes: npt.NDArray[np.int32] | None = None
        self._layer_codes: dict[str, npt.NDArray[np.int32]] = {}
        self._files: PartFiles = {}
        self._lock = threading.RLock()
        # the lazy path: row groups read on demand, kept in a byte-bounded LRU
        self._groups = GroupCache(default_cache_bytes() if cache_bytes is None else cache_bytes)
        self._reader = GroupReader(
            store,
            manifest,
            self._files,
            self._groups,
            schema=self.schema,
            shard_start=self._shard_start,
            check=self._check_group,
        )
        self._runs: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """The base shards, then every layer's: what modality shard codes index into
        (the manifest's shard lists are read on first use)."""
        got = self._shards
        if got is None:
            base = shards_of(self.store, self.manifest)
            got = self._shards = base + tuple(s for la in self.manifest.layers for s in la.shards)
        return got

    @property
    def column_names(self) -> list[str]:
        """Every index column (layer columns included)."""
        return list(self.schema.names)

    def layer_of(self, name: str) -> LayerInfo | None:
        """The layer that column `name` belongs to (None: a base column)."""
        return self._layer_of.get(name)

    def _require(self, name: str) -> None:
        if self.schema.get_field_index(name) < 0:
            raise ColumnNotFoundError(
                f"{self.store.uri} has no column {name!r}; columns are "
                f"{', '.join(self.schema.names)}",
                uri=self.store.uri,
                column=name,
            )

    def _read(self, names: Sequence[str], **kwargs: Any) -> list[pa.Table]:
        return [
            read_part_table(self.store, p, names, self._files, **kwargs)
            for p in self.manifest.index_parts
        ]

    def read_layer(self, layer: LayerInfo, names: Sequence[str], **kwargs: Any) -> list[pa.Table]:
        """Some columns of a layer's part(s), checked to hold `layer.num_rows` rows."""
        tables = [
            read_part_table(self.store, p, names, self._files, **kwargs) for p in layer.index_parts
        ]
        rows = sum(t.num_rows for t in tables)
        if rows != layer.num_rows or rows > self.manifest.num_samples:
            raise ManifestError(
                f"layer {layer.name!r} of {self.store.uri} has {rows} index rows; its "
                f"manifest entry says {layer.num_rows} (version {self.manifest.version} "
                f"has {self.manifest.num_samples} samples)",
                uri=self.store.uri,
                layer=layer.name,
            )
        return tables

    def columns(self, names: Sequence[str]) -> dict[str, pa.Array]:
        """Arrow arrays (one chunk each) of the named columns, loading those not cached."""
        cache = self._cache
        if all(n in cache for n in names):  # the hot path: no lock, no checks
            return {n: cache[n] for n in names}
        for name in names:
            self._require(name)
        with self._lock:
            missing = [n for n in dict.fromkeys(names) if n not in self._cache]
            base = [n for n in missing if n not in self._layer_of]
            if base:
                self._load(base, self._read(base), pad=0)
            by_layer: dict[str, list[str]] = {}
            for n in missing:
                if n in self._layer_of:
                    by_layer.setdefault(self._layer_of[n].name, []).append(n)
            for lnames in by_layer.values():
                layer = self._layer_of[lnames[0]]
                pad = self.manifest.num_samples - layer.num_rows
                self._load(lnames, self.read_layer(layer, lnames), pad=pad)
            return {n: self._cache[n] for n in names}

    def _load(self, names: Sequence[str], tables: list[pa.Table], *, pad: int) -> None:
        for name in names:
            field_type = self.schema.field(name).type
            uri = self.store.uri
            chunks = [typed_column(t.column(name), field_type, uri=uri, name=name) for t in tables]
            if pad:
                chunks.append(absent_values(field_type, pad))
            self._cache[name] = (
                pa.concat_arrays(chunks) if chunks else pa.array([], type=field_type)
            )

    def column(self, name: str) -> pa.Array:
        """One column (see `columns`)."""
        return self.columns([name])[name]

    def shard_codes(self) -> npt.NDArray[np.int32]:
        """For every row, the position of its shard in `manifest.shards`."""
        with self._lock:
            if self._shard_codes is None:
                scope = self._reader.scope(None)
                parts = [
                    self._reader.codes_of(scope, chunk)
                    for table in self._read(["shard"], read_dictionary=["shard"])
                    for chunk in table.column("shard").chunks
                ]
                self._shard_codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            return self._shard_codes

    def layer_shard_codes(self, layer: LayerInfo) -> npt.NDArray[np.int32]:
        """For every row, the position in `shards` of the layer shard holding the row's
        payloads of `layer`'s modalities; -1 where the layer stored none."""
        with self._lock:
            codes = self._layer_codes.get(layer.name)
            if codes is not None:
                return codes
            scope = self._reader.scope(layer)
            parts = [
                self._reader.codes_of(scope, chunk)
                for table in self.read_layer(layer, ["shard"], read_dictionary=["shard"])
                for chunk in table.column("shard").chunks
            ]
            pad = self.manifest.num_samples - layer.num_rows
            parts.append(np.full(pad, -1, dtype=np.int32))
            codes = self._layer_codes[layer.name] = np.concatenate(parts)
            return codes

    def modality(self, name: str) -> ModalityArrays:
        """Flat numpy arrays locating every sample's payload of modality `name` (its
        `shard` codes index into `shards`)."""
        arrays = self._modality.get(name)
        if arrays is not None:  # the hot path
            return arrays
        if name not in self.modalities:
            raise ColumnNotFoundError(
                f"{self.store.uri} has no modality {name!r}; modalities are "
                f"{', '.join(self.modalities) or 'none'}",
                uri=self.store.uri,
                column=name,
            )
        with self._lock:
            arrays = self._modality.get(name)
            if arrays is None:
                arrays = self.unchecked_modality(name)
                self._check_ranges(name, arrays)
                self._modality[name] = arrays
            return arrays

    def unchecked_modality(self, name: str) -> ModalityArrays:
        """`modality(name)` without the range check, for `verify` to report bad ranges."""
        struct = self.column(name)
        layer = self._layer_of.get(name)
        return ModalityArrays(
            present=numpy_column(struct.field("present")),
            shard=self.shard_codes() if layer is None else self.layer_shard_codes(layer),
            offset=numpy_column(struct.field("offset")),
            length=numpy_column(struct.field("length")),
            checksum=numpy_column(struct.field("checksum")),
        )

    def bad_ranges(self, a: ModalityArrays) -> npt.NDArray[np.bool_]:
        """For every row, whether its payload is present but its range cannot be a tar
        member's data inside its shard (see `_check_ranges`)."""
        present = a.present.astype(bool, copy=False)
        sizes = np.asarray([s.size for s in self.shards] or [-1], dtype=np.int64)
        codes = a.shard
        known = (codes >= 0) & (codes < len(self.shards))
        size = np.where(known, sizes[np.where(known, codes, 0)], np.int64(-1))
        off, length = a.offset, a.length
        with np.errstate(over="ignore"):
            bad: npt.NDArray[np.bool_] = present & (
                ~known
                | (off < BLOCK)
                | (off % BLOCK != 0)
                | (length < 0)
                | (off > size - np.maximum(length, 0))
            )
        return bad

    def _check_ranges(self, name: str, a: ModalityArrays) -> None:
        """Refuse payload ranges that do not fit their shard (docs/format.md, "Limits").

        One vectorised pass when a modality's index columns are loaded: a present payload
        starts on a tar block after its member header (offset >= 512, a multiple of 512),
        has a non-negative length, and ends inside its shard (`offset + length <= size`,
        written so that it cannot overflow).
        """
        self._refuse_bad_ranges(name, a, lambda k: str(self.column("sample_id")[k].as_py()), "")

    def _check_group(self, name: str, a: ModalityArrays, first: int) -> None:
        """`_check_ranges` for one row group whose first row is `first`."""

        def sample_id(k: int) -> str:
            ids = self.take(["sample_id"], np.asarray([first + k]))["sample_id"]
            return str(ids[0].as_py())

        self._refuse_bad_ranges(name, a, sample_id, " in its row group")

    def _refuse_bad_ranges(
        self, name: str, a: ModalityArrays, sample_id: Callable[[int], str], within: str
    ) -> None:
        """Raise `PayloadRangeError` for the first bad range of `a` (`bad_ranges`), if any,
        naming its sample (`sample_id(position in a)`) and counting those `within` `a`."""
        bad = self.bad_ranges(a)
        if not bad.any():
            return
        k = int(np.flatnonzero(bad)[0])
        code = int(a.shard[k])
        known = 0 <= code < len(self.shards)
        shard = self.shards[code].path if known else None
        sid = sample_id(k)
        where = f"shard {shard}" if shard is not None else f"unknown shard code {code}"
        limit = f" of {self.shards[code].size} bytes" if known else ""
        raise PayloadRangeError(
            f"index of {self.store.uri} is damaged: {name!r} of sample {sid!r} claims bytes "
            f"[{int(a.offset[k])}, +{int(a.length[k])}) of {where}{limit}, which is not a tar "
            f"member's data inside the shard ({int(bad.sum())} such sample(s){within}); "
            "run verify()",
            uri=self.store.uri,
            shard=shard,
            sample_id=sid,
            column=name,
        )

    # ------------------------------------------------------------- the row-group path

    def loaded_columns(self) -> set[str]:
        """Columns read so far, whole or some row groups of them (modalities by name)."""
        with self._lock:
            names = set(self._cache) | set(self._modality)
            names.update(str(k[4]) for k in self._groups.held() if k[3] != "codes")
            return names

    def take(self, names: Sequence[str], rows: npt.NDArray[np.int64]) -> dict[str, pa.Array]:
        """Columns `names` at `rows` (row numbers of the version, any order, repeats
        allowed), in that order: whole columns already loaded are indexed, others read
        only the row groups holding `rows`. A modality comes back as its location struct.

        Raises:
            ColumnNotFoundError: for an unknown column.
        """
        for name in names:
            self._require(name)
        rows = np.asarray(rows, dtype=np.int64)
        out: dict[str, pa.Array] = {}
        for name in dict.fromkeys(names):
            whole = self._cache.get(name)
            if whole is not None:
                out[name] = whole.take(arrow_array(rows))
                continue
            out[name] = take_rows(self._reader, name, rows, self._layer_of.get(name))
        return {n: out[n] for n in names}

    def locate(self, name: str, rows: npt.NDArray[np.int64]) -> ModalityArrays:
        """Where modality `name`'s payloads of `rows` (row numbers of the version) live,
        one entry per row in the order given, range checked (each row group once, when
        it is read; see `_check_ranges`).

        Raises:
            ColumnNotFoundError: for an unknown modality.
            PayloadRangeError: a row group holding one of `rows` has a bad range.
        """
        whole = self._modality.get(name)
        rows = np.asarray(rows, dtype=np.int64)
        if whole is not None:
            return ModalityArrays(
                present=whole.present[rows],
                shard=whole.shard[rows],
                offset=whole.offset[rows],
                length=whole.length[rows],
                checksum=whole.checksum[rows],
            )
        if name not in self.modalities:
            self.modality(name)  # raises ColumnNotFoundError
        return locate_rows(self._reader, name, rows, self._layer_of.get(name))

    def shard_codes_at(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """The base shard code of each of `rows` (see `shard_codes`), by row group."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._shard_codes is not None:
            return self._shard_codes[rows]
        return shard_codes_at(self._reader, rows)

    def shard_runs(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """The rows of the version split into runs of one base shard: (first row of each
        run, its shard code).

        A row group whose Parquet statistics say one shard (min = max; the Writer fills
        shards in row order, so most groups do) is one run without reading it; the shard
        column of the others is read (dictionary indices, cheap). A group read later
        that contradicts its statistics is refused (`ManifestError`).
        """
        with self._lock:
            if self._runs is None:
                codes = self._shard_codes
                self._runs = group_runs(self._reader) if codes is None else runs_of(codes, 0)
            return self._runs

    def all_present(self, name: str) -> bool:
        """Whether every row of the version has a payload of modality `name`: from the
        Parquet statistics of its `present` field where they say so, else by reading the
        row groups they leave open."""
        if name not in self.modalities:
            self.modality(name)  # raises ColumnNotFoundError
        whole = self._modality.get(name)
        if whole is not None:
            return bool(whole.present.all())
        with self._lock:
            return present_in_groups(self._reader, name, self._layer_of.get(name))
