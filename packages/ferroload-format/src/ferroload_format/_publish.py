"""After the commit point (docs/format.md §7.1): publishing the index parts a version
added, and retiring from the `index/part-*` glob the parts a newer version replaced.

A committed part is staged until published; the committing writer publishes it, or the
next writer, `gc` or `compact` does (`ensure_published`) when the writer died first.

The glob shows one file per version that added rows (its own rows; `glob_parts`): a
merged part (a tiered append, a compaction) lives outside `index/`, so no merge ever
adds or removes a glob file. Only an overwrite replaces glob files; it keeps a barrier
file in the glob meanwhile (DuckDB refuses a glob that holds a file that is not Parquet),
so that the glob never shows two versions' rows at once.
"""

from __future__ import annotations

import logging

from ferroload_format._errors import FormatError, VersionNotFoundError
from ferroload_format._manifest import Manifest
from ferroload_format._paths import (
    INDEX_DIR,
    MERGED_DIR,
    barrier_path,
    part_path,
    version_path,
)
from ferroload_format._records import IndexPart
from ferroload_format._versions import latest_version, read_manifest
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store

logger = logging.getLogger(__name__)

#: A retired part up to this size is kept in memory until its staged copy is sure to be
#: there (see `retire_replaced_parts`).
_RETIRE_KEEP_BYTES = 64 << 20

#: What a barrier file (`_paths.barrier_path`) holds: DuckDB reads its name in the error.
BARRIER_TEXT = (
    b"ferroload: an overwrite is replacing the index parts of this dataset; this is not "
    b"a Parquet file, so that a glob over index/part-*.parquet fails instead of showing "
    b"two versions' rows. It goes away when the overwrite finishes; if the writer died, "
    b"the next write or `ferroload gc` finishes it.\n"
)


def _checkpoint(name: str) -> None:
    """A named point of retirement (`retired`: after each file that left the glob); does
    nothing. Crash tests replace it, as they replace `_commit._checkpoint`."""


def is_merged(part: IndexPart) -> bool:
    """Whether `part` is a merged part kept outside the glob (docs/format.md §7.6)."""
    return part.path.startswith(MERGED_DIR)


def ensure_published(store: Store, manifest: Manifest, *, settle: bool = True) -> list[str]:
    """Publish the parts (base or layer) that `manifest`'s own version added, if a writer
    died first, and the version's own rows in the glob when its part is merged; then
    (unless `settle` is False: the caller retires) finish the retirement its writer may
    not have finished (`settle_retirement`).

    Only the newest version can have an unpublished part: every commit publishes its
    predecessor's parts before it commits. Returns the keys it published.
    """
    done = []
    barrier = False
    parts = [*manifest.index_parts, *(p for la in manifest.layers for p in la.index_parts)]
    for part in parts:
        if part.version != manifest.version:
            continue
        for source, target in publications(part):
            if store.exists(target):
                continue
            if manifest.operation == "overwrite" and target == part_path(part.version):
                put_barrier(store, manifest.version)
                barrier = True
            if _copy_once(store, source, target):
                done.append(target)
    if settle and (done or barrier or replaced_anything(manifest)):
        settle_retirement(store, manifest)
    return done


def publications(part: IndexPart) -> list[tuple[str, str]]:
    """(staged, published) keys of what a version's new `part` publishes, in order: the
    part, then, for a merged part outside the glob, the version's own rows in the glob
    (docs/format.md §7.6)."""
    out = [(part.staged, part.path)]
    if part.own_staged is not None:
        out.append((part.own_staged, part_path(part.version)))
    return out


def _copy_once(store: Store, source: str, target: str) -> bool:
    """Put the bytes at `source` at `target` unless it is there by now; whether it did."""
    try:
        data = store.get(source)
    except ObjectNotFoundError:
        # published and staging collected between the exists() check and now
        if store.exists(target):
            return False
        raise
    try:
        store.put_if_absent(target, data)
    except ObjectExistsError:
        return False
    logger.info("published index part %s of %s (its writer stopped early)", target, store.uri)
    return True


def put_barrier(store: Store, version: int) -> None:
    """Keep DuckDB off the glob while an overwrite committing `version` replaces its
    files (`BARRIER_TEXT`); `retire_replaced_parts` removes it."""
    store.put(barrier_path(version), BARRIER_TEXT)


def settle_retirement(store: Store, manifest: Manifest, known: Manifest | None = None) -> None:
    """After publishing a part of `manifest`: retire the parts it replaced, and, when a
    newer version was committed meanwhile, every part that one no longer lists. (A newer
    overwrite may have retired this very part before this publish put it back: only a
    check after the publish sees that.) Failures are logged; `gc` finishes.
    """
    try:
        # versions are claimed in sequence: a newer one exists iff the next one does
        newer = store.exists(version_path(manifest.version + 1))
        newest = latest_version(store) if newer else None
        if newest is not None and newest > manifest.version:
            retire_replaced_parts(store, read_manifest(store, newest))
        elif replaced_anything(manifest):
            retire_replaced_parts(store, manifest, known)
    except (OSError, FormatError):
        logger.warning("could not retire replaced parts of %s; gc will", store.uri, exc_info=True)


