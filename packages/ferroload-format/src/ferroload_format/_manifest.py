"""The JSON manifest (docs/format.md §6): one snapshot per committed version, its older
shards in immutable shard lists (§6.2)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

import pyarrow as pa

from ferroload_core import check_relative_path
from ferroload_format._errors import ManifestError, UnsupportedFormatVersionError
from ferroload_format._types import type_from_json, type_to_json

if TYPE_CHECKING:
    from ferroload_store import Store

FORMAT_NAME = "ferroload"
FORMAT_VERSION = 1
FORMAT_MINOR = 3
#: The major version of a manifest that uses a feature readers must know
#: (`required_features`, docs/format.md §6.2): ferroload before format 1.3 refuses it.
FORMAT_VERSION_FEATURES = 2
#: Major versions this ferroload reads.
READABLE_FORMAT_VERSIONS = (FORMAT_VERSION, FORMAT_VERSION_FEATURES)
#: `required_features` this ferroload knows: shard lists (format minor 3, §6.2).
FEATURE_SHARD_LISTS = "shard_lists"
KNOWN_FEATURES = frozenset({FEATURE_SHARD_LISTS})
CHECKSUM_ALGORITHM = "xxh3_64"
#: The deepest nesting of JSON objects and arrays a manifest may have (docs/format.md,
#: "Limits"); deeper manifests are refused with `ManifestError`.
MAX_MANIFEST_DEPTH = 128
#: Counts, sizes and versions in a manifest fit int64 (they become numpy and Arrow values).
MAX_INT64 = 2**63 - 1

META_DIR = "_ferroload"
VERSIONS_DIR = f"{META_DIR}/versions/"
LATEST_HINT = f"{META_DIR}/latest"
STAGING_DIR = f"{META_DIR}/staging/"
SHARDS_DIR = "shards/"
INDEX_DIR = "index/"
LAYERS_DIR = "layers/"
IDS_DIR = f"{META_DIR}/ids/"
SHARD_LISTS_DIR = f"{META_DIR}/shardlists/"


def version_path(version: int) -> str:
    """Key of the manifest of `version`."""
    return f"{VERSIONS_DIR}{version:010d}.json"


def part_path(version: int) -> str:
    """Key of the published index part that `version` adds."""
    return f"{INDEX_DIR}part-{version:010d}.parquet"


def staged_part_path(txn: str) -> str:
    """Key where transaction `txn` stages its index part before committing."""
    return f"{STAGING_DIR}{txn}/part.parquet"


def shard_list_path(txn: str, version: int) -> str:
    """Key of the shard list that transaction `txn` writes for `version` (§6.2)."""
    return f"{SHARD_LISTS_DIR}{txn}-{version:010d}.jsonl"


def shard_paths(txn: str, number: int) -> tuple[str, str]:
    """Keys of shard `number` of transaction `txn` and of its side index."""
    stem = f"{SHARDS_DIR}{txn}-{number:05d}"
    return f"{stem}.tar", f"{stem}.idx.parquet"


def layer_dir(name: str) -> str:
    """Prefix of everything layer `name` owns: `layers/<name>/`."""
    return f"{LAYERS_DIR}{name}/"


def layer_part_path(name: str, version: int) -> str:
    """Key of the published index part of layer `name` committed by `version`."""
    return f"{layer_dir(name)}index/part-{version:010d}.parquet"


def layer_staging_dir(name: str, identity: str) -> str:
    """Prefix under which a map with `identity` stages the partitions of layer `name`."""
    return f"{layer_dir(name)}_staging/{identity}/"


def layer_shard_paths(name: str, txn: str, number: int) -> tuple[str, str]:
    """Keys of shard `number` of layer `name` written by transaction `txn`, and of its
    side index."""
    stem = f"{layer_dir(name)}shards/{txn}-{number:05d}"
    return f"{stem}.tar", f"{stem}.idx.parquet"


def parse_version_path(key: str) -> int | None:
    """The version number in a manifest key, or None when `key` is not one."""
    if not key.startswith(VERSIONS_DIR) or not key.endswith(".json"):
        return None
    digits = key[len(VERSIONS_DIR) : -len(".json")]
    return int(digits) if digits.isdigit() and len(digits) == 10 else None


def _split(raw: dict[str, Any], known: AbstractSet[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {k: v for k, v in raw.items() if k in known}, {
        k: v for k, v in raw.items() if k not in known
    }


class _Record:
    """JSON for the manifest's flat records; fields it does not know go to `extra`."""

    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object, unknown fields included."""
        own = {name: getattr(self, name) for name, _ in _own_fields(type(self))}
        return {**own, **self.extra} if self.extra else own

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "record") -> Self:
        """Parse a record; unknown fields are kept in `extra`.

        Raises:
            TypeError: naming `key` and the field, for a record that is not an object or a
                field of the wrong type (strings must be strings, counts non-negative ints).
        """
        if not isinstance(raw, dict):
            raise TypeError(f"{key} must be a JSON object, not {_json_type(raw)}")
        own = _own_fields(cls)
        names = _own_names(cls)
        extra: dict[str, Any]
        if names.issuperset(raw):
            mine, extra = raw, {}
        else:
            mine, extra = _split(raw, names)
        for name, kind in own:
            if name not in mine:
                continue
            value = mine[name]
            if kind == "str" and not isinstance(value, str):
                raise TypeError(f"{key}.{name} must be a string, not {_json_type(value)}")
            if kind == "int" and (type(value) is not int or not 0 <= value <= MAX_INT64):
                _count(value, f"{key}.{name}")
        try:
            return cls(**mine, extra=extra)  # type: ignore[call-arg]
        except TypeError as exc:  # a missing field
            raise TypeError(f"{key}: {exc}") from None


_FIELDS: dict[type, tuple[tuple[tuple[str, str], ...], frozenset[str]]] = {}


def _own_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, annotation) of a record class's fields, `extra` left out (looked up once per
    class: a manifest has a record per shard)."""
    return _fields_of(cls)[0]


