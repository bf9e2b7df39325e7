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

A run is trusted only as far as it checks out (`check_counts` against the version, the
footer against its record and the format before any row is read, the rows read): one
that does not is treated as unreadable, so a forged run cannot hide an id nor size an
allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from ferroload_format._errors import FormatError
from ferroload_format._index import write_part
from ferroload_format._manifest import Manifest
from ferroload_format._paths import IDS_DIR
from ferroload_format._records import IdRun
from ferroload_store import ObjectNotFoundError, RangeFile, Store

logger = logging.getLogger(__name__)

#: Rows per row group of a run file: a lookup reads one group per hit.
RUN_ROW_GROUP = 32_768
#: A run that claims more ids than this allows for its bytes is refused before any of it
#: is read (a constant column compresses to nothing: 10^8 rows in 775 KB). Its hashes are
#: distinct 64-bit values, about 9.4 bytes each as written and no fewer than 4 for 2^32
#: of them; 1 byte an id leaves a margin of 4 below that floor, and bounds what reading
#: a run allocates to about 16 bytes a byte of the file.
MIN_RUN_BYTES_PER_ID = 1
_SCHEMA = pa.schema([pa.field("hash", pa.int64(), False), pa.field("part", pa.int64(), False)])


class RunMismatchError(FormatError, OSError):
    """A sample-id run that contradicts its record, its version or itself (rows, order,
    parts): altered or damaged. Whoever reads it treats it as unreadable (the duplicate
    check reads the parts it covers in full; `verify` reports it).

    Attributes:
        uri: the dataset root.
        run: the run file, relative to the root.
    """

    run: str | None = None


def _mismatch(store: Store, run: IdRun, why: str) -> RunMismatchError:
    return RunMismatchError(
        f"sample-id run {run.path} of {store.uri} {why}", uri=store.uri, run=run.path
    )


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
    """The run's Parquet file, its footer checked (`_check_footer`) before any row is
    read."""
    mapped = store.map_local(run.path)  # the file the store checked, not one opened by name
    if mapped is not None:
        size = len(mapped)
        if size != run.size:
            raise _mismatch(store, run, f"is {size} bytes, its record says {run.size}")
        pf = pq.ParquetFile(pa.BufferReader(mapped))
    else:
        pf = pq.ParquetFile(RangeFile(store, run.path, size=run.size))
    _check_footer(store, run, pf)
    return pf


def _check_footer(store: Store, run: IdRun, pf: pq.ParquetFile) -> None:
    """What a run's footer says must fit its record and the format (docs/format.md §6.1):
    the two columns, `num_ids` rows and no more than its bytes allow, row groups of at
    most `RUN_ROW_GROUP` rows whose hash statistics ascend, and, for a run of one part,
    part statistics naming that part only."""
    meta = pf.metadata
    if pf.schema_arrow != _SCHEMA:
        raise _mismatch(store, run, "does not have the columns of a run")
    if meta.num_rows != run.num_ids:
        raise _mismatch(store, run, f"holds {meta.num_rows} rows, its record says {run.num_ids}")
    if run.num_ids * MIN_RUN_BYTES_PER_ID > run.size:
        raise _mismatch(
            store,
            run,
            f"claims {run.num_ids} ids in {run.size} bytes, more than "
            f"a run of that size holds (at least {MIN_RUN_BYTES_PER_ID} byte an id)",
        )
    single = run.parts[0] if len(run.parts) == 1 else None
    top: int | None = None
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.num_rows > RUN_ROW_GROUP:
            raise _mismatch(
                store, run, f"has a row group of {group.num_rows} rows (at most {RUN_ROW_GROUP})"
            )
        stats = group.column(0).statistics
        if stats is not None and stats.has_min_max:
            if stats.min > stats.max or (top is not None and stats.min < top):
                raise _mismatch(store, run, "is not sorted")
            top = stats.max
        if single is not None and group.num_rows:
            part = group.column(1).statistics
            if part is None or not part.has_min_max or not part.min == part.max == single:
                raise _mismatch(store, run, f"covers part {single} but has rows of other parts")


def _check_rows(store: Store, run: IdRun, hashes: np.ndarray, parts: np.ndarray | None) -> None:
    """Rows read from a run must ascend by hash and name only the parts it covers."""
    if np.any(hashes[1:] < hashes[:-1]):
        raise _mismatch(store, run, "is not sorted")
    if parts is not None and not np.all(np.isin(parts, np.asarray(run.parts, dtype=np.int64))):
        raise _mismatch(store, run, "has rows of parts it does not cover")


def check_counts(store: Store, run: IdRun, manifest: Manifest) -> None:
    """A run's `num_ids` must fit the version it belongs to: a run holds every id of the
    parts it covers and no other, so exactly their rows when they are all current (every
    run since tiered merging), else at least the rows of its current parts and at most the
    version's samples (the rows of its parts merged away since are in newer parts).

    Raises:
        RunMismatchError: for a run whose count does not fit.
    """
    rows = {p.version: p.num_rows for p in manifest.index_parts}
    covers = set(run.parts)
    least = sum(rows[v] for v in covers & rows.keys())
    most = least if covers <= rows.keys() else manifest.num_samples
    if not least <= run.num_ids <= most:
        raise _mismatch(
            store,
            run,
            f"holds {run.num_ids} ids, but the index parts it covers "
            f"({sorted(covers)}) of version {manifest.version} hold "
            + (f"{least} rows" if least == most else f"{least} to {most} rows"),
        )


def read_run(store: Store, run: IdRun) -> tuple[np.ndarray, np.ndarray]:
    """All (hash, part) rows of `run`, its footer checked before they are read (so no
    more than 16 bytes for each byte of the file are allocated), then their order and
    parts.

    Raises:
        OSError, pa.ArrowException: a run file missing, damaged or not matching the
            manifest (`RunMismatchError`); callers fall back to reading the parts.
    """
    table = _open(store, run).read()
    hashes, parts = table.column("hash").to_numpy(), table.column("part").to_numpy()
    _check_rows(store, run, hashes, parts)
    return hashes, parts


def lookup(store: Store, run: IdRun, query: np.ndarray) -> set[int]:
    """The parts `run` names for any of the sorted hashes `query` (row groups whose
    min/max statistics exclude every query hash are not read)."""
    pf = _open(store, run)
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
    # `part` column is not read (the footer said that it names no other part)
    single = len(run.parts) == 1
    table = pf.read_row_groups(groups, columns=["hash"] if single else None)
    hashes = table.column("hash").to_numpy()
    parts = None if single else table.column("part").to_numpy()
    _check_rows(store, run, hashes, parts)
    if len(hashes) == 0:
        return set()
    start = np.searchsorted(hashes, query, side="left")
    stop = np.searchsorted(hashes, query, side="right")
    if parts is None:
        return {run.parts[0]} if np.any(stop > start) else set()
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
            check_counts(store, run, latest)
            named.update(lookup(store, run, query))
        except RunMismatchError as exc:
            logger.warning(
                "%s; checking the parts it covers in full, and the version this commits "
                "gets a run of them instead (verify() reports the damage)",
                exc,
            )
            continue
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
