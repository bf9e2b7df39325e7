"""After the commit point (docs/format.md §7.1): publishing the index parts a version
added, and retiring from the `index/part-*` glob the parts a newer version replaced.

A committed part is staged until published; the committing writer publishes it, or the
next writer, `gc` or `compact` does (`ensure_published`) when the writer died first.
"""

from __future__ import annotations

import logging

from ferroload_format._errors import FormatError, VersionNotFoundError
from ferroload_format._manifest import Manifest
from ferroload_format._paths import INDEX_DIR, part_path, version_path
from ferroload_format._versions import latest_version, read_manifest
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store

logger = logging.getLogger(__name__)

#: A retired part up to this size is kept in memory until its staged copy is sure to be
#: there (see `retire_replaced_parts`).
_RETIRE_KEEP_BYTES = 64 << 20


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


def replaced_anything(manifest: Manifest) -> bool:
    """Whether `manifest`'s own base part replaced older parts (a merge, a compaction or
    an overwrite of a version that had rows)."""
    newest = manifest.index_parts[-1] if manifest.index_parts else None
    return (
        newest is not None
        and newest.version == manifest.version
        and (newest.since < newest.version or manifest.operation == "overwrite")
    )


def replaced_before(manifest: Manifest) -> int:
    """The version that added the oldest rows `manifest` still lists: the content of
    earlier versions was replaced by an overwrite. Merged parts (tiered appends,
    compaction) keep their oldest rows' version (`IndexPart.since`)."""
    return min((p.since for p in manifest.index_parts), default=manifest.version)


def _part_version(key: str) -> int | None:
    """The version of a published base part's key (`index/part-NNNNNNNNNN.parquet`)."""
    digits = key.removeprefix(f"{INDEX_DIR}part-").removesuffix(".parquet")
    if len(digits) == 10 and digits.isdigit() and part_path(int(digits)) == key:
        return int(digits)
    return None


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