def _own_names(cls: type) -> frozenset[str]:
    return _fields_of(cls)[1]


def _fields_of(cls: type) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    got = _FIELDS.get(cls)
    if got is None:
        own = tuple((f.name, str(f.type)) for f in fields(cls) if f.name != "extra")
        got = _FIELDS[cls] = (own, frozenset(name for name, _ in own))
    return got


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _count(value: Any, key: str) -> int:
    """`value` if it is a non-negative integer that fits int64, else a TypeError naming `key`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT64:
        raise TypeError(f"{key} must be a non-negative integer below 2**63, not {value!r}")
    return value


def _object(raw: Any, key: str) -> dict[str, Any]:
    """A copy of `raw` if it is a JSON object, else a TypeError naming `key`."""
    if not isinstance(raw, dict):
        raise TypeError(f"{key} must be a JSON object, not {_json_type(raw)}")
    return dict(raw)


def _objects(raw: Any, key: str) -> list[Any]:
    """`raw` if it is a JSON array, else a TypeError naming `key`."""
    if not isinstance(raw, list):
        raise TypeError(f"{key} must be a JSON array, not {_json_type(raw)}")
    return raw


_R = TypeVar("_R", bound=_Record)


def _records(cls: type[_R], raw: Any, key: str) -> tuple[_R, ...]:
    return tuple(cls.from_json(r, key=f"{key}[{i}]") for i, r in enumerate(_objects(raw, key)))


def check_json_depth(raw: Any, *, limit: int, what: str) -> None:
    """Raise TypeError when `raw` nests objects/arrays deeper than `limit` (iteratively: a
    hostile document cannot exhaust the stack here)."""
    if not isinstance(raw, dict | list):
        return
    stack: list[tuple[Any, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise TypeError(f"{what} nests deeper than {limit} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


@dataclass(frozen=True)
class Modality(_Record):
    """A declared modality: tar members `<sample_id>.<name>.<ext>`.

    Attributes:
        name: column name, e.g. `image`.
        ext: file extension WebDataset decoders key on, e.g. `jpg`.
        kind: what readers hand out: `tensor`, `bytes` or `text`.
        codec_hint: decoder family: `image`, `audio`, `video`, `raw`, …
        extra: fields this version of ferroload does not know (kept on rewrite).
    """

    name: str
    ext: str
    kind: str = "bytes"
    codec_hint: str = "raw"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ShardInfo(_Record):
    """One tar shard and its side index.

    Attributes:
        path: the shard, relative to the root.
        side_index: its side index, relative to the root.
        size: bytes in the shard.
        num_samples: samples with at least one member in it.
        num_members: tar members in it.
        version: the version that added it.
    """

    path: str
    side_index: str
    size: int
    num_samples: int
    num_members: int
    version: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class IndexPart(_Record):
    """One Parquet index part.

    Attributes:
        path: where the part is published (`index/part-N.parquet`).
        staged: where it was staged before the commit; read from here until published.
        num_rows: samples in the part.
        size: bytes in the part.
        version: the version that added it.
        first_version: the version that added its oldest rows, when it merged the parts
            of older versions (a tiered append or a compaction, docs/format.md §7.5);
            None for a part holding only the rows of `version`.
    """

    path: str
    staged: str
    num_rows: int
    size: int
    version: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    first_version: int | None = None

    @property
    def since(self) -> int:
        """The version that added the part's oldest rows (`first_version` or `version`)."""
        return self.version if self.first_version is None else self.first_version

    def to_json(self) -> dict[str, Any]:
        """The part as a JSON object (`first_version` only when set)."""
        out = super().to_json()
        if self.first_version is None:
            del out["first_version"]
        return out

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "record") -> Self:
        """Parse a part record (see `_Record.from_json`); `first_version`, when present,
        must be a version no newer than `version`."""
        part = super().from_json(raw, key=key)
        if part.first_version is not None:
            _count(part.first_version, f"{key}.first_version")
            if part.first_version > part.version:
                raise TypeError(f"{key}.first_version must not be above {key}.version")
        return part


