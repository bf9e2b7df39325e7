"""`GroupReader`: reads row groups of one version's index parts on demand, into a bounded cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from ferroload_format._errors import ManifestError
from ferroload_format._index_arrays import ModalityArrays, numpy_column, typed_column
from ferroload_format._manifest import Manifest
from ferroload_format._part_files import (
    LocalMaps,
    Opened,
    PartFiles,
    check_part_rows,
    no_column,
    open_part,
    own_file,
    read_chunks,
)
from ferroload_format._records import IndexPart, LayerInfo
from ferroload_format._rowgroups import SCAN_SHARE, GroupCache, RowPlan, plan_rows
from ferroload_format._shard_lists import shards_of
from ferroload_store import Store


@dataclass(frozen=True)
class Scope:
    """The index parts of the base ("") or of one layer, and their cumulative rows."""

    key: str
    parts: tuple[IndexPart, ...]
    bounds: npt.NDArray[np.int64]
    layer: LayerInfo | None


class _Room:
    """What one call over row groups may still put in the row-group cache: `left` bytes
    (-1: no bound; None: not decided before its first value)."""

    __slots__ = ("groups", "left")

    def __init__(self, groups: int) -> None:
        self.groups = groups
        self.left: int | None = None


class GroupReader:
    """Reads what row groups of the index hold, by scope (the base's parts or one layer's),
    as it is asked for, and keeps it in `cache` (a `GroupCache`, see `each_group`).

    Values are of three kinds: "col" (a column as an Arrow array), "loc" (a modality's
    `ModalityArrays`, range checked by `check(name, arrays, first_row)`) and "codes"
    (shard codes into `IndexColumns.shards`).
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        files: PartFiles,
        cache: GroupCache,
        *,
        schema: pa.Schema,
        shard_start: dict[str, int],
        check: Callable[[str, ModalityArrays, int], None],
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.files = files
        self.cache = cache
        self.schema = schema
        self.check = check
        self._shard_start = shard_start
        self._scopes: dict[str, Scope] = {}
        self._group_starts: dict[tuple[str, int], npt.NDArray[np.int64]] = {}
        self._lookups: dict[str, dict[str, int]] = {}
        # the last plan: a loader reads several columns of the same rows in turn
        self._last_plan: tuple[str, int, int, RowPlan] | None = None
        self._local: LocalMaps = {}  # opened local part -> its memory map

    def scope(self, layer: LayerInfo | None) -> Scope:
        """The parts of the base (None) or of `layer`, their row counts checked."""
        key = "" if layer is None else layer.name
        scope = self._scopes.get(key)
        if scope is not None:
            return scope
        parts = self.manifest.index_parts if layer is None else layer.index_parts
        bounds = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.num_rows for p in parts], out=bounds[1:])
        if layer is not None and (
            int(bounds[-1]) != layer.num_rows or layer.num_rows > self.manifest.num_samples
        ):
            raise ManifestError(
                f"layer {layer.name!r} of {self.store.uri} has {int(bounds[-1])} index rows; "
                f"its manifest entry says {layer.num_rows} (version {self.manifest.version} "
                f"has {self.manifest.num_samples} samples)",
                uri=self.store.uri,
                layer=layer.name,
            )
        scope = self._scopes[key] = Scope(key, tuple(parts), bounds, layer)
        return scope

    def starts(self, scope: Scope, p: int) -> npt.NDArray[np.int64]:
        """Cumulative row counts of the row groups of part `p` of `scope` (its footer)."""
        starts = self._group_starts.get((scope.key, p))
        if starts is not None:
            return starts
        part = scope.parts[p]
        md = open_part(self.store, part, self.files)[0].metadata
        check_part_rows(self.store, part, md.num_rows)
        starts = np.zeros(md.num_row_groups + 1, dtype=np.int64)
        np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)], out=starts[1:])
        self._group_starts[(scope.key, p)] = starts
        return starts

    def plan(self, scope: Scope, rows: npt.NDArray[np.int64]) -> RowPlan:
        """Which row groups hold `rows`, and where (the last plan is kept: a loader asks
        for several columns of the same rows, and planning sorts them)."""
        # rows < scope.bounds[-1]: the manifest's sample count is its parts' rows, and
        # a layer's rows beyond its parts are taken out by the callers
        big = len(rows) >= 1024  # small plans cost less than the fingerprint
        digest = xxhash.xxh3_64_intdigest(np.ascontiguousarray(rows).data) if big else 0
        last = self._last_plan
        if last is not None and last[:3] == (scope.key, len(rows), digest):
            return last[3]
        plan = plan_rows(rows, scope.bounds, lambda p: self.starts(scope, p))
        if big:
            self._last_plan = (scope.key, len(rows), digest, plan)
        return plan

    def lookup(self, scope: Scope) -> dict[str, int]:
        lookup = self._lookups.get(scope.key)
        if lookup is None:
            if scope.layer is None:
                lookup = {s.path: i for i, s in enumerate(shards_of(self.store, self.manifest))}
            else:
                start = self._shard_start[scope.key]
                lookup = {s.path: start + i for i, s in enumerate(scope.layer.shards)}
            self._lookups[scope.key] = lookup
        return lookup

    def codes_of(self, scope: Scope, arr: pa.Array) -> npt.NDArray[np.int32]:
        """Shard codes (into `shards`) of a row group's `shard` values; -1 where a layer
        stored no payload."""
        layer = scope.layer
        where = "" if layer is None else f" of layer {layer.name!r}"
        if pa.types.is_null(arr.type) and layer is not None:
            return np.full(len(arr), -1, dtype=np.int32)
        d = arr if pa.types.is_dictionary(arr.type) else None
        if d is None and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            d = pc.dictionary_encode(arr)
        if d is None or not (
            pa.types.is_string(d.type.value_type) or pa.types.is_large_string(d.type.value_type)
        ):
            raise ManifestError(
                f"the shard column of the index{where} of {self.store.uri} holds {arr.type}, "
                "not strings. The index was altered; run verify()",
                uri=self.store.uri,
                column="shard",
            )
        if d.null_count and layer is None:
            raise ManifestError(
                f"the shard column of the index of {self.store.uri} has nulls. The index "
                "was altered; run verify()",
                uri=self.store.uri,
                column="shard",
            )
        lookup = self.lookup(scope)
        try:
            mapping = np.asarray(
                [lookup[s] for s in d.dictionary.to_pylist()] or [-1], dtype=np.int32
            )
        except KeyError as exc:
            raise ManifestError(
                f"index{where} of {self.store.uri} names shard {exc.args[0]!r}, which the "
                "manifest does not list",
                uri=self.store.uri,
                shard=str(exc.args[0]),
                **({} if layer is None else {"layer": layer.name}),
            ) from None
        # no fill without nulls: pyarrow's first scalar in a process imports pandas
        # (0.2-0.3 s of the first batch)
        idx = d.indices if d.indices.null_count == 0 else pc.fill_null(d.indices, 0)
        codes: npt.NDArray[np.int32] = mapping[numpy_column(idx)]
        if d.null_count:
            codes = np.where(numpy_column(d.is_valid()), codes, np.int32(-1)).astype(np.int32)
        return codes

    def one_shard(self, p: int, g: int) -> int | None:
        """The code of the one base shard that the statistics of row group `g` of base
        part `p` say all its rows are in; None when they do not say so."""
        pf = open_part(self.store, self.manifest.index_parts[p], self.files)[0]
        md = pf.metadata
        col = next((i for i in range(md.num_columns) if md.schema.column(i).path == "shard"), None)
        if col is None:
            return None
        stats = md.row_group(g).column(col).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            return None
        value = stats.min.decode() if isinstance(stats.min, bytes) else stats.min
        code = self.lookup(self.scope(None)).get(str(value))
        if code is None:
            raise ManifestError(
                f"index of {self.store.uri} names shard {value!r}, which the manifest does "
                "not list",
                uri=self.store.uri,
                shard=str(value),
            )
        return code

    def each_group(
        self,
        scope: Scope,
        groups: Sequence[tuple[int, int]],
        kind: str,
        name: str,
        use: Callable[[int, Any], None],
    ) -> None:
        """Call `use(i, value)` with what row group `groups[i]` holds of `name`, read
        where not cached: `kind` "col" (the column as an Arrow array), "loc" (a
        modality's `ModalityArrays`, range checked) or "codes" (shard codes). Values are
        handed over as they are read, so a call touching many row groups holds a few at
        a time beyond the cache. A call over more row groups than the cache holds (a
        shuffled loader's window touches all of them, and at 10^8 rows they are ten times
        the cache) keeps at most `1 / SCAN_SHARE` of the cache and reads the rest through,
        instead of evicting everything else for values it will not read again (the full
        cache of such passes was 350 MB of a loader's peak RSS at 10^8 rows); a call whose
        groups fit is cached whole (at 10^7 rows, the next window's pass hits it)."""
        room = _Room(len(groups))
        missing: dict[int, dict[int, list[int]]] = {}
        for i, (p, g) in enumerate(groups):
            value = self.cache.get((scope.key, p, g, kind, name))
            if value is None:
                missing.setdefault(p, {}).setdefault(g, []).append(i)
            else:
                use(i, value)
        for p, by_group in missing.items():

            def hand(g: int, value: Any, by_group: dict[int, list[int]] = by_group) -> None:
                for i in by_group[g]:
                    use(i, value)

            self._load_groups(scope, p, sorted(by_group), kind, name, hand, room)

    def _load_groups(
        self,
        scope: Scope,
        p: int,
        gs: list[int],
        kind: str,
        name: str,
        use: Callable[[int, Any], None],
        room: _Room,
    ) -> None:
        part = scope.parts[p]
        starts = self.starts(scope, p)
        opened = open_part(self.store, part, self.files)
        phys = ([] if kind == "codes" else [name]) + ([] if kind == "col" else ["shard"])
        for c in phys:
            if opened[0].schema_arrow.get_field_index(c) < 0:
                raise no_column(self.store, part, c)
        for chunk, table in read_chunks(opened, gs, phys, self._own_file):
            off = 0
            for g in chunk:
                n = int(starts[g + 1] - starts[g])
                t = table.slice(off, n)
                off += n
                codes = None
                if "shard" in phys:
                    codes = self.codes_of(scope, t.column("shard").combine_chunks())
                    if scope.layer is None:
                        one = self.one_shard(p, g)
                        if one is not None and bool((codes != one).any()):
                            raise ManifestError(
                                f"row group {g} of index part {part.path} of {self.store.uri} "
                                "holds rows of several shards; its statistics say one. The index "
                                "was altered; run verify()",
                                uri=self.store.uri,
                                part=part.path,
                            )
                    self._keep(room, (scope.key, p, g, "codes", "shard"), codes, codes.nbytes)
                if kind == "codes":
                    use(g, codes)
                    continue
                field_type = self.schema.field(name).type
                arr = typed_column(t.column(name), field_type, uri=self.store.uri, name=name)
                if kind == "col":
                    value: Any = arr
                    nbytes = arr.nbytes
                else:
                    assert codes is not None
                    value = ModalityArrays(
                        present=numpy_column(arr.field("present"), writable=True),
                        shard=codes,
                        offset=numpy_column(arr.field("offset"), writable=True),
                        length=numpy_column(arr.field("length"), writable=True),
                        checksum=numpy_column(arr.field("checksum"), writable=True),
                    )
                    self.check(name, value, int(scope.bounds[p] + starts[g]))
                    nbytes = sum(
                        x.nbytes
                        for x in (value.present, value.offset, value.length, value.checksum)
                    )
                self._keep(room, (scope.key, p, g, kind, name), value, nbytes)
                use(g, value)

    def _keep(self, room: _Room, key: tuple[Any, ...], value: Any, nbytes: int) -> None:
        """Cache a loaded row group unless the call is a scan out of `room` (see
        `each_group`); the call's first value (not shard codes) decides which it is."""
        if room.left is None and key[3] != "codes":
            fits = room.groups * nbytes <= self.cache.max_bytes
            room.left = -1 if fits else self.cache.max_bytes // SCAN_SHARE
        keep = room.left is None or room.left < 0 or nbytes <= room.left
        if keep and room.left is not None and room.left >= 0:
            room.left -= nbytes
        self.cache.put(key, value, nbytes, keep=keep)

    def _own_file(self, opened: Opened) -> Opened:
        return own_file(self.store, self.files, self._local, opened)
