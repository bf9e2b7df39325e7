"""A write waiting to be committed (`PendingCommit`) and the version it becomes: the next
manifest, its statistics and merged index part, and the checks that it fits the latest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format._errors import CommitConflictError
from ferroload_format._index import ROW_GROUP_SIZE, index_schema, write_part
from ferroload_format._manifest import Manifest, utc_now
from ferroload_format._part_schema import read_part_as
from ferroload_format._paths import merged_part_path, part_path, staged_own_path
from ferroload_format._records import IndexPart, Modality, ShardInfo
from ferroload_format._types import fits_in, type_name
from ferroload_store import Store


@dataclass
class PendingCommit:
    """What one writer session adds, waiting to become a version.

    Attributes:
        name: dataset name (used when the commit creates the dataset).
        txn: the writer's transaction id.
        base_version: the version the writer started from (None: created the dataset).
        modalities: modalities of the written part, in column order.
        shards: shards written (their `version` is set at commit).
        table: the index part as an Arrow table.
        operation: recorded in the manifest (`create`, `append`, `overwrite`).
        base: the manifest of `base_version` as the writer read it (saves parsing it
            again when it is still the latest at commit time).
        mode: the writer's mode: `append` adds to the latest version (or creates it);
            `create` fails if a version exists at commit time; `overwrite` replaces the
            content of `base_version` and fails if another version was committed since.
    """

    name: str
    txn: str
    base_version: int | None
    modalities: tuple[Modality, ...]
    shards: list[ShardInfo]
    table: pa.Table
    operation: str = "append"
    row_group_size: int = ROW_GROUP_SIZE
    extensions: dict[str, Any] = field(default_factory=dict)
    mode: str = "append"
    base: Manifest | None = None


def conform(pending: PendingCommit, latest: Manifest, store: Store) -> pa.Table:
    """Check that `pending` fits the schema of `latest`; cast its table where it can."""
    mine = [m.name for m in pending.modalities]
    theirs = [m.name for m in latest.modalities]
    for a in pending.modalities:
        b = latest.modality(a.name)
        if b is not None and (a.ext, a.kind, a.codec_hint) != (b.ext, b.kind, b.codec_hint):
            raise CommitConflictError(
                f"modality {a.name!r} is declared as ({a.ext}, {a.kind}, {a.codec_hint}) here "
                f"but as ({b.ext}, {b.kind}, {b.codec_hint}) in version {latest.version} "
                f"of {store.uri}",
                uri=store.uri,
                column=a.name,
            )
    if mine != theirs:
        raise CommitConflictError(
            f"this write has modalities {mine}, but version {latest.version} of {store.uri} "
            f"has {theirs}",
            uri=store.uri,
        )
    target = index_schema(theirs, latest.metadata)
    table = pending.table
    if table.schema.equals(target):
        return table
    # Only the widenings an append allows (null -> any, int64 -> float64), never
    # conversions such as int -> string that a plain Arrow cast would do.
    if table.schema.names == target.names and all(
        fits_in(a.type, b.type) for a, b in zip(table.schema, target, strict=True)
    ):
        return table.cast(target)
    have = ", ".join(f"{f.name}: {type_name(f.type)}" for f in table.schema)
    want = ", ".join(f"{f.name}: {type_name(f.type)}" for f in target)
    raise CommitConflictError(
        f"the metadata of this write ({have}) does not match version {latest.version} "
        f"of {store.uri} ({want})",
        uri=store.uri,
    )


def check_shards_exist(store: Store, pending: PendingCommit) -> None:
    """Refuse to commit shards that are gone (a `gc` with too short a grace period)."""
    expected = {p for s in pending.shards for p in (s.path, s.side_index)}
    if len(expected) <= 4:  # a small append: a HEAD each, not a listing of shards/ (O(N) locally)
        missing = sorted(p for p in expected if not store.exists(p))
    else:
        # one listing per transaction (a staged commit's shards come from many writers)
        txns = {p.rsplit("-", 1)[0] for p in expected}  # shards/<txn>-NNNNN.tar
        found = {o.path for t in txns for o in store.list(f"{t}-")}
        missing = sorted(expected - found)
    if missing:
        raise CommitConflictError(
            f"{len(missing)} object(s) this writer wrote to {store.uri} disappeared before "
            f"the commit (first: {missing[0]}); was gc run with a grace period shorter than "
            "the write? Nothing was committed",
            uri=store.uri,
            shard=missing[0],
        )


def merged_part(
    store: Store,
    merged: Sequence[IndexPart],
    table: pa.Table,
    tables: dict[int, pa.Table],
    row_group_size: int,
) -> bytes:
    """The bytes of one index part holding the rows of `merged`, in order (each cast to
    `table`'s schema), then those of `table`; parts read are kept in `tables`."""
    for part in merged:
        got = tables.get(part.version)
        if got is None:
            got = read_part_as(store, part, table.schema)
        if not got.schema.equals(table.schema):
            got = got.cast(table.schema)
        tables[part.version] = got
    whole = pa.concat_tables([*(tables[p.version] for p in merged), table])
    return write_part(whole, row_group_size=row_group_size)


def next_manifest(
    latest: Manifest | None,
    pending: PendingCommit,
    table: pa.Table,
    part_bytes: bytes,
    staged: str,
    merged: Sequence[IndexPart] = (),
) -> Manifest:
    """The manifest of the next version: `latest`'s content (or nothing, for an overwrite
    or a create) and one new part holding the rows of `merged` (newest parts of
    `latest`) and of `table`. The new shards are inline, after `latest`'s; `latest`'s
    shard lists are carried over unread (`spill` moves inline shards into a list)."""
    version = latest.version + 1 if latest is not None else 1
    shards = tuple(
        ShardInfo(s.path, s.side_index, s.size, s.num_samples, s.num_members, version, s.extra)
        for s in pending.shards
    )
    rows = table.num_rows + sum(p.num_rows for p in merged)
    if merged:  # outside the glob, which gets the version's own rows (docs/format.md §7.6)
        first = min(p.since for p in merged)
        part = IndexPart(
            merged_part_path(version),
            staged,
            rows,
            len(part_bytes),
            version,
            first_version=first,
            own_staged=staged_own_path(pending.txn),
        )
    else:
        part = IndexPart(part_path(version), staged, rows, len(part_bytes), version)
    if pending.mode == "overwrite" and latest is not None:
        return latest.derive(
            name=pending.name,
            version=version,
            parent_version=latest.version,
            created_at=utc_now(),
            txn=pending.txn,
            operation="overwrite",
            modalities=pending.modalities,
            metadata=tuple(table.schema)[2 + len(pending.modalities) :],
            inline_shards=shards,
            shard_lists=(),
            index_parts=(part,),
            statistics=_statistics(None, table, pending, len(part_bytes)),
            extensions=dict(pending.extensions),
            layers=(),
        )
    stats = _statistics(latest, table, pending, len(part_bytes), merged)
    if latest is None:
        metadata = tuple(table.schema)[2 + len(pending.modalities) :]
        return Manifest(
            name=pending.name,
            version=version,
            parent_version=None,
            created_at=utc_now(),
            txn=pending.txn,
            operation="create",
            modalities=pending.modalities,
            metadata=metadata,
            inline_shards=shards,
            index_parts=(part,),
            statistics=stats,
            extensions=dict(pending.extensions),
        )
    return latest.derive(
        version=version,
        parent_version=latest.version,
        created_at=utc_now(),
        txn=pending.txn,
        # a writer that set out to create the dataset, but lost the race, appends
        operation="append" if pending.operation == "create" else pending.operation,
        inline_shards=latest.inline_shards + shards,
        index_parts=(*latest.index_parts[: len(latest.index_parts) - len(merged)], part),
        statistics=stats,
    )


def _statistics(
    latest: Manifest | None,
    table: pa.Table,
    pending: PendingCommit,
    part_size: int,
    merged: Sequence[IndexPart] = (),
) -> dict[str, Any]:
    """`latest`'s statistics plus the rows of `table`; the index bytes of the `merged`
    parts are replaced by `part_size`."""
    old = dict(latest.statistics) if latest is not None else {}
    mods = {k: dict(v) for k, v in old.get("modalities", {}).items()}
    for m in pending.modalities:
        struct = table.column(m.name)
        present = pc.struct_field(struct, "present")
        entry = mods.setdefault(m.name, {"count": 0, "bytes": 0})
        entry["count"] += int(pc.sum(present).as_py() or 0)
        entry["bytes"] += int(pc.sum(pc.struct_field(struct, "length")).as_py() or 0)
    index_bytes = int(old.get("index_bytes", 0)) + part_size - sum(p.size for p in merged)
    return {
        **old,
        "num_samples": int(old.get("num_samples", 0)) + table.num_rows,
        "num_shards": int(old.get("num_shards", 0)) + len(pending.shards),
        "shard_bytes": int(old.get("shard_bytes", 0)) + sum(s.size for s in pending.shards),
        "index_bytes": max(index_bytes, 0),
        "modalities": mods,
    }