@dataclass(frozen=True)
class ShardList(_Record):
    """One shard list (docs/format.md §6.2): an immutable file of `ShardInfo` records,
    one JSON object a line, holding older shards of a version.

    Attributes:
        path: the list file, relative to the root (`_ferroload/shardlists/…jsonl`).
        num_shards: records (lines) in the file.
        size: bytes in the file.
        checksum: xxh3-64 of the file's bytes, 16 lowercase hex digits.
        shard_bytes: the bytes of the shards it lists (what `size_bytes` counts).
        version: the version that wrote it.
    """

    path: str
    num_shards: int
    size: int
    checksum: str
    shard_bytes: int
    version: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class IdRun:
    """One sorted run of sample-id hashes (docs/format.md, "Sample-id runs").

    Attributes:
        path: the run file, a Parquet table of (`hash`, `part`) sorted by `hash`.
        num_ids: rows in the file.
        size: bytes in the file.
        parts: the versions of the base index parts whose every sample id is in the run.
    """

    path: str
    num_ids: int
    size: int
    parts: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The run as a JSON object."""
        return {
            "path": self.path,
            "num_ids": self.num_ids,
            "size": self.size,
            "parts": list(self.parts),
        }

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "id_run") -> IdRun:
        """Parse a run record.

        Raises:
            TypeError: for a record that is not an object or a field of the wrong type.
        """
        raw = _object(raw, key)
        if not isinstance(raw.get("path"), str):
            raise TypeError(f"{key}.path must be a string")
        parts = _objects(raw.get("parts"), f"{key}.parts")
        return cls(
            path=raw["path"],
            num_ids=_count(raw.get("num_ids"), f"{key}.num_ids"),
            size=_count(raw.get("size"), f"{key}.size"),
            parts=tuple(_count(v, f"{key}.parts[{i}]") for i, v in enumerate(parts)),
        )


def check_shard_paths(shard: ShardInfo, *, where: str) -> ShardInfo:
    """`shard` if its path and side index path pass `check_relative_path`, else raise.

    Raises:
        UnsafePathError: naming the path and `where` it was read.
    """
    check_relative_path(shard.path, what=f"shard path in {where}")
    check_relative_path(shard.side_index, what=f"side index of shard {shard.path} in {where}")
    return shard


def check_part_paths(part: IndexPart, *, where: str) -> IndexPart:
    """`part` if its published and staged paths pass `check_relative_path`, else raise.

    Raises:
        UnsafePathError: naming the path and `where` it was read.
    """
    check_relative_path(part.path, what=f"index part path in {where}")
    check_relative_path(part.staged, what=f"staged path of index part {part.path} in {where}")
    return part


def check_manifest_paths(manifest: Manifest, *, where: str) -> None:
    """Every path `manifest` names (shards, side indexes, index parts, staged parts, its
    layers' too) must pass `check_relative_path` (docs/format.md, "Paths").

    Raises:
        UnsafePathError: for the first path that could leave the dataset root.
    """
    for shard in manifest.inline_shards:
        check_shard_paths(shard, where=where)
    for lst in manifest.shard_lists:
        check_relative_path(lst.path, what=f"shard list in {where}")
    for part in manifest.index_parts:
        check_part_paths(part, where=where)
    for layer in manifest.layers:
        at = f"layer {layer.name!r} of {where}"
        for shard in layer.shards:
            check_shard_paths(shard, where=at)
        for part in layer.index_parts:
            check_part_paths(part, where=at)
    for run in manifest.id_runs:
        check_relative_path(run.path, what=f"sample-id run in {where}")


def _fields_to_json(fields: tuple[pa.Field, ...]) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": type_to_json(f.type)} for f in fields]


def _fields_from_json(raw: Any, key: str) -> tuple[pa.Field, ...]:
    out = []
    for i, f in enumerate(_objects(raw, key)):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise TypeError(f"{key}[{i}] must be an object with a string 'name'")
        out.append(pa.field(f["name"], type_from_json(f["type"])))
    return tuple(out)


@dataclass(frozen=True)
class LayerInfo:
    """One enrichment layer of a version (docs/format.md §10): columns and modalities
    computed from the rows of `base_version`, stored under `layers/<name>/`.

    Attributes:
        name: the layer's name (a namespace; its columns have their own names).
        identity: what computed it (see docs/map.md); the same identity is the same layer.
        base_version: the version whose rows the layer covers, in that version's order.
        num_rows: rows of the layer's index part (= samples of `base_version`); rows
            appended later read as null / absent.
        columns: the layer's metadata columns.
        modalities: the layer's modalities (payloads in the layer's own shards).
        shards: the layer's tar shards.
        index_parts: the layer's index part(s), one row per row of `base_version`.
        created_at: when the layer was committed.
        extra: fields this version of ferroload does not know (kept on rewrite).
    """

    name: str
    identity: str
    base_version: int
    num_rows: int
    columns: tuple[pa.Field, ...]
    modalities: tuple[Modality, ...]
    shards: tuple[ShardInfo, ...]
    index_parts: tuple[IndexPart, ...]
    created_at: str
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def column_names(self) -> tuple[str, ...]:
        """Names of the layer's modalities then metadata columns (its index columns)."""
        return (*(m.name for m in self.modalities), *(f.name for f in self.columns))

    def to_json(self) -> dict[str, Any]:
        """The layer as a JSON object, unknown fields included."""
        return {
            "name": self.name,
            "identity": self.identity,
            "base_version": self.base_version,
            "num_rows": self.num_rows,
            "columns": _fields_to_json(self.columns),
            "modalities": [m.to_json() for m in self.modalities],
            "shards": [s.to_json() for s in self.shards],
            "index_parts": [p.to_json() for p in self.index_parts],
            "created_at": self.created_at,
            **self.extra,
        }

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "layer") -> LayerInfo:
        """Parse a layer record; unknown fields are kept in `extra`."""
        if not isinstance(raw, dict):
            raise TypeError(f"{key} must be a JSON object, not {_json_type(raw)}")
        known = {f.name for f in fields(cls) if f.name != "extra"}
        mine, extra = _split(raw, known)
        return cls(
            name=str(mine["name"]),
            identity=str(mine["identity"]),
            base_version=_count(mine["base_version"], f"{key}.base_version"),
            num_rows=_count(mine["num_rows"], f"{key}.num_rows"),
            columns=_fields_from_json(mine.get("columns", []), f"{key}.columns"),
            modalities=_records(Modality, mine.get("modalities", []), f"{key}.modalities"),
            shards=_records(ShardInfo, mine.get("shards", []), f"{key}.shards"),
            index_parts=_records(IndexPart, mine["index_parts"], f"{key}.index_parts"),
            created_at=str(mine.get("created_at", "")),
            extra=extra,
        )


