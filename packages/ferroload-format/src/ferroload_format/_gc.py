"""`gc`: publish what a dead writer committed, expire old versions when asked, delete what
nothing committed references."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ferroload_format._layer_parts import PARTITION_META, PARTITION_RE
from ferroload_format._manifest import Manifest
from ferroload_format._paths import (
    IDS_DIR,
    INDEX_DIR,
    LAYERS_DIR,
    MERGED_DIR,
    SHARD_LISTS_DIR,
    SHARDS_DIR,
    STAGING_DIR,
    version_path,
)
from ferroload_format._plugins import resolve_uri
from ferroload_format._publish import (
    ensure_published,
    glob_parts,
    publications,
    retire_replaced_parts,
)
from ferroload_format._records import ShardList
from ferroload_format._rs011 import refuse_write
from ferroload_format._shard_lists import read_shard_list
from ferroload_format._versions import list_versions, read_manifest
from ferroload_store import ObjectInfo, Store, StoreError, open_store

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
    expired: list[int] = field(default_factory=list)
    """Versions whose manifests `keep_versions` expired (deleted)."""
    retired: list[str] = field(default_factory=list)
    """Index parts an overwrite or a merge replaced, taken out of the `index/part-*` glob."""


def gc(
    uri: str | os.PathLike[str],
    *,
    grace: timedelta = DEFAULT_GRACE,
    keep_versions: int | None = None,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> GcReport:
    """Clean a dataset root of what crashed or aborted writers left behind.

    Publishes the index part of the latest version if its writer died between commit and
    publish, then deletes every object under `shards/`, `index/`, `_ferroload/staging/`,
    `_ferroload/merged/`, `_ferroload/ids/` and `_ferroload/shardlists/` that no committed version references
    (the shards of a kept version's shard lists included: each list is read once) and
    that is older than `grace`. Under `layers/` it does the same for layer shards and index parts, and
    deletes a layer's staging folder (a map that was never committed) once everything in
    it is older than `grace`; the shards of a staging folder it keeps are kept too.
    Committed versions are kept unless `keep_versions` is given: then the manifests of
    versions older than the newest `keep_versions` are deleted (oldest first) once the
    version after each was committed more than `grace` ago, and what only they referenced
    (e.g. the shards of content an overwrite replaced) becomes a leftover deleted in the
    same run. It also finishes an overwrite that died before taking the index parts it
    replaced (and its barrier) out of the `index/part-*` glob, and retires what a merge
    of a ferroload before format 1.4 left there. On a local
    root, nothing reached through a symlink is listed, deleted or published
    (docs/format.md, "Paths").

    Args:
        uri: the dataset root (or `catalog:NAME`, with the entry's storage options).
        grace: leave younger leftovers alone (a writer may still be working on them).
            Use `timedelta(0)` only when no writer is running.
        keep_versions: keep only the newest this many versions (at least 1); None (the
            default) keeps every committed version readable.
        dry_run: report what would be deleted, change nothing.
        storage_options: backend options for obstore.

    Returns:
        What was deleted and published.

    Raises:
        DatasetNotFoundError: if `uri` holds no dataset.
        ValueError: for a `keep_versions` below 1.
        UnsafePathError: if a manifest names a path that could leave the root (a staged
            part outside it is never published).
        ManifestError: if a kept version's shard list is missing or damaged (nothing is
            deleted: the shards it lists could not be told from leftovers).
    """
    if keep_versions is not None and (
        not isinstance(keep_versions, int) or isinstance(keep_versions, bool) or keep_versions < 1
    ):
        raise ValueError(f"keep_versions must be a positive int or None, got {keep_versions!r}")
    if isinstance(uri, str):  # `catalog:name`, with the entry's storage options
        uri, storage_options = resolve_uri(uri, storage_options)
    store = open_store(uri, storage_options=storage_options)
    latest = read_manifest(store)
    refuse_write(latest, store.uri, "gc")  # every 0.1.1 file would look like a leftover
    report = GcReport(store.uri, dry_run=dry_run)
    if not dry_run:
        report.published = ensure_published(store, latest, settle=False)  # retired below
    cutoff = datetime.now(UTC) - grace
    manifests = {
        v: latest if v == latest.version else read_manifest(store, v) for v in list_versions(store)
    }
    if keep_versions is not None:
        report.expired = _expired(manifests, latest, keep_versions, cutoff)
        for v in report.expired:
            del manifests[v]
    # the shards of the kept versions' lists, read before anything is deleted: a list
    # that cannot be read stops gc (ManifestError), as its shards look like leftovers
    referenced = _listed(store, manifests)
    if report.expired and not dry_run:
        for v in report.expired:  # oldest first: a crash leaves a shorter history
            store.delete([version_path(v)])
        logger.info("gc expired versions %s of %s", report.expired, store.uri)
    if not dry_run:
        report.retired = retire_replaced_parts(store, latest)
    live = {p.path for p in latest.index_parts}
    # the glob's files of the latest version: one per version that added rows
    referenced.update(glob_parts(store, latest))
    for m in manifests.values():
        shards = [*m.inline_shards, *(s for la in m.layers for s in la.shards)]
        for s in shards:
            referenced.update((s.path, s.side_index))
        for p in (*m.index_parts, *(p for la in m.layers for p in la.index_parts)):
            referenced.add(p.path)
            if dry_run and p.version == latest.version:
                referenced.update(source for source, _ in publications(p))
        # a part that an overwrite or a merge replaced lives at its staged path
        # (retire_replaced_parts)
        referenced.update(p.staged for p in m.index_parts if p.path not in live)
        referenced.update(r.path for r in m.id_runs)
    doomed = []
    layer_objects = store.list(LAYERS_DIR)
    in_progress = _in_progress_layers(store, layer_objects, cutoff)
    prefixes = (SHARDS_DIR, INDEX_DIR, MERGED_DIR, STAGING_DIR, IDS_DIR, SHARD_LISTS_DIR)
    for prefix in (*prefixes, LAYERS_DIR):
        for obj in layer_objects if prefix == LAYERS_DIR else store.list(prefix):
            if obj.path in referenced:
                continue
            if obj.last_modified > cutoff or obj.path in in_progress:
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


def _listed(store: Store, manifests: dict[int, Manifest]) -> set[str]:
    """The shard lists of `manifests` and every shard and side index they list (each
    list read once, however many versions reference it)."""
    lists: dict[str, tuple[ShardList, int]] = {}
    for m in manifests.values():
        for lst in m.shard_lists:
            lists.setdefault(lst.path, (lst, m.version))
    out: set[str] = set()
    for lst, v in lists.values():
        out.add(lst.path)
        for s in read_shard_list(store, lst, manifest_uri=f"{store.uri}/{version_path(v)}"):
            out.update((s.path, s.side_index))
    return out


def _expired(
    manifests: dict[int, Manifest], latest: Manifest, keep: int, cutoff: datetime
) -> list[int]:
    """Versions older than the newest `keep` whose successor was committed before
    `cutoff`, oldest first (a version is kept while its successor is younger: a reader may
    have opened it just before)."""
    versions = sorted(manifests)
    out = []
    for i, v in enumerate(versions[:-keep]):
        if v == latest.version or _committed_at(manifests[versions[i + 1]]) > cutoff:
            break
        out.append(v)
    return out


def _committed_at(manifest: Manifest) -> datetime:
    """When `manifest` was committed (its `created_at`; unreadable: now, i.e. young)."""
    try:
        return datetime.fromisoformat(manifest.created_at.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


def _staging_folder(path: str) -> str | None:
    """`layers/<name>/_staging/<identity>/` when `path` lies in one, else None."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[2] == "_staging":
        return "/".join(parts[:4]) + "/"
    return None


def _in_progress_layers(store: Store, objects: list[ObjectInfo], cutoff: datetime) -> set[str]:
    """Everything a layer map still working may need: every object of a staging folder
    that holds an object younger than `cutoff`, and the shards its partitions wrote."""
    folders: dict[str, list[ObjectInfo]] = {}
    for obj in objects:
        folder = _staging_folder(obj.path)
        if folder is not None:
            folders.setdefault(folder, []).append(obj)
    keep: set[str] = set()
    for folder, objs in folders.items():
        if all(o.last_modified <= cutoff for o in objs):
            continue  # abandoned: collected as a whole
        keep.update(o.path for o in objs)
        for o in objs:
            if not PARTITION_RE.fullmatch(o.path[len(folder) :]):
                continue
            try:
                meta = pq.read_schema(pa.BufferReader(store.get(o.path))).metadata or {}
                shard = json.loads(meta.get(PARTITION_META, b"{}")).get("shard")
            except (OSError, ValueError, StoreError):
                logger.warning("gc could not read staged partition %s", o.path, exc_info=True)
                continue
            if shard:
                keep.update((str(shard["path"]), str(shard["side_index"])))
    return keep
