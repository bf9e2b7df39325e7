"""`gc`: publish what a dead writer committed, delete what nothing committed references."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ferroload_format._commit import ensure_published
from ferroload_format._manifest import INDEX_DIR, SHARDS_DIR, STAGING_DIR
from ferroload_format._versions import list_versions, read_manifest
from ferroload_store import open_store

logger = logging.getLogger(__name__)

#: Objects younger than this are left alone: a writer may still be producing them.
DEFAULT_GRACE = timedelta(hours=1)


@dataclass
class GcReport:
    """What `gc` did (or, with `dry_run`, would do)."""

    uri: str
    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    published: list[str] = field(default_factory=list)
    kept_young: int = 0
    dry_run: bool = False


def gc(
    uri: str | os.PathLike[str],
    *,
    grace: timedelta = DEFAULT_GRACE,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> GcReport:
    """Clean a dataset root of what crashed or aborted writers left behind.

    Publishes the index part of the latest version if its writer died between commit and
    publish, then deletes every object under `shards/`, `index/` and
    `_ferroload/staging/` that no committed version references and that is older than
    `grace`. Committed versions are never touched.

    Args:
        uri: the dataset root.
        grace: leave younger leftovers alone (a writer may still be working on them).
            Use `timedelta(0)` only when no writer is running.
        dry_run: report what would be deleted, change nothing.
        storage_options: backend options for obstore.

    Returns:
        What was deleted and published.

    Raises:
        DatasetNotFoundError: if `uri` holds no dataset.
    """
    store = open_store(uri, storage_options=storage_options)
    latest = read_manifest(store)
    report = GcReport(store.uri, dry_run=dry_run)
    if not dry_run:
        report.published = ensure_published(store, latest)
    referenced: set[str] = set()
    for v in list_versions(store):
        m = latest if v == latest.version else read_manifest(store, v)
        for s in m.shards:
            referenced.update((s.path, s.side_index))
        for p in m.index_parts:
            referenced.add(p.path)
            if dry_run and p.version == latest.version:
                referenced.add(p.staged)
    cutoff = datetime.now(UTC) - grace
    doomed = []
    for prefix in (SHARDS_DIR, INDEX_DIR, STAGING_DIR):
        for obj in store.list(prefix):
            if obj.path in referenced:
                continue
            if obj.last_modified > cutoff:
                report.kept_young += 1
                continue
            doomed.append(obj.path)
            report.bytes_freed += obj.size
    report.deleted = doomed
    if doomed and not dry_run:
        store.delete(doomed)
        logger.info(
            "gc deleted %d leftover objects (%d bytes) from %s",
            len(doomed),
            report.bytes_freed,
            store.uri,
        )
    return report
