"""Atomic, versioned commits on any backend (docs/format.md §7).

The commit point is a put-if-absent of the next version's manifest. Everything a writer
produced before that point is invisible; a part committed but not yet published is
published by the next writer, by `gc`, or read from staging by readers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format._errors import (
    CommitConflictError,
    DatasetExistsError,
    DatasetNotFoundError,
    DuplicateSampleError,
    FormatError,
    VersionNotFoundError,
)
from ferroload_format._ids import (
    current_runs,
    hash_ids,
    part_hashes,
    run_path,
    suspects,
    write_run,
)
from ferroload_format._index import ROW_GROUP_SIZE, index_schema, write_part
from ferroload_format._manifest import (
    IDS_DIR,
    INDEX_DIR,
    SHARD_LISTS_DIR,
    SHARDS_DIR,
    IdRun,
    IndexPart,
    Manifest,
    Modality,
    ShardInfo,
    part_path,
    staged_part_path,
    utc_now,
    version_path,
)
from ferroload_format._part_files import read_part_table
from ferroload_format._shard_lists import spill
from ferroload_format._tiers import MERGE_FACTOR, newest_taken
from ferroload_format._types import fits_in, type_name
from ferroload_format._versions import latest_version, read_manifest, write_hint
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store

logger = logging.getLogger(__name__)

MAX_COMMIT_ATTEMPTS = 50

#: Tiered merging (docs/format.md §7.6): an append's index part absorbs the newest parts
#: of the version it commits on while each holds at most `MERGE_FACTOR` times the rows
#: merged so far (`_tiers.newest_taken`). Each part below `MAX_MERGE_ROWS` then holds
#: more than twice the rows of the next, so a version has about log2(N) parts and a row is
#: rewritten about log2(N) times (3 N / MAX_MERGE_ROWS more parts above that size).
#: ... and while the merged part stays within this many rows: a part that large is read
#: as efficiently as any (64 row groups of 65,536), and no append rewrites more than this
#: (large appends, e.g. 10^7 rows each, are never merged; `compact()` still merges all).
MAX_MERGE_ROWS = 1 << 22
_RETIRE_KEEP_BYTES = 64 << 20


def _checkpoint(name: str) -> None:
    """A named point of the commit protocol.

    Does nothing. Crash tests replace it, in a child process, with a function that kills
    the process at one of: `shards-written`, `part-staged`, `list-written` (a commit
    that moves its inline shards into a shard list), `before-commit`, `committed`,
    `published`; layers add `partition-shard-written` and `partition-staged`.
    """


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


def ensure_published(store: Store, manifest: Manifest) -> list[str]:
    """Publish the parts (base or layer) that `manifest`'s own version added, if a writer
    died first.

    Only the newest version can have an unpublished part: every commit publishes its
    predecessor's parts before it commits. Returns the keys it published.
    """
    done = []
    parts = [*manifest.index_parts, *(p for la in manifest.layers for p in la.index_parts)]
    for part in parts:
        if part.version != manifest.version or store.exists(part.path):
            continue
        try:
            data = store.get(part.staged)
        except ObjectNotFoundError:
            # Published and staging collected between the exists() check and now.
            if store.exists(part.path):
                continue
            raise
        try:
            store.put_if_absent(part.path, data)
            done.append(part.path)
            logger.info(
                "published index part %s of %s (its writer stopped early)", part.path, store.uri
            )
        except ObjectExistsError:
            pass
    if done:
        settle_retirement(store, manifest)
    return done


def settle_retirement(store: Store, manifest: Manifest, known: Manifest | None = None) -> None:
    """After publishing a part of `manifest`: retire the parts it replaced, and, when a
    newer version was committed meanwhile, every part that one no longer lists. (A newer
    version that merged this very part may have retired it before this publish put it
    back: only a check after the publish sees that.) Failures are logged; `gc` finishes.
    """
    try:
        # versions are claimed in sequence: a newer one exists iff the next one does
        newer = store.exists(version_path(manifest.version + 1))
        newest = latest_version(store) if newer else None
        if newest is not None and newest > manifest.version:
            retire_replaced_parts(store, read_manifest(store, newest), manifest)
        elif replaced_anything(manifest):
            retire_replaced_parts(store, manifest, known)
    except (OSError, FormatError):
        logger.warning("could not retire replaced parts of %s; gc will", store.uri, exc_info=True)


def claim_version(store: Store, manifest: Manifest) -> bool:
    """The commit point: put `manifest` as its version if that version is still free.

    Returns:
        False (and logs it) when a concurrent writer took the version number first;
        the caller re-reads the latest version and retries.
    """
    try:
        store.put_if_absent(version_path(manifest.version), manifest.to_bytes())
    except ObjectExistsError:
        logger.info(
            "version %d of %s was taken by a concurrent writer; retrying",
            manifest.version,
            store.uri,
        )
        return False
    return True


def _latest(store: Store, known: Manifest | None = None) -> Manifest | None:
    """The latest manifest; `known` when it is still the latest (manifests are immutable:
    a large one is not parsed again)."""
    try:
        version = latest_version(store)
        if version is None:
            raise DatasetNotFoundError(f"no ferroload dataset at {store.uri}", uri=store.uri)
        if known is not None and known.version == version:
            return known
        return read_manifest(store, version)
    except DatasetNotFoundError:
        return None


def _conform(pending: PendingCommit, latest: Manifest, store: Store) -> pa.Table:
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


def _check_duplicates(
    store: Store,
    ids: pa.Array,
    parts: Sequence[IndexPart],
    pending: PendingCommit,
    read: dict[int, pa.Array],
) -> None:
    """Compare `ids` exactly with the sample ids of `parts` (kept in `read`, by version)."""
    base_version = pending.base_version
    for part in parts:
        theirs = read.get(part.version)
        if theirs is None:
            table = read_part_table(store, part, ["sample_id"])
            theirs = read[part.version] = table.column("sample_id").combine_chunks()
        hit = pc.is_in(ids, value_set=theirs)
        if not pc.any(hit).as_py():
            continue
        hits = ids.filter(hit)
        first = hits[0].as_py()
        duplicate = base_version is not None and part.version <= base_version
        if not duplicate and base_version is not None and part.since <= base_version:
            # a part that a concurrent append merged: is a hit among the rows this
            # writer's base version already had?
            old = _found_in(store, _base_manifest(store, pending), hits)
            if old is not None:
                first, duplicate = old, True
        if duplicate:
            added = (
                f"version {part.version}"
                if part.since == part.version
                else f"one of versions {part.since}-{part.version}"
            )
            raise DuplicateSampleError(
                f"sample id {first!r} is already in {store.uri} (added in {added}); "
                "sample ids must be unique",
                uri=store.uri,
                sample_id=first,
            )
        raise CommitConflictError(
            f"sample id {first!r} was also added by a concurrent commit (version "
            f"{part.version}) of {store.uri}; nothing of this write was committed",
            uri=store.uri,
            sample_id=first,
        )


def _base_manifest(store: Store, pending: PendingCommit) -> Manifest | None:
    if pending.base is not None or pending.base_version is None:
        return pending.base
    try:
        return read_manifest(store, pending.base_version)
    except (VersionNotFoundError, OSError):
        return None


def _found_in(store: Store, manifest: Manifest | None, ids: pa.Array) -> str | None:
    """The first of `ids` that `manifest` holds (None if none, or if it is unknown)."""
    if manifest is None:
        return None
    named, uncovered, _ = suspects(store, manifest, np.unique(hash_ids(ids)))
    for part in manifest.index_parts:
        if part.version in named or part.version in uncovered:
            theirs = read_part_table(store, part, ["sample_id"]).column("sample_id")
            hit = pc.is_in(ids, value_set=theirs.combine_chunks())
            if pc.any(hit).as_py():
                return str(ids.filter(hit)[0].as_py())
    return None


def _check_shards_exist(store: Store, pending: PendingCommit) -> None:
    """Refuse to commit shards that are gone (a `gc` with too short a grace period)."""
    expected = {p for s in pending.shards for p in (s.path, s.side_index)}
    if len(expected) <= 4:  # a small append: a HEAD each, not a listing of shards/ (O(N) locally)
        missing = sorted(p for p in expected if not store.exists(p))
    else:
        found = {o.path for o in store.list(f"{SHARDS_DIR}{pending.txn}-")}
        missing = sorted(expected - found)
    if missing:
        raise CommitConflictError(
            f"{len(missing)} object(s) this writer wrote to {store.uri} disappeared before "
            f"the commit (first: {missing[0]}); was gc run with a grace period shorter than "
            "the write? Nothing was committed",
            uri=store.uri,
            shard=missing[0],
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


def tiered_merge(
    parts: Sequence[IndexPart],
    rows: int,
    factor: int = MERGE_FACTOR,
    limit: int = MAX_MERGE_ROWS,
) -> int:
    """How many of the newest `parts` a new part of `rows` rows absorbs: the newest one
    while it holds at most `factor` times the rows absorbed so far (its own included) and
    the merged part stays within `limit` rows (`_tiers.newest_taken`)."""
    return newest_taken([p.num_rows for p in parts], rows, factor=factor, limit=limit)


def commit(store: Store, pending: PendingCommit) -> Manifest:
    """Commit `pending` as the next version of the dataset at `store`.

    Concurrent writers are serialized by the put-if-absent of the manifest: the loser
    re-reads the new version, checks that the two writes do not collide (no shared sample
    id, same schema) and tries the next version number.

    An append merges its index part with the newest parts of the version it commits on
    (`tiered_merge`, docs/format.md §7.6); the parts it replaced are retired from the
    `index/part-*` glob after the commit (`retire_replaced_parts`). A writer that loses
    the race merges again on top of the version that won.

    Returns:
        The committed manifest.

    An `overwrite` commits only on top of the version it started from (another version
    committed since would be silently dropped), then retires the parts it replaced
    (`retire_replaced_parts`).

    Raises:
        DuplicateSampleError: a sample id the dataset already had when the writer started.
        CommitConflictError: a concurrent commit added one of the same sample ids, or
            created the dataset with a different schema, or committed a version after an
            overwrite started.
        DatasetExistsError: a `create` found a committed version.
    """
    staged = staged_part_path(pending.txn)
    table = pending.table
    own_bytes = part_bytes = write_part(table, row_group_size=pending.row_group_size)
    store.put(staged, part_bytes)
    staged_as: tuple[int, ...] | None = ()  # the parts merged into the staged bytes
    _checkpoint("part-staged")
    ids = table.column("sample_id").combine_chunks()
    hashes = hash_ids(ids)
    query = np.unique(hashes)
    read: dict[int, pa.Array] = {}  # sample ids of parts read in full, by version
    tables: dict[int, pa.Table] = {}  # parts read to merge them, by version
    uncovered: set[int] = set()
    usable: list[IdRun] = []
    merged: tuple[IndexPart, ...] = ()
    checked_upto = 0
    latest = pending.base
    for _attempt in range(MAX_COMMIT_ATTEMPTS):
        latest = _latest(store, latest)
        merged = ()
        if latest is not None and pending.mode == "create":
            raise DatasetExistsError(
                f"a concurrent writer created a dataset at {store.uri} (version "
                f"{latest.version}) first; nothing of this write was committed. Pass "
                "mode='append' to add to it or mode='overwrite' to replace its content "
                "(CLI: --append / --overwrite)",
                uri=store.uri,
            )
        if latest is not None and pending.mode == "overwrite":
            if latest.version != pending.base_version:
                raise CommitConflictError(
                    f"version {latest.version} of {store.uri} was committed after this "
                    f"overwrite started from version {pending.base_version}; overwriting "
                    "would silently drop it, so nothing of this write was committed",
                    uri=store.uri,
                )
            ensure_published(store, latest)
        elif latest is not None:
            ensure_published(store, latest)
            conformed = _conform(pending, latest, store)
            if conformed is not table:
                table = conformed
                own_bytes = write_part(table, row_group_size=pending.row_group_size)
                staged_as = None
            named, uncovered, usable = suspects(store, latest, query)
            _check_duplicates(
                store,
                ids,
                [
                    p
                    for p in latest.index_parts
                    if p.version > checked_upto or p.version in uncovered
                    if p.version in named or p.version in uncovered
                ],
                pending,
                read,
            )
            checked_upto = latest.version
            parts = latest.index_parts
            merged = parts[len(parts) - tiered_merge(parts, table.num_rows) :]
        elif pending.base_version is not None:
            raise CommitConflictError(
                f"{store.uri} had version {pending.base_version} when this writer started "
                "but now has none; was it deleted?",
                uri=store.uri,
            )
        if staged_as != tuple(p.version for p in merged):
            part_bytes = (
                _merge(store, merged, table, tables, pending.row_group_size)
                if merged
                else own_bytes
            )
            store.put(staged, part_bytes)
            staged_as = tuple(p.version for p in merged)
        manifest = _next_manifest(latest, pending, table, part_bytes, staged, merged)
        # more than MAX_INLINE_SHARDS inline: into a list, taking in the newest lists of
        # the version this attempt commits on (never reading the others)
        manifest = spill(store, manifest, pending.txn, base=latest)
        if manifest.shard_lists and manifest.shard_lists[-1].version == manifest.version:
            _checkpoint("list-written")
        runs = _id_runs(store, manifest, pending, hashes, merged, usable, uncovered, read, tables)
        manifest = manifest.derive(id_runs=runs)
        _check_shards_exist(store, pending)
        _checkpoint("before-commit")
        if claim_version(store, manifest):
            break
        with suppress(OSError):  # this attempt's runs and list; a later one writes its own
            store.delete(
                [r.path for r in runs if r.path.startswith(f"{IDS_DIR}{pending.txn}-")]
                + [
                    x.path
                    for x in manifest.shard_lists
                    if x.path.startswith(f"{SHARD_LISTS_DIR}{pending.txn}-")
                ]
            )
    else:
        raise CommitConflictError(
            f"gave up committing to {store.uri} after {MAX_COMMIT_ATTEMPTS} attempts: "
            "other writers kept committing first",
            uri=store.uri,
        )
    manifest.bind(store)
    _checkpoint("committed")
    try:
        store.put_if_absent(part_path(manifest.version), part_bytes)
        settle_retirement(store, manifest, latest)
    except ObjectExistsError:  # a concurrent writer published it for us
        if replaced_anything(manifest):
            settle_retirement(store, manifest, latest)
    _checkpoint("published")
    write_hint(store, manifest.version)
    try:
        # not once a later append merged this part and retired it (it then reads from
        # `staged`, which the retirement may have found present and not copied)
        if store.exists(part_path(manifest.version)):
            store.delete(staged)
    except OSError:
        logger.warning("could not remove staged part %s; gc will", staged, exc_info=True)
    return manifest


def replaced_anything(manifest: Manifest) -> bool:
    """Whether `manifest`'s own base part replaced older parts (a merge, a compaction or
    an overwrite of a version that had rows)."""
    newest = manifest.index_parts[-1] if manifest.index_parts else None
    return (
        newest is not None
        and newest.version == manifest.version
        and (newest.since < newest.version or manifest.operation == "overwrite")
    )


def _merge(
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
            got = read_part_table(store, part, None)
        if not got.schema.equals(table.schema):
            got = got.cast(table.schema)
        tables[part.version] = got
    whole = pa.concat_tables([*(tables[p.version] for p in merged), table])
    return write_part(whole, row_group_size=row_group_size)


def _id_runs(
    store: Store,
    manifest: Manifest,
    pending: PendingCommit,
    hashes: np.ndarray,
    merged: Sequence[IndexPart],
    usable: list[IdRun],
    uncovered: set[int],
    read: dict[int, pa.Array],
    tables: dict[int, pa.Table],
) -> tuple[IdRun, ...]:
    """The sample-id runs of `manifest` (`_ids`): the readable runs of its base that
    still cover a current part, a run of the parts no run covered (read in full by the
    duplicate check) unless this commit merged them, and one run of its own part (its new
    ids and those of the parts it merged). An overwrite or a create starts afresh."""
    version = manifest.version
    current = {p.version for p in manifest.index_parts}
    runs: list[IdRun] = []
    if pending.mode != "overwrite" and manifest.parent_version is not None:
        runs.extend(current_runs(usable, current))
        older = sorted(uncovered & current)
        if older:
            h = [hash_ids(read[v]) for v in older]
            runs.append(
                write_run(
                    store,
                    run_path(pending.txn, version, "-older"),
                    np.concatenate(h),
                    np.concatenate(
                        [np.full(len(x), v, np.int64) for x, v in zip(h, older, strict=True)]
                    ),
                    older,
                )
            )
    own = [hashes]
    for part in merged:
        known = part_hashes(store, usable, part.version)
        if known is None:
            known = hash_ids(tables[part.version].column("sample_id"))
        own.append(known)
    mine = np.concatenate(own)
    runs.append(
        write_run(
            store,
            run_path(pending.txn, version),
            mine,
            np.full(len(mine), version, dtype=np.int64),
            {version},
        )
    )
    return tuple(runs)


def _part_version(key: str) -> int | None:
    """The version of a published base part's key (`index/part-NNNNNNNNNN.parquet`)."""
    digits = key.removeprefix(f"{INDEX_DIR}part-").removesuffix(".parquet")
    if len(digits) == 10 and digits.isdigit() and part_path(int(digits)) == key:
        return int(digits)
    return None


