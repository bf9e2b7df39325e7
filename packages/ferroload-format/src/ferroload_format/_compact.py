"""`compact`: merge a version's index parts into one, as a new committed version
(docs/format.md §7.5)."""

from __future__ import annotations

import logging
from contextlib import suppress

import numpy as np
import pyarrow as pa

from ferroload_format._commit import claim_version
from ferroload_format._errors import CommitConflictError
from ferroload_format._ids import hash_ids, run_path, write_run
from ferroload_format._index import ROW_GROUP_SIZE, index_schema, write_part
from ferroload_format._manifest import Manifest, utc_now
from ferroload_format._names import new_txn_id
from ferroload_format._part_schema import read_part_as
from ferroload_format._paths import merged_part_path, staged_part_path
from ferroload_format._publish import ensure_published, has_glob_merges, retire_replaced_parts
from ferroload_format._records import IndexPart
from ferroload_format._rs011 import refuse_write
from ferroload_format._shard_lists import fold
from ferroload_format._versions import read_manifest, write_hint
from ferroload_store import ObjectExistsError, Store

logger = logging.getLogger(__name__)


def _checkpoint(name: str) -> None:
    """A named point of compaction (`compact-staged`, `compact-committed`); crash tests
    replace it."""


def compact_store(store: Store, manifest: Manifest) -> Manifest:
    """Commit, on top of `manifest` (which must still be the latest version), a version
    whose base index is one part holding the same rows in the same order, and whose
    shards (the same, in the same order) are in one shard list, or all inline when they
    are few (docs/format.md §6.2).

    Returns:
        The new manifest, or `manifest` itself when it has a single part and at most one
        place for its shards (one list, or only inline shards) already.

    Raises:
        CommitConflictError: another version was committed after `manifest` (nothing of
            the compaction is committed; run it again).
    """
    refuse_write(manifest, store.uri, "compact")
    lists = len(manifest.shard_lists) + (1 if manifest.inline_shards else 0)
    if len(manifest.index_parts) <= 1 and (lists <= 1 or not manifest.shard_lists):
        return manifest
    ensure_published(store, manifest)
    if has_glob_merges(manifest):
        # written before format 1.4: what its merges replaced leaves the glob before the
        # compacted part, outside it, covers their versions (`_publish.glob_parts`)
        retire_replaced_parts(store, manifest)
    txn = new_txn_id()
    version = manifest.version + 1
    written: list[str] = []
    new = fold(store, manifest, txn, version)
    written += [x.path for x in new.shard_lists if x.version == version]
    stats = dict(manifest.statistics)
    data: bytes | None = None  # one part: it stays as it is, only the lists are folded
    if len(manifest.index_parts) > 1:
        target = index_schema([m.name for m in manifest.modalities], manifest.metadata)
        tables = [read_part_as(store, p, target) for p in manifest.index_parts]
        table = pa.concat_tables(tables)
        data = part_bytes = write_part(table, row_group_size=ROW_GROUP_SIZE)
        staged = staged_part_path(txn)
        store.put(staged, part_bytes)
        hashes = hash_ids(table.column("sample_id"))
        run = write_run(
            store,
            run_path(txn, version),
            hashes,
            np.full(len(hashes), version, dtype=np.int64),
            {version},
        )
        written += [staged, run.path]
        stats["index_bytes"] = len(part_bytes)
        new = new.derive(
            index_parts=(
                IndexPart(  # outside the glob, which keeps its files (docs/format.md §7.5)
                    merged_part_path(version),
                    staged,
                    table.num_rows,
                    len(part_bytes),
                    version,
                    first_version=min(p.since for p in manifest.index_parts),
                ),
            ),
            id_runs=(run,),
        )
    _checkpoint("compact-staged")
    new = new.derive(
        version=version,
        parent_version=manifest.version,
        created_at=utc_now(),
        txn=txn,
        operation="compact",
        statistics=stats,
    )
    if read_manifest(store).version != manifest.version or not claim_version(store, new):
        with suppress(OSError):
            store.delete(written)
        raise CommitConflictError(
            f"a version of {store.uri} was committed after version {manifest.version}, "
            "which this compaction read; nothing was committed. Run compact() again",
            uri=store.uri,
        )
    new.bind(store)
    _checkpoint("compact-committed")
    if data is not None:
        with suppress(ObjectExistsError):
            store.put_if_absent(merged_part_path(version), data)
    write_hint(store, version)
    if data is not None:
        with suppress(OSError):
            store.delete([staged_part_path(txn)])
    logger.info(
        "compacted %d index parts and %d shard lists of %s (version %d)",
        len(manifest.index_parts),
        len(manifest.shard_lists),
        store.uri,
        version,
    )
    return new
