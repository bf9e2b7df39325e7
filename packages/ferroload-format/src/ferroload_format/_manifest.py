"""The JSON manifest (docs/format.md §6): the `Manifest` of a committed version, its format
version and features, and how it is read from and written to JSON.

A manifest is one snapshot per committed version; its older shards are in immutable shard
lists (§6.2), its records (shards, index parts, layers, …) are those of `_records`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ferroload_core import check_relative_path
from ferroload_format._errors import ManifestError, UnsupportedFormatVersionError
from ferroload_format._record_json import (
    JsonReader,
    check_array,
    check_count,
    check_json_depth,
    check_object,
    fields_from_json,
    fields_to_json,
    parse_records,
    split_known,
)
from ferroload_format._records import (
    IdRun,
    IndexPart,
    LayerInfo,
    Modality,
    ShardInfo,
    ShardList,
    check_part_paths,
    check_shard_paths,
)

if TYPE_CHECKING:
    from ferroload_store import Store

FORMAT_NAME = "ferroload"
FORMAT_VERSION = 1
FORMAT_MINOR = 4
#: The major version of a manifest that uses a feature readers must know
#: (`required_features`, docs/format.md §6.2): ferroload before format 1.3 refuses it.
FORMAT_VERSION_FEATURES = 2
#: Major versions this ferroload reads.
READABLE_FORMAT_VERSIONS = (FORMAT_VERSION, FORMAT_VERSION_FEATURES)
#: `required_features` this ferroload knows: shard lists (format minor 3, §6.2).
FEATURE_SHARD_LISTS = "shard_lists"
KNOWN_FEATURES = frozenset({FEATURE_SHARD_LISTS})
CHECKSUM_ALGORITHM = "xxh3_64"
#: The `checksum_algorithm` of a version whose index records no checksums (ferroload-rs
#: 0.1.1's, read as they are).
NO_CHECKSUMS = "none"
#: The deepest nesting of JSON objects and arrays a manifest may have (docs/format.md,
#: "Limits"); deeper manifests are refused with `ManifestError`.
MAX_MANIFEST_DEPTH = 128


_ENCODE = json.JSONEncoder(allow_nan=False).encode  # what JsonReader reads back

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
    def has_checksums(self) -> bool:
        """Whether the index records a checksum per payload (reads then check them)."""
        return self.checksum_algorithm != NO_CHECKSUMS

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
                "metadata": fields_to_json(self.metadata),
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
        if type(major) is not int:
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
        known, extra = split_known(raw, _KNOWN_TOP)
        try:
            check_json_depth(raw, limit=MAX_MANIFEST_DEPTH, what="the manifest")
            if not isinstance(known.get("schema"), dict):
                raise TypeError("schema must be a JSON object")
            schema = dict(known["schema"])
            meta_raw = schema.pop("metadata")
            manifest = cls(
                name=str(known["name"]),
                version=check_count(known["version"], "version"),
                parent_version=(
                    None
                    if known.get("parent_version") is None
                    else check_count(known["parent_version"], "parent_version")
                ),
                created_at=str(known["created_at"]),
                txn=str(known["txn"]),
                operation=str(known["operation"]),
                modalities=parse_records(Modality, known["modalities"], "modalities"),
                metadata=fields_from_json(meta_raw, "schema.metadata"),
                inline_shards=parse_records(ShardInfo, known["shards"], "shards"),
                index_parts=parse_records(IndexPart, known["index_parts"], "index_parts"),
                shard_lists=parse_records(ShardList, known.get("shard_lists", []), "shard_lists"),
                statistics=check_object(known.get("statistics", {}), "statistics"),
                extensions=check_object(known.get("extensions", {}), "extensions"),
                checksum_algorithm=str(known.get("checksum_algorithm", CHECKSUM_ALGORITHM)),
                format_minor=check_count(known.get("format_minor", 0), "format_minor"),
                extra=extra,
                schema_extra=schema,
                layers=tuple(
                    LayerInfo.from_json(la, key=f"layers[{i}]")
                    for i, la in enumerate(check_array(known.get("layers") or [], "layers"))
                ),
                id_runs=tuple(
                    IdRun.from_json(r, key=f"id_runs[{i}]")
                    for i, r in enumerate(check_array(known.get("id_runs") or [], "id_runs"))
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
            raw = JsonReader().loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"{uri}: manifest is not valid JSON: {exc}", uri=uri) from exc
        except ValueError as exc:  # a number no field may hold (NaN, 1e999, 5,000 digits)
            raise ManifestError(f"{uri}: malformed manifest: {exc}", uri=uri) from exc
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


def utc_now() -> str:
    """The current time as the manifest's `created_at` string."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