def replaced_before(manifest: Manifest) -> int:
    """The version that added the oldest rows `manifest` still lists: the content of
    earlier versions was replaced by an overwrite. Merged parts (tiered appends,
    compaction) keep their oldest rows' version (`IndexPart.since`)."""
    return min((p.since for p in manifest.index_parts), default=manifest.version)


def retire_replaced_parts(
    store: Store, latest: Manifest, known: Manifest | None = None
) -> list[str]:
    """Take the index parts that `latest` no longer lists out of the `index/part-*` glob.

    A part leaves a version's list when an overwrite replaces it or when a merge (a
    tiered append, a compaction) copies its rows into a newer part; no later version
    lists it again. Each published part of a version older than `latest` that `latest`
    does not list is copied back to its staged path (from where ferroload's readers of
    the old versions read it) and then deleted from `index/`, so that the glob shows
    exactly the parts of the latest version. Parts of newer versions are never touched
    (a concurrent append may be publishing one). `known` (a manifest listing replaced
    parts, e.g. the version a merge or compaction read) saves reading the manifest of
    each such part's version. Returns the retired paths.
    """
    live = {p.version for p in latest.index_parts}
    listed = {p.path: p for p in known.index_parts} if known is not None else {}
    retired = []
    for obj in store.list(INDEX_DIR):
        version = _part_version(obj.path)
        if version is None or version >= latest.version or version in live:
            continue
        part = listed.get(obj.path)
        if part is None:
            try:
                old = read_manifest(store, version)
            except VersionNotFoundError:
                continue  # an expired version's part: a leftover that gc deletes
            part = next((p for p in old.index_parts if p.path == obj.path), None)
        if part is None:
            continue
        staged = store.exists(part.staged)
        data = None
        # the bytes are kept to put the staged copy back if its writer removes it after
        # our check (it removes it only while the part is published); not for a part of
        # many MiB whose staged copy is there
        if not staged or part.size <= _RETIRE_KEEP_BYTES:
            try:
                data = store.get(part.path)
            except ObjectNotFoundError:
                continue  # retired by a concurrent writer meanwhile
        if not staged and data is not None:
            store.put(part.staged, data)
        store.delete([part.path])
        if data is not None and not store.exists(part.staged):
            store.put(part.staged, data)
        retired.append(part.path)
        logger.info("retired index part %s of %s (replaced or merged)", part.path, store.uri)
    return retired


def _next_manifest(
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
    first = min((p.since for p in merged), default=None)
    part = IndexPart(
        part_path(version), staged, rows, len(part_bytes), version, first_version=first
    )
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
