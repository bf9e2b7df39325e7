"""The commit protocol (docs/format.md §7): atomic, versioned commits on any backend.

The commit point is a put-if-absent of the next version's manifest. Everything a writer
produced before that point is invisible; a part committed but not yet published is
published by the next writer, by `gc`, or read from staging by readers (`_publish`).

`commit` runs the protocol: it stages the write's index part, then, until it claims a
version, checks the write against the latest version (`_pending`: schema, shards; here:
sample ids, through the sample-id runs of `_ids`), merges the newest parts, builds the
next manifest and writes its sample-id runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format._errors import (
    CommitConflictError,
    DatasetExistsError,
    DatasetNotFoundError,
    DuplicateSampleError,
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
from ferroload_format._index import write_part
from ferroload_format._manifest import Manifest
from ferroload_format._part_files import read_part_table
from ferroload_format._paths import (
    IDS_DIR,
    SHARD_LISTS_DIR,
    part_path,
    staged_own_path,
    staged_part_path,
    version_path,
)
from ferroload_format._pending import (
    PendingCommit,
    check_shards_exist,
    conform,
    merged_part,
    next_manifest,
)
from ferroload_format._publish import (
    ensure_published,
    has_glob_merges,
    publications,
    put_barrier,
    retire_replaced_parts,
    settle_retirement,
)
from ferroload_format._records import IdRun, IndexPart
from ferroload_format._rs011 import refuse_write
from ferroload_format._shard_lists import spill
from ferroload_format._tiers import MERGE_FACTOR, newest_taken
from ferroload_format._versions import latest_version, read_manifest, write_hint
from ferroload_store import ObjectExistsError, Store

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


def _checkpoint(name: str) -> None:
    """A named point of the commit protocol.

    Does nothing. Crash tests replace it, in a child process, with a function that kills
    the process at one of: `shards-written`, `part-staged`, `list-written` (a commit
    that moves its inline shards into a shard list), `before-commit`, `committed`,
    `barrier-put` (an overwrite), `merged-published` (a merge's part, before its own rows
    join the glob), `published`; layers add `partition-shard-written` and
    `partition-staged`; `_publish._checkpoint` adds `retired` (after each part that
    leaves the glob).
    """


def claim_version(store: Store, manifest: Manifest) -> bool:
    """The commit point: put `manifest` as its version if that version is still free.

    Returns:
        False (and logs it) when a concurrent writer took the version number first;
        the caller re-reads the latest version and retries.
    """
    refuse_write(manifest, store.uri, "a commit")
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
            conformed = conform(pending, latest, store)
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
        if merged and latest is not None and has_glob_merges(latest):
            # written before format 1.4: what its merges replaced leaves the glob before a
            # part outside it covers their versions (`glob_parts`)
            retire_replaced_parts(store, latest)
        if staged_as != tuple(p.version for p in merged):
            part_bytes = own_bytes
            if merged:
                part_bytes = merged_part(store, merged, table, tables, pending.row_group_size)
                store.put(staged_own_path(pending.txn), own_bytes)
            store.put(staged, part_bytes)
            staged_as = tuple(p.version for p in merged)
        manifest = next_manifest(latest, pending, table, part_bytes, staged, merged)
        # more than MAX_INLINE_SHARDS inline: into a list, taking in the newest lists of
        # the version this attempt commits on (never reading the others)
        manifest = spill(store, manifest, pending.txn, base=latest)
        if manifest.shard_lists and manifest.shard_lists[-1].version == manifest.version:
            _checkpoint("list-written")
        runs = _id_runs(store, manifest, pending, hashes, merged, usable, uncovered, read, tables)
        manifest = manifest.derive(id_runs=runs)
        check_shards_exist(store, pending)
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
    _publish_own(store, manifest, part_bytes, own_bytes, latest)
    _checkpoint("published")
    write_hint(store, manifest.version)
    try:
        # not once a later overwrite retired the part (it then reads from `staged`, which
        # the retirement may have found present and not copied)
        done = [
            source
            for source, target in publications(manifest.index_parts[-1])
            if store.exists(target)
        ]
        store.delete(done)
    except OSError:
        logger.warning("could not remove staged part %s; gc will", staged, exc_info=True)
    return manifest


def _publish_own(
    store: Store, manifest: Manifest, part_bytes: bytes, own_bytes: bytes, known: Manifest | None
) -> None:
    """Publish the new base part of the version this writer committed (§7 step 5): a
    merged part first (outside the glob), then the version's own rows, so that the glob
    goes from the previous version's rows to this version's in one put; an overwrite keeps
    a barrier in the glob until the parts it replaced are retired."""
    if manifest.operation == "overwrite":
        put_barrier(store, manifest.version)
        _checkpoint("barrier-put")
    part = manifest.index_parts[-1]
    for (_, target), data in zip(publications(part), (part_bytes, own_bytes), strict=False):
        with suppress(ObjectExistsError):  # a concurrent writer published it for us
            store.put_if_absent(target, data)
        if target != part_path(part.version):
            _checkpoint("merged-published")
    settle_retirement(store, manifest, known)


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
