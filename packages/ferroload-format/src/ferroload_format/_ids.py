"""Sorted sample-id runs: an append's duplicate-id check in O(new ids · log)
(docs/format.md, "Sample-id runs").

Each version may list `id_runs`: Parquet files of (`hash`, `part`) rows sorted by `hash`,
where `hash` is the xxh64 of a sample id (as int64) and `part` the version of the base
index part that holds it. A run says which parts it covers in full. An append looks its
new ids up in each run (row groups pruned by their min/max statistics, then a binary
search), reads exactly only the parts a hash hit names (a collision is resolved against
the real ids, never reported as a duplicate), reads in full every part no run covers (a
dataset written before runs existed, or a part an older ferroload appended), and writes
one run for the index part it commits. That part merges the newest parts (tiered merging,
`_commit.tiered_merge`), so its run holds the ids of those parts too: one run per part,
O(log N) runs, each id rewritten O(log N) times. Runs an older ferroload wrote may cover
several parts; they are kept while any part they cover is current.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from ferroload_format._index import write_part
from ferroload_format._manifest import Manifest
from ferroload_format._paths import IDS_DIR
from ferroload_format._records import IdRun
from ferroload_store import ObjectNotFoundError, RangeFile, Store

logger = logging.getLogger(__name__)

#: Rows per row group of a run file: a lookup reads one group per hit.
RUN_ROW_GROUP = 32_768
_SCHEMA = pa.schema([pa.field("hash", pa.int64(), False), pa.field("part", pa.int64(), False)])


def hash_ids(ids: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
    """The xxh64 of each sample id's UTF-8 bytes, as int64 (the `hash` of a run).

    A value that is not a string (only a damaged index part holds one) hashes as its
    `repr`, so that it can never stop a check: the exact comparison decides."""
    values = ids.to_pylist() if isinstance(ids, pa.Array | pa.ChunkedArray) else ids
    digest = xxhash.xxh64_intdigest
    out = np.fromiter(
        (digest(s.encode() if isinstance(s, str) else repr(s).encode()) for s in values),
        dtype=np.uint64,
        count=len(values),
    )
    return out.view(np.int64)


def run_path(txn: str, version: int, tag: str = "") -> str:
    """Key of the run that transaction `txn` writes for `version` (`tag` tells a second
    run of the same commit apart)."""
    return f"{IDS_DIR}{txn}-{version:010d}{tag}.parquet"


def write_run(
    store: Store, path: str, hashes: np.ndarray, parts: np.ndarray, covers: Iterable[int]
) -> IdRun:
    """Sort (`hashes`, `parts`) by hash and write them to `path` as a run that holds every
    id of the parts `covers`."""
    order = np.argsort(hashes, kind="stable")
    table = pa.table({"hash": hashes[order], "part": parts[order]}, schema=_SCHEMA)
    data = write_part(table, row_group_size=RUN_ROW_GROUP)
    store.put(path, data)
    return IdRun(path, len(hashes), len(data), tuple(sorted({int(p) for p in covers})))


def _open(store: Store, run: IdRun) -> pq.ParquetFile:
    local = store.local_path(run.path)
    if local is not None:
        return pq.ParquetFile(local, memory_map=True)
    return pq.ParquetFile(RangeFile(store, run.path, size=run.size))


def read_run(store: Store, run: IdRun) -> tuple[np.ndarray, np.ndarray]:
    """All (hash, part) rows of `run`.

    Raises:
        OSError, pa.ArrowException: a run file missing, damaged or not matching the
            manifest (callers fall back to reading the parts).
    """
    table = _open(store, run).read()
    if table.schema != _SCHEMA or table.num_rows != run.num_ids:
        raise OSError(f"sample-id run {run.path} of {store.uri} does not match its manifest")
    return table.column("hash").to_numpy(), table.column("part").to_numpy()


def lookup(store: Store, run: IdRun, query: np.ndarray) -> set[int]:
    """The parts `run` names for any of the sorted hashes `query` (row groups whose
    min/max statistics exclude every query hash are not read)."""
    pf = _open(store, run)
    if pf.metadata.num_rows != run.num_ids:
        raise OSError(f"sample-id run {run.path} of {store.uri} does not match its manifest")
    groups = []
    for i in range(pf.metadata.num_row_groups):
        stats = pf.metadata.row_group(i).column(0).statistics
        if stats is not None and stats.has_min_max:
            lo = np.searchsorted(query, stats.min, side="left")
            hi = np.searchsorted(query, stats.max, side="right")
            if hi <= lo:
                continue
        groups.append(i)
    if not groups:
        return set()
    # a run of one part (every run since tiered merging) names that part on any hit: its
    # `part` column is not read (a stray row of another part costs one exact check)
    single = len(run.parts) == 1
    table = pf.read_row_groups(groups, columns=["hash"] if single else None)
    hashes = table.column("hash").to_numpy()
    if len(hashes) == 0:
        return set()
    if np.any(hashes[1:] < hashes[:-1]):
        raise OSError(f"sample-id run {run.path} of {store.uri} is not sorted")
    start = np.searchsorted(hashes, query, side="left")
    stop = np.searchsorted(hashes, query, side="right")
    if single:
        return {run.parts[0]} if np.any(stop > start) else set()
    parts = table.column("part").to_numpy()
    found: set[int] = set()
    for a, b in zip(start[stop > start], stop[stop > start], strict=True):
        found.update(int(p) for p in parts[a:b])
    return found


def suspects(
    store: Store, latest: Manifest, query: np.ndarray
) -> tuple[set[int], set[int], list[IdRun]]:
    """What an append of ids with the sorted hashes `query` must check exactly.

    Returns:
        (parts a hash hit names, parts no readable run covers, the readable runs).
    """
    current = {p.version for p in latest.index_parts}
    covered: set[int] = set()
    named: set[int] = set()
    usable = []
    for run in latest.id_runs:
        mine = current.intersection(run.parts)
        if not mine:
            continue
        try:
            named.update(lookup(store, run, query))
        except (OSError, pa.ArrowException, ObjectNotFoundError):
            logger.warning(
                "sample-id run %s of %s is unreadable; checking its parts in full",
                run.path,
                store.uri,
                exc_info=True,
            )
            continue
        covered.update(mine)
        usable.append(run)
    return named & current, current - covered, usable


def part_hashes(store: Store, runs: Iterable[IdRun], version: int) -> np.ndarray | None:
    """The hashes of the ids of part `version` from a run that covers exactly that part,
    or None when there is none (or it is unreadable): then hash the part's ids."""
    for run in runs:
        if run.parts != (version,):
            continue
        try:
            hashes, parts = read_run(store, run)
        except (OSError, pa.ArrowException, ObjectNotFoundError):
            return None
        return np.asarray(hashes[parts == version])
    return None


def current_runs(runs: Iterable[IdRun], current: set[int]) -> tuple[IdRun, ...]:
    """The runs of `runs` that still cover a part of `current` (the others only hold ids
    of parts merged away or replaced)."""
    return tuple(r for r in runs if current.intersection(r.parts))