_ENCODE = json.JSONEncoder().encode

_KNOWN_TOP = {
    "format",
    "format_version",
    "format_minor",
    "name",
    "version",
    "parent_version",
    "created_at",
    "txn",
    "operation",
    "checksum_algorithm",
    "modalities",
    "schema",
    "shards",
    "shard_lists",
    "required_features",
    "index_parts",
    "layers",
    "id_runs",
    "statistics",
    "extensions",
}


@dataclass(frozen=True)
class Manifest:
    """A committed version of a dataset: everything needed to read it.

    Create new versions with `dataclasses.replace` (see `Manifest.derive`); unknown
    fields (`extra`, `extensions`) and `layers` are carried over unchanged.

    The shards of a version are those of its `shard_lists` (immutable list files, in
    order), then its `inline_shards` (docs/format.md §6.2). `shards` holds them all; it
    reads the lists on first use, through the store the manifest was read from
    (`read_manifest` binds it), so opening a version or counting its shards
    (`num_shards`) reads no list.
    """

    name: str
    version: int
    parent_version: int | None
    created_at: str
    txn: str
    operation: str
    modalities: tuple[Modality, ...]
    metadata: tuple[pa.Field, ...]
    inline_shards: tuple[ShardInfo, ...]
    index_parts: tuple[IndexPart, ...]
    statistics: dict[str, Any] = field(default_factory=dict, compare=False)
    extensions: dict[str, Any] = field(default_factory=dict, compare=False)
    checksum_algorithm: str = CHECKSUM_ALGORITHM
    format_minor: int = FORMAT_MINOR
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    schema_extra: dict[str, Any] = field(default_factory=dict, compare=False)
    layers: tuple[LayerInfo, ...] = ()
    id_runs: tuple[IdRun, ...] = ()
    shard_lists: tuple[ShardList, ...] = ()

    @property
    def num_samples(self) -> int:
        """Samples in this version."""
        return sum(p.num_rows for p in self.index_parts)

    @property
    def num_shards(self) -> int:
        """Base tar shards of this version (those of its lists and its inline ones),
        counted without reading a list."""
        return sum(lst.num_shards for lst in self.shard_lists) + len(self.inline_shards)

    @property
    def shard_bytes(self) -> int:
        """Bytes of this version's base tar shards, counted without reading a list."""
        listed = sum(lst.shard_bytes for lst in self.shard_lists)
        return listed + sum(s.size for s in self.inline_shards)

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """Every base shard of this version, in shard-code order: those of each shard
        list, in order, then the inline ones. The lists are read (and checked) on first
        use, through the store this manifest was read from.

        Raises:
            ManifestError: the manifest has shard lists but was not read from a store
                (`read_manifest` binds one; see `bind`), or a list is missing or damaged.
        """
        if not self.shard_lists:
            return self.inline_shards
        got: tuple[ShardInfo, ...] | None = self.__dict__.get("_all_shards")
        if got is None:
            store = self.__dict__.get("_store")
            if store is None:
                raise ManifestError(
                    f"version {self.version} of dataset {self.name!r} keeps "
                    f"{sum(x.num_shards for x in self.shard_lists)} of its shards in "
                    f"{len(self.shard_lists)} shard list(s), and this manifest was not read "
                    "from a store: read it with read_manifest(store, version), or bind(store)",
                )
            from ferroload_format._shard_lists import read_shard_lists

            got = read_shard_lists(store, self) + self.inline_shards
            object.__setattr__(self, "_all_shards", got)
        return got

    def bind(self, store: Store) -> Manifest:
        """Bind the store whose shard lists `shards` reads (`read_manifest` does it);
        returns the manifest itself."""
        if self.__dict__.get("_store") is not store:
            object.__setattr__(self, "_store", store)
            self.__dict__.pop("_all_shards", None)
        return self

    @property
    def store(self) -> Store | None:
        """The store this manifest was read from (None: built in memory)."""
        return self.__dict__.get("_store")

    def __getstate__(self) -> dict[str, Any]:
        # the store travels (worker processes read the lists again), the lists do not
        return {k: v for k, v in self.__dict__.items() if k != "_all_shards"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)

    @property
    def size_bytes(self) -> int:
        """The bytes of this version, the one count every report uses (`ferroload info`,
        `log`, the catalog): its tar shards and index parts, those of its layers, its
        manifest file and its shard lists. Side indexes (about 1% of a shard) are not
        recorded in the manifest and not counted. Reads no shard list (each records
        the bytes of its shards)."""
        total = self.shard_bytes + sum(p.size for p in self.index_parts)
        total += sum(lst.size for lst in self.shard_lists)
        for layer in self.layers:
            total += sum(s.size for s in layer.shards) + sum(p.size for p in layer.index_parts)
        return total + len(self.to_bytes())

    def modality(self, name: str) -> Modality | None:
        """The modality called `name`, or None."""
        return next((m for m in self.modalities if m.name == name), None)

    def layer(self, name: str) -> LayerInfo | None:
        """The layer called `name`, or None."""
        return next((la for la in self.layers if la.name == name), None)

    def derive(self, **changes: Any) -> Manifest:
        """A copy with `changes` applied (unknown fields and extensions kept), bound to
        the same store. `shards=` sets every shard of the copy: they become its inline
        shards, and it has no shard lists.
        """
        if "shards" in changes:
            changes["inline_shards"] = tuple(changes.pop("shards"))
            changes["shard_lists"] = ()
        new = dataclasses.replace(self, **changes)
        store = self.__dict__.get("_store")
        if store is not None:
            new.bind(store)
        return new

    @property
    def required_features(self) -> tuple[str, ...]:
        """What a reader must know to read this manifest (docs/format.md §6.2)."""
        return (FEATURE_SHARD_LISTS,) if self.shard_lists else ()

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON object (docs/format.md §6)."""
        features = self.required_features
        return {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION_FEATURES if features else FORMAT_VERSION,
            "format_minor": max(self.format_minor, FORMAT_MINOR),
            **({"required_features": list(features)} if features else {}),
            "name": self.name,
            "version": self.version,
            "parent_version": self.parent_version,
            "created_at": self.created_at,
            "txn": self.txn,
            "operation": self.operation,
            "checksum_algorithm": self.checksum_algorithm,
            "modalities": [m.to_json() for m in self.modalities],
            "schema": {
                "metadata": _fields_to_json(self.metadata),
                **self.schema_extra,
            },
            **(
                {"shard_lists": [x.to_json() for x in self.shard_lists]} if self.shard_lists else {}
            ),
            "shards": [s.to_json() for s in self.inline_shards],
            "index_parts": [p.to_json() for p in self.index_parts],
            **({"layers": [la.to_json() for la in self.layers]} if self.layers else {}),
            **({"id_runs": [r.to_json() for r in self.id_runs]} if self.id_runs else {}),
            "statistics": self.statistics,
            "extensions": self.extensions,
            **self.extra,
        }

    def to_bytes(self) -> bytes:
        """UTF-8 JSON for people who open it: one top-level field a line, and one record
        (shard, index part, run, layer) a line. Each line goes through json's C encoder,
        which a fully indented document cannot use (2x slower with 10,000 shards, and a
        commit writes the whole snapshot)."""
        lines = []
        for key, value in self.to_json().items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                body = "[\n  " + ",\n  ".join(map(_ENCODE, value)) + "\n ]"
            else:
                body = _ENCODE(value)
            lines.append(f" {_ENCODE(key)}: {body}")
        return ("{\n" + ",\n".join(lines) + "\n}").encode()

    @classmethod
    def from_json(cls, raw: Any, *, uri: str = "") -> Manifest:
        """Parse a manifest object.

        Raises:
            UnsupportedFormatVersionError: for a major format version other than 1.
            UnsafePathError: for a path that could leave the dataset root (see
                `check_manifest_paths`).
            ManifestError: for anything else that is malformed.
        """
        if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
            raise ManifestError(f"{uri}: not a ferroload manifest", uri=uri)
        major = raw.get("format_version")
        if not isinstance(major, int):
            raise ManifestError(f"{uri}: manifest has no integer format_version", uri=uri)
        if major not in READABLE_FORMAT_VERSIONS:
            raise UnsupportedFormatVersionError(
                f"{uri} uses ferroload format version {major}, but this ferroload reads "
                f"versions {FORMAT_VERSION}-{FORMAT_VERSION_FEATURES} only; upgrade "
                "ferroload to read it",
                uri=uri,
                format_version=major,
            )
        features = _features(raw, major, uri)
        known, extra = _split(raw, _KNOWN_TOP)
        try:
            check_json_depth(raw, limit=MAX_MANIFEST_DEPTH, what="the manifest")
            if not isinstance(known.get("schema"), dict):
                raise TypeError("schema must be a JSON object")
            schema = dict(known["schema"])
            meta_raw = schema.pop("metadata")
            manifest = cls(
                name=str(known["name"]),
                version=_count(known["version"], "version"),
                parent_version=known.get("parent_version"),
                created_at=str(known["created_at"]),
                txn=str(known["txn"]),
                operation=str(known["operation"]),
                modalities=_records(Modality, known["modalities"], "modalities"),
                metadata=_fields_from_json(meta_raw, "schema.metadata"),
                inline_shards=_records(ShardInfo, known["shards"], "shards"),
                index_parts=_records(IndexPart, known["index_parts"], "index_parts"),
                shard_lists=_records(ShardList, known.get("shard_lists", []), "shard_lists"),
                statistics=_object(known.get("statistics", {}), "statistics"),
                extensions=_object(known.get("extensions", {}), "extensions"),
                checksum_algorithm=str(known.get("checksum_algorithm", CHECKSUM_ALGORITHM)),
                format_minor=int(known.get("format_minor", 0)),
                extra=extra,
                schema_extra=schema,
                layers=tuple(
                    LayerInfo.from_json(la, key=f"layers[{i}]")
                    for i, la in enumerate(_objects(known.get("layers") or [], "layers"))
                ),
                id_runs=tuple(
                    IdRun.from_json(r, key=f"id_runs[{i}]")
                    for i, r in enumerate(_objects(known.get("id_runs") or [], "id_runs"))
                ),
            )
        except KeyError as exc:
            raise ManifestError(
                f"{uri}: malformed manifest: missing key {exc.args[0]!r}", uri=uri
            ) from exc
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"{uri}: malformed manifest: {exc}", uri=uri) from exc
        if manifest.shard_lists and FEATURE_SHARD_LISTS not in features:
            raise ManifestError(
                f"{uri}: malformed manifest: it has shard_lists but does not require the "
                f"{FEATURE_SHARD_LISTS!r} feature (format_version {FORMAT_VERSION_FEATURES}, "
                f"required_features [{FEATURE_SHARD_LISTS!r}]); an older ferroload would "
                "read it without them",
                uri=uri,
            )
        check_manifest_paths(manifest, where=f"manifest {uri}" if uri else "a manifest")
        return manifest

    @classmethod
    def from_bytes(cls, data: bytes, *, uri: str = "") -> Manifest:
        """Parse manifest JSON bytes (see `from_json`)."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"{uri}: manifest is not valid JSON: {exc}", uri=uri) from exc
        except RecursionError:
            raise ManifestError(
                f"{uri}: manifest nests deeper than {MAX_MANIFEST_DEPTH} levels", uri=uri
            ) from None
        return cls.from_json(raw, uri=uri)


def _features(raw: dict[str, Any], major: int, uri: str) -> frozenset[str]:
    """The `required_features` of a manifest of major version `major`: none for 1; for
    2 a list of names this ferroload must all know.

    Raises:
        UnsupportedFormatVersionError: for a feature this ferroload does not know.
        ManifestError: for a major 2 manifest without a list of feature names.
    """
    if major == FORMAT_VERSION:
        return frozenset()
    names = raw.get("required_features")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ManifestError(
            f"{uri}: malformed manifest: format_version {major} needs required_features, "
            "a JSON array of strings",
            uri=uri,
        )
    unknown = sorted(set(names) - KNOWN_FEATURES)
    if unknown:
        raise UnsupportedFormatVersionError(
            f"{uri} requires format feature(s) {', '.join(map(repr, unknown[:5]))}, which "
            "this ferroload does not know; upgrade ferroload to read it",
            uri=uri,
            format_version=major,
        )
    return frozenset(names)


def utc_now() -> str:
    """The current time as the manifest's `created_at` string."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
