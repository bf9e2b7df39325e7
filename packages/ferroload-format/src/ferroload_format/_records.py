"""The records a manifest is made of: modalities, shards, index parts, shard lists,
sample-id runs and layers, each read from and written to JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Self

import pyarrow as pa

from ferroload_core import check_relative_path
from ferroload_format._record_json import (
    MAX_INT64,
    Record,
    check_array,
    check_count,
    check_object,
    fields_from_json,
    fields_to_json,
    json_type,
    parse_records,
    split_known,
)

_SHARD_KEYS = frozenset(("path", "side_index", "size", "num_samples", "num_members", "version"))


@dataclass(frozen=True)
class Modality(Record):
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
class ShardInfo(Record):
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

    @classmethod
    def from_plain_json(cls, raw: Any) -> Self | None:
        """Parse a record as the Writer writes it (exactly the six fields, strings and
        counts of the right types) without `from_json`'s loop over fields; None for
        anything else, which `from_json` parses or refuses with its errors. (A version's
        shard lists hold up to millions of records.)"""
        if type(raw) is not dict or raw.keys() != _SHARD_KEYS:
            return None
        path, side, size = raw["path"], raw["side_index"], raw["size"]
        samples, members, version = raw["num_samples"], raw["num_members"], raw["version"]
        if not (type(path) is str and type(side) is str):
            return None
        for v in (size, samples, members, version):
            if type(v) is not int or not 0 <= v <= MAX_INT64:
                return None
        return cls(path, side, size, samples, members, version)

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "record") -> Self:
        """Parse a shard record (see `Record.from_json`); the Writer's records take the
        fast path of `from_plain_json`."""
        shard = cls.from_plain_json(raw)
        return shard if shard is not None else super().from_json(raw, key=key)


@dataclass(frozen=True)
class IndexPart(Record):
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
        own_staged: for a merged part outside the glob (`_ferroload/merged/`, §7.6) of a
            version that added rows: where those rows alone were staged, to be published
            as `index/part-<version>.parquet`; None otherwise.
    """

    path: str
    staged: str
    num_rows: int
    size: int
    version: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    first_version: int | None = None
    own_staged: str | None = None

    @property
    def since(self) -> int:
        """The version that added the part's oldest rows (`first_version` or `version`)."""
        return self.version if self.first_version is None else self.first_version

    def to_json(self) -> dict[str, Any]:
        """The part as a JSON object (`first_version` and `own_staged` only when set)."""
        out = super().to_json()
        for name in ("first_version", "own_staged"):
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "record") -> Self:
        """Parse a part record (see `Record.from_json`); `first_version`, when present,
        must be a version no newer than `version`; `own_staged` a string."""
        part = super().from_json(raw, key=key)
        if part.first_version is not None:
            check_count(part.first_version, f"{key}.first_version")
            if part.first_version > part.version:
                raise TypeError(f"{key}.first_version must not be above {key}.version")
        if part.own_staged is not None and not isinstance(part.own_staged, str):
            raise TypeError(f"{key}.own_staged must be a string, not {json_type(part.own_staged)}")
        return part


@dataclass(frozen=True)
class ShardList(Record):
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
        raw = check_object(raw, key)
        if not isinstance(raw.get("path"), str):
            raise TypeError(f"{key}.path must be a string")
        parts = check_array(raw.get("parts"), f"{key}.parts")
        return cls(
            path=raw["path"],
            num_ids=check_count(raw.get("num_ids"), f"{key}.num_ids"),
            size=check_count(raw.get("size"), f"{key}.size"),
            parts=tuple(check_count(v, f"{key}.parts[{i}]") for i, v in enumerate(parts)),
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
    if part.own_staged is not None:
        check_relative_path(
            part.own_staged, what=f"staged own rows of index part {part.path} in {where}"
        )
    return part


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
            "columns": fields_to_json(self.columns),
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
            raise TypeError(f"{key} must be a JSON object, not {json_type(raw)}")
        known = {f.name for f in fields(cls) if f.name != "extra"}
        mine, extra = split_known(raw, known)
        return cls(
            name=str(mine["name"]),
            identity=str(mine["identity"]),
            base_version=check_count(mine["base_version"], f"{key}.base_version"),
            num_rows=check_count(mine["num_rows"], f"{key}.num_rows"),
            columns=fields_from_json(mine.get("columns", []), f"{key}.columns"),
            modalities=parse_records(Modality, mine.get("modalities", []), f"{key}.modalities"),
            shards=parse_records(ShardInfo, mine.get("shards", []), f"{key}.shards"),
            index_parts=parse_records(IndexPart, mine["index_parts"], f"{key}.index_parts"),
            created_at=str(mine.get("created_at", "")),
            extra=extra,
        )