def replaced_anything(manifest: Manifest) -> bool:
    """Whether `manifest` may have left files in the glob that do not show its rows: an
    overwrite (merges add none and take none away), or a version that lists a merged part
    inside the glob, as a ferroload before format 1.4 left them (`has_glob_merges`)."""
    return manifest.operation == "overwrite" or has_glob_merges(manifest)


def has_glob_merges(manifest: Manifest) -> bool:
    """Whether `manifest` lists a merged part inside the glob, as ferroload before format
    1.4 wrote them (its merged-away parts must be out of the glob before a part outside
    the glob covers their versions: `glob_parts` counts every file in such a range)."""
    return any(p.since < p.version and not is_merged(p) for p in manifest.index_parts)


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


def _barrier_version(key: str) -> int | None:
    """The version of an overwrite's barrier key (`_paths.barrier_path`)."""
    digits = key.removeprefix(f"{INDEX_DIR}part-").removesuffix("-overwriting.parquet")
    if len(digits) == 10 and digits.isdigit() and barrier_path(int(digits)) == key:
        return int(digits)
    return None


def glob_parts(store: Store, manifest: Manifest, listing: list[str] | None = None) -> set[str]:
    """The files of the `index/part-*` glob that show `manifest`'s rows, each once.

    A part at its glob path (`index/part-<version>.parquet`) shows itself. A merged part
    outside the glob (`_ferroload/merged/`, docs/format.md §7.6) covering versions
    `since..version` is shown by the files `index/part-K.parquet` of those versions that
    have one: each holds the rows version `K` added. `listing` is the keys under
    `index/` when the caller has them.
    """
    merged = [p for p in manifest.index_parts if is_merged(p)]
    out = {p.path for p in manifest.index_parts if not is_merged(p)}
    if merged:
        if listing is None:
            listing = [o.path for o in store.list(INDEX_DIR)]
        for key in listing:
            v = _part_version(key)
            if v is not None and any(p.since <= v <= p.version for p in merged):
                out.add(key)
    return out


def retire_replaced_parts(
    store: Store, latest: Manifest, known: Manifest | None = None
) -> list[str]:
    """Take out of the `index/part-*` glob every file that does not show `latest`'s rows.

    Glob files leave when an overwrite replaces the content (and, in datasets written
    before format 1.4, when a merge copied a part's rows into a newer part inside the
    glob). Each such file of a version older than `latest` is deleted from `index/`; when
    a version still reads it there (a part at its glob path), it is first copied back to
    its staged path, from where ferroload's readers of the old versions read it. Files of
    newer versions are never touched (a concurrent append may be publishing one). Then
    the barriers of overwrites up to `latest` are removed. `known` (a manifest listing
    replaced parts, e.g. the version an overwrite read) saves reading the manifest of each
    such part's version. Returns the retired paths.
    """
    listing = [o.path for o in store.list(INDEX_DIR)]
    keep = glob_parts(store, latest, listing)
    listed = {p.path: p for p in known.index_parts} if known is not None else {}
    retired = []
    for key in listing:
        version = _part_version(key)
        if version is None or version >= latest.version or key in keep:
            continue
        part = listed.get(key)
        if part is None:
            try:
                old = read_manifest(store, version)
                part = next((p for p in old.index_parts if p.path == key), None)
            except VersionNotFoundError:
                pass  # an expired version's part
        if part is None:  # the own rows of a merged part, or an expired version's part:
            store.delete([key])  # no reader reads it at this path
        elif not _retire_read_part(store, part):
            continue
        retired.append(key)
        logger.info("retired index part %s of %s (replaced or merged)", key, store.uri)
        _checkpoint("retired")
    barriers = []
    for key in listing:
        version = _barrier_version(key)
        if version is not None and version <= latest.version:
            barriers.append(key)
    if barriers:
        store.delete(barriers)
    return retired


def _retire_read_part(store: Store, part: IndexPart) -> bool:
    """Move `part`, which an old version reads at its glob path, to its staged path (if
    absent there); False when it is gone already (retired by a concurrent writer)."""
    staged = store.exists(part.staged)
    data = None
    # the bytes are kept to put the staged copy back if its writer removes it after
    # our check (it removes it only while the part is published); not for a part of
    # many MiB whose staged copy is there
    if not staged or part.size <= _RETIRE_KEEP_BYTES:
        try:
            data = store.get(part.path)
        except ObjectNotFoundError:
            return False
    if not staged and data is not None:
        store.put(part.staged, data)
    store.delete([part.path])
    if data is not None and not store.exists(part.staged):
        store.put(part.staged, data)
    return True
