"""`upgrade`: turn a ferroload-rs 0.1.1 root into a current one in place (docs/format.md §11.3).

Only metadata is written: the shards stay where they are, byte for byte. The steps,
each safe to stop at (a kill leaves a root that opens with every sample; a rerun
finishes):

1. read every payload once, for the xxh3-64 checksums 0.1.1 never recorded;
2. copy 0.1.1's index files to `_ferroload/rs011/` and point its manifests
   (`versions/vN.json`, then `manifest.json`) at the copies: 0.1.1 keeps reading the root;
3. put a barrier in the `index/part-*` glob (not Parquet: DuckDB refuses the glob rather
   than mix the two formats' rows), delete the originals from `index/`;
4. write this format's index parts, then commit one manifest per 0.1.1 version (the
   latest first: from then on ferroload reads the root as current);
5. remove the barrier.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow.compute as pc
import xxhash

from ferroload_core import ProgressArg, progress_reporter
from ferroload_format._errors import DatasetNotFoundError
from ferroload_format._index import write_part
from ferroload_format._manifest import Manifest
from ferroload_format._paths import VERSIONS_DIR, barrier_path, part_path, version_path
from ferroload_format._publish import BARRIER_TEXT
from ferroload_format._rs011 import (
    LEGACY_MANIFEST,
    LEGACY_VERSIONS,
    MOVED_DIR,
    _np,
    legacy_versions,
    read_legacy,
    translate,
    version_time,
)
from ferroload_format._versions import write_hint
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store, open_store

#: Payload bytes read per request while checksumming.
_CHUNK_BYTES = 64 << 20
#: The extension an upgraded manifest carries: where it came from.
EXTENSION = "ferroload_rs"


def _checkpoint(name: str) -> None:
    """A named step of the upgrade; does nothing. Crash tests replace it."""


@dataclass
class UpgradeReport:
    """What `upgrade` did.

    Attributes:
        uri: the dataset root.
        status: `upgraded` (converted now), `finished` (a stopped upgrade completed), or
            `current` (nothing to do: the root is in the current format).
        versions: the versions the root has, 0.1.1's history kept one for one.
        samples: samples of the latest version.
        renamed_keys: 0.1.1 keys that are not valid sample ids here, and got another id
            (the key itself is kept in the `basename` column).
        bytes_read: payload bytes read for the checksums.
        bytes_written: bytes written (index parts, manifests, copies of 0.1.1's index
            files); never a shard byte.
        seconds: wall time.
        not_kept: what of the 0.1.1 root the current format does not carry over.
    """

    uri: str
    status: str = "current"
    versions: int = 0
    samples: int = 0
    renamed_keys: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    not_kept: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return asdict(self)


def upgrade(
    uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: ProgressArg = None,
) -> UpgradeReport:
    """Upgrade the ferroload-rs 0.1.1 dataset at `uri` to the current format, in place.

    Every sample, key, metadata column, modality, layer and version is kept; shard bytes
    are read once (for checksums) and never rewritten. Idempotent: on a current root it
    does nothing, on a root whose upgrade was stopped it finishes. ferroload-rs 0.1.1
    still reads the root afterwards, as it was at the upgrade.

    Args:
        uri: the dataset root (local path, `s3://…`, `gs://…`, `az://…`, `memory://…`).
        storage_options: backend options for obstore (credentials, endpoint, …).
        progress: a bar over the shards read (True/False/None: automatic, or a callable
            `(done, total)`).

    Raises:
        DatasetNotFoundError: nothing at `uri`.
        ManifestError: the 0.1.1 dataset is damaged or has something this format cannot
            hold (the message names it; nothing was changed).
    """
    start = time.perf_counter()
    store = open_store(uri, storage_options=storage_options)
    report = UpgradeReport(store.uri)
    legacy = store.exists(LEGACY_MANIFEST)
    ours = bool(store.list(VERSIONS_DIR))
    if not legacy and not ours:
        raise DatasetNotFoundError(f"no dataset at {store.uri}", uri=store.uri)
    if not legacy:
        return _done(report, store, start)
    versions = legacy_versions(store)
    latest = versions[-1]
    missing = [v for v in versions if not store.exists(version_path(v))]
    if ours and not missing:
        if _finish_glob(store):
            report.status = "finished"
        return _done(report, store, start)
    report.status = "finished" if ours else "upgraded"

    # every version translated first: what this format cannot hold fails before a write
    views = [translate(store, v) for v in versions]
    base = next(iter(views[-1].parts.values()))
    keys = base.column("basename") if "basename" in base.column_names else None
    if keys is not None:
        ids = base.column("sample_id")
        report.renamed_keys = int(pc.sum(pc.not_equal(ids, keys)).as_py() or 0)
    checksums = _checksums(store, [t for v in views for t in v.parts.values()], progress, report)
    _checkpoint("checksummed")

    _move_legacy_index(store, versions, report)
    _checkpoint("moved")
    store.put(barrier_path(1), BARRIER_TEXT)
    _checkpoint("barrier")
    _delete_legacy_originals(store, versions)
    _checkpoint("originals-deleted")

    manifests: dict[int, Manifest] = {}
    written: set[str] = set()
    first_seen: dict[str, tuple[int, str]] = {}
    for v in versions:
        raw, _ = read_legacy(store, v)
        keys_of = {"base": part_path(1)}
        for la in raw.get("layers") or []:
            name = la["name"]
            record = json.dumps(la, sort_keys=True)
            seen = first_seen.get(name)
            if seen is None or seen[1] != record:
                first_seen[name] = seen = (v, record)
            keys_of[name] = f"layers/{name}/index/part-{seen[0]:010d}.parquet"
        t = translate(store, v, checksums=checksums, part_keys=keys_of)
        doc = t.manifest
        sizes: dict[str, int] = {}
        for key, table in t.parts.items():
            data = write_part(table)
            sizes[key] = len(data)
            if key not in written:  # the same bytes again on a rerun: harmless
                store.put(key, data)
                report.bytes_written += len(data)
            written.add(key)
        for part in doc["index_parts"]:
            part["size"] = sizes[part["path"]]
        for la in doc.get("layers", []):
            for part in la["index_parts"]:
                part["size"] = sizes[part["path"]]
        doc["statistics"]["index_bytes"] = sum(p["size"] for p in doc["index_parts"])
        doc["extensions"] = {EXTENSION: {"version": "0.1.1", "legacy_version": v}}
        manifests[v] = Manifest.from_json(doc, uri=f"{store.uri}/{version_path(v)}")
    _checkpoint("parts-written")
    for v in [latest, *versions[:-1]]:  # the latest first: it is what readers open
        data = manifests[v].to_bytes()
        try:
            store.put_if_absent(version_path(v), data)
            report.bytes_written += len(data)
        except ObjectExistsError:
            pass
        _checkpoint(f"committed-{v}")
    _finish_glob(store)
    write_hint(store, latest)
    return _done(report, store, start)


def _done(report: UpgradeReport, store: Store, start: float) -> UpgradeReport:
    from ferroload_format._versions import list_versions, read_manifest

    found = list_versions(store)
    report.versions = len(found)
    if found:
        m = read_manifest(store)
        report.samples = m.num_samples
        if EXTENSION in m.extensions:
            report.not_kept = [
                "0.1.1 rewrote a layer's index in place when a map ran again under the "
                "same name: every version that lists such a layer reads its last contents, "
                "as it did under 0.1.1",
                "created_utc was empty in 0.1.1 manifests: each version's time is that of "
                "its versions/vN.json",
            ]
    report.seconds = time.perf_counter() - start
    return report


def _checksums(
    store: Store, tables: Any, progress: ProgressArg, report: UpgradeReport
) -> dict[tuple[str, int, int], int]:
    """xxh3-64 of every payload the tables locate, by (shard, offset, length)."""
    by_shard: dict[str, set[tuple[int, int]]] = {}
    for table in tables:
        shards = table.column("shard").to_pylist()
        for name in table.column_names:
            col = table.column(name)
            if not hasattr(col.type, "get_field_index") or col.type.get_field_index("present") < 0:
                continue
            present = _np(pc.struct_field(col, "present"))
            off = _np(pc.struct_field(col, "offset"))
            length = _np(pc.struct_field(col, "length"))
            for i in np.flatnonzero(present):
                by_shard.setdefault(shards[i], set()).add((int(off[i]), int(length[i])))
    out: dict[tuple[str, int, int], int] = {}
    with progress_reporter(progress, desc="upgrade", unit="shard", total=len(by_shard)) as tick:
        for done, (shard, locs) in enumerate(sorted(by_shard.items())):
            tick(done, len(by_shard))
            ordered = sorted(locs)
            start = 0
            while start < len(ordered):
                stop, total = start, 0
                while stop < len(ordered) and (stop == start or total < _CHUNK_BYTES):
                    total += ordered[stop][1]
                    stop += 1
                chunk = ordered[start:stop]
                views = store.get_ranges(
                    shard, np.array([o for o, _ in chunk]), np.array([n for _, n in chunk])
                )
                for (o, n), view in zip(chunk, views, strict=True):
                    out[(shard, o, n)] = xxhash.xxh3_64_intdigest(view)
                    report.bytes_read += len(view)
                start = stop
        tick(len(by_shard), len(by_shard))
    return out


def _legacy_files(raw: dict[str, Any]) -> list[str]:
    """The index files a 0.1.1 manifest names."""
    files = [ref.get("path") for ref in raw.get("index_shards") or [] if isinstance(ref, dict)]
    files += [la.get("index") for la in raw.get("layers") or [] if isinstance(la, dict)]
    return [f for f in files if isinstance(f, str)]


def _move_legacy_index(store: Store, versions: list[int], report: UpgradeReport) -> None:
    """Copy 0.1.1's index files under `MOVED_DIR` and point its manifests at the copies
    (which record in `created_utc` the time the rewrite would lose)."""
    times: dict[int | None, str] = {v: version_time(store, v) for v in versions}
    times[None] = times[versions[-1]]
    for v in [*versions, None]:
        try:
            raw, _ = read_legacy(store, v)
        except ObjectNotFoundError:
            continue  # a version with no snapshot: manifest.json is the latest
        changed = False
        for ref in [*(raw.get("index_shards") or []), *(raw.get("layers") or [])]:
            k = "path" if "path" in ref else "index"
            old = ref[k]
            if old.startswith(MOVED_DIR):
                continue
            new = f"{MOVED_DIR}{old}"
            if not store.exists(new):
                data = store.get(old)
                store.put(new, data)
                report.bytes_written += len(data)
            ref[k] = new
            changed = True
        if changed:
            key = LEGACY_MANIFEST if v is None else f"{LEGACY_VERSIONS}v{v}.json"
            raw["created_utc"] = times[v]
            data = json.dumps(raw, indent=2).encode()
            store.put(key, data)  # an atomic put: 0.1.1 reads the old or the new one
            report.bytes_written += len(data)


def _delete_legacy_originals(store: Store, versions: list[int]) -> None:
    """Delete 0.1.1's index files from their old places (the copies are read now)."""
    olds: set[str] = set()
    for v in versions:
        raw, _ = read_legacy(store, v)
        olds.update(f.removeprefix(MOVED_DIR) for f in _legacy_files(raw))
    present = [k for k in sorted(olds) if store.exists(k)]
    if present:
        store.delete(present)


def _finish_glob(store: Store) -> bool:
    """After the commit: 0.1.1's originals out of `index/` (a rerun after a stop), the
    barrier removed. Whether there was anything to do."""
    before = len(store.list("index/"))
    _delete_legacy_originals(store, legacy_versions(store))
    if store.exists(barrier_path(1)):
        store.delete([barrier_path(1)])
    return len(store.list("index/")) != before
