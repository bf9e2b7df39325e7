"""`verify`: check shards, side indexes and every payload's checksum of one version."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from ferroload_core import (
    ProgressArg,
    ProgressCallback,
    UnsafePathError,
    check_relative_path,
    progress_reporter,
)
from ferroload_format._errors import ManifestError
from ferroload_format._index_arrays import ModalityArrays
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import Manifest
from ferroload_format._names import member_name
from ferroload_format._part_files import PartFiles, read_part_table
from ferroload_format._records import ShardInfo
from ferroload_format._rs011 import MARKER, MAX_SIDE_INDEX_BYTES, side_members
from ferroload_format._shard_lists import shards_of
from ferroload_format._tar import BLOCK
from ferroload_format._verify_index import (
    check_id_runs,
    check_layer_index,
    check_part,
    check_shard_lists,
    check_statistics,
    part_schemas,
)
from ferroload_format._verify_report import Problem, VerifyReport
from ferroload_store import ObjectNotFoundError, ObjectTruncatedError, Store, StoreError

#: Bytes read per request while verifying (ranges are coalesced up to this size).
_CHUNK_BYTES = 64 << 20


def _check_shard_object(store: Store, shard: ShardInfo, report: VerifyReport) -> bool:
    """Size and side index of one shard; False when the shard is missing."""
    try:
        size = store.head(shard.path).size
    except UnsafePathError as exc:
        report.problems.append(Problem("unsafe-path", shard.path, str(exc)))
        return False
    except ObjectNotFoundError:
        report.problems.append(
            Problem("missing-shard", shard.path, f"shard {shard.path} is missing")
        )
        return False
    if size != shard.size:
        report.problems.append(
            Problem(
                "shard-size",
                shard.path,
                f"shard {shard.path} is {size} bytes, the manifest says {shard.size}",
            )
        )
    return True


def _side_index(
    store: Store, shard: ShardInfo, report: VerifyReport
) -> dict[str, tuple[int, int, int]]:
    try:
        if MARKER in shard.extra:  # ferroload-rs 0.1.1's JSON side index
            size = store.head(shard.side_index).size
            if size > MAX_SIDE_INDEX_BYTES:
                raise ValueError(f"it is {size} bytes; the limit is {MAX_SIDE_INDEX_BYTES}")
            return _rs011_side(shard, store.get(shard.side_index), report)
        data = store.get(shard.side_index)
        table = pq.read_table(pa.BufferReader(data))
    except UnsafePathError as exc:
        report.problems.append(Problem("unsafe-path", shard.path, str(exc)))
        return {}
    except (ObjectNotFoundError, StoreError, OSError, ValueError, pa.ArrowException) as exc:
        report.problems.append(
            Problem("side-index", shard.path, f"side index {shard.side_index} unreadable: {exc}")
        )
        return {}
    names = ("member", "offset", "length", "checksum")
    for name in names:
        i = table.schema.get_field_index(name)
        kind = table.schema.field(i).type if i >= 0 else None
        if kind is None or not (
            pa.types.is_string(kind) if name == "member" else pa.types.is_integer(kind)
        ):
            report.problems.append(
                Problem(
                    "side-index",
                    shard.path,
                    f"side index {shard.side_index} has no {name!r} column of "
                    f"{'strings' if name == 'member' else 'integers'}",
                )
            )
            return {}
    try:
        cols = [table.column(c).to_pylist() for c in names]
    except (ValueError, pa.ArrowException) as exc:  # e.g. a member name that is not UTF-8
        report.problems.append(
            Problem("side-index", shard.path, f"side index {shard.side_index} unreadable: {exc}")
        )
        return {}
    for member in cols[0]:
        try:
            check_relative_path(member, what=f"member of side index {shard.side_index}")
        except UnsafePathError as exc:
            report.problems.append(Problem("unsafe-path", shard.path, str(exc)))
    if table.num_rows != shard.num_members:
        report.problems.append(
            Problem(
                "side-index",
                shard.path,
                f"side index {shard.side_index} lists {table.num_rows} members, "
                f"the manifest says {shard.num_members}",
            )
        )
    return {m: (o, n, c) for m, o, n, c in zip(*cols, strict=True)}


def verify_dataset(
    store: Store,
    manifest: Manifest,
    index: IndexColumns,
    progress: ProgressArg = None,
) -> VerifyReport:
    """Check every shard and payload of `manifest`, its layers' included; see
    `Dataset.verify` (`progress` counts shards, through `progress_reporter`)."""
    with progress_reporter(progress, desc="verify", unit="shard") as tick:
        return _verify(store, manifest, index, tick)


def _verify(
    store: Store, manifest: Manifest, index: IndexColumns, progress: ProgressCallback
) -> VerifyReport:
    report = VerifyReport(store.uri, manifest.version)
    check_shard_lists(store, manifest, report)
    files: PartFiles = {}
    base = {p.path for p in manifest.index_parts}
    for schema, part in part_schemas(manifest, store.uri):
        if not check_part(store, part, schema, files, report) or part.path not in base:
            continue
        try:
            read_part_table(store, part, ["sample_id"], files)
        except ManifestError as exc:
            kind = "num-rows" if getattr(exc, "part", None) == part.path else "index-part"
            report.problems.append(Problem(kind, part.path, str(exc)))
    if report.problems:  # nothing below can trust the index
        return report
    ids = index.column("sample_id")
    for part in manifest.index_parts:
        check_statistics(store, part, report)
    check_id_runs(store, manifest, ids, report)
    for layer in manifest.layers:
        check_layer_index(store, layer, index, ids, report)
    # (shard, the modalities whose payloads it holds), in the order of `index.shards`
    owners = [(s, manifest.modalities) for s in shards_of(store, manifest)]
    owners += [(s, layer.modalities) for layer in manifest.layers for s in layer.shards]
    sums = manifest.has_checksums  # 0.1.1 recorded none
    for code, (shard, modalities) in enumerate(owners):
        progress(code, len(owners))
        report.shards_checked += 1
        if not _check_shard_object(store, shard, report):
            continue
        side = _side_index(store, shard, report)
        legacy = MARKER in shard.extra
        arrays = {mod.name: index.unchecked_modality(mod.name) for mod in modalities}
        good = _check_ranges(shard, code, index, arrays, ids, report)
        for mod in modalities:
            a = arrays[mod.name]
            rows = np.flatnonzero(good[mod.name] & (a.shard == code))
            rows = rows[np.argsort(a.offset[rows], kind="stable")]
            for sid, row in zip(ids.take(rows).to_pylist(), rows.tolist(), strict=True):
                want = (
                    int(a.offset[row]),
                    int(a.length[row]),
                    0 if legacy else int(a.checksum[row]),
                )
                name = f"{want[0]}:{want[1]}" if legacy else member_name(sid, mod.name, mod.ext)
                entry = side.get(name) if side else None
                if side and entry != want:
                    report.problems.append(
                        Problem(
                            "side-index",
                            shard.path,
                            f"side index of {shard.path} disagrees with the index for "
                            f"{mod.name!r} of sample {sid!r}: {entry} != {want}",
                            sid,
                            mod.name,
                        )
                    )
            _check_payloads(store, shard, mod.name, a, rows, ids, report, sums)
    progress(len(owners), len(owners))
    return report


def _check_ranges(
    shard: ShardInfo,
    code: int,
    index: IndexColumns,
    arrays: dict[str, ModalityArrays],
    ids: pa.Array,
    report: VerifyReport,
) -> dict[str, npt.NDArray[np.bool_]]:
    """Report payload ranges of `shard` that cannot be tar member data (outside the shard,
    inside a member header, overlapping another range); per modality, the rows whose
    ranges are fit to read."""
    good: dict[str, npt.NDArray[np.bool_]] = {}
    starts: list[npt.NDArray[np.int64]] = []
    ends: list[npt.NDArray[np.int64]] = []
    who: list[tuple[str, npt.NDArray[np.int64]]] = []
    for name, a in arrays.items():
        mine = a.present.astype(bool, copy=False) & (a.shard == code)
        bad = index.bad_ranges(a) & mine
        for row in np.flatnonzero(bad).tolist():
            sid = ids[row].as_py()
            report.problems.append(
                Problem(
                    "payload-range",
                    shard.path,
                    f"{name!r} of sample {sid!r} claims bytes [{int(a.offset[row])}, "
                    f"+{int(a.length[row])}) of {shard.path} ({shard.size} bytes), which is "
                    "not a tar member's data inside the shard",
                    sid,
                    name,
                )
            )
        good[name] = mine & ~bad
        rows = np.flatnonzero(good[name])
        starts.append(a.offset[rows])
        ends.append(a.offset[rows] + a.length[rows])
        who.append((name, rows))
    if not who:
        return good
    start, end = np.concatenate(starts), np.concatenate(ends)
    names = np.concatenate([np.full(len(r), i) for i, (_, r) in enumerate(who)])
    rows_all = np.concatenate([r for _, r in who])
    order = np.argsort(start, kind="stable")
    start, end, names, rows_all = start[order], end[order], names[order], rows_all[order]
    # a member's data starts one header block after the previous member's padded end
    prev_end = np.maximum.accumulate(end)[:-1]
    header_end = (prev_end + BLOCK - 1) // BLOCK * BLOCK + BLOCK
    for k in np.flatnonzero(start[1:] < header_end).tolist():
        name, row = who[int(names[k + 1])][0], int(rows_all[k + 1])
        sid = ids[row].as_py()
        overlap = bool(start[k + 1] < prev_end[k])
        report.problems.append(
            Problem(
                "overlap" if overlap else "tar-header",
                shard.path,
                f"{name!r} of sample {sid!r} at bytes [{int(start[k + 1])}, "
                f"{int(end[k + 1])}) of {shard.path} "
                + (
                    "overlaps another payload's range"
                    if overlap
                    else "overlaps the tar header of its member"
                ),
                sid,
                name,
            )
        )
    return good


def _rs011_side(
    shard: ShardInfo, data: bytes, report: VerifyReport
) -> dict[str, tuple[int, int, int]]:
    """A 0.1.1 side index (`{"members": {"<key>.<ext>": [offset, length]}}`, docs/format.md
    §11), keyed by location: `(offset, length)` as a string, 0 for the checksum."""
    try:
        members = side_members(data, what=f"side index {shard.side_index}")
    except ValueError as exc:
        report.problems.append(Problem("side-index", shard.path, str(exc)))
        return {}
    for member in members:
        try:
            check_relative_path(member, what=f"member of side index {shard.side_index}")
        except UnsafePathError as exc:
            report.problems.append(Problem("unsafe-path", shard.path, str(exc)))
    return {f"{o}:{n}": (o, n, 0) for o, n in members.values()}


def _check_payloads(
    store: Store,
    shard: ShardInfo,
    column: str,
    a: ModalityArrays,
    rows: npt.NDArray[np.int64],
    ids: pa.Array,
    report: VerifyReport,
    sums: bool,
) -> None:
    """Read the payloads of `rows` in large coalesced chunks and compare checksums (when
    `sums`: a version without checksums only has its payloads read to the end)."""
    offsets, lengths = a.offset, a.length
    sizes = np.cumsum(lengths[rows])
    start = 0
    while start < len(rows):
        base = sizes[start] - lengths[rows[start]]
        stop = max(start + 1, int(np.searchsorted(sizes, base + _CHUNK_BYTES, side="right")))
        chunk = rows[start:stop]
        start = stop
        try:
            views = store.get_ranges(shard.path, offsets[chunk], lengths[chunk])
        except ObjectTruncatedError as exc:
            for row in chunk[(offsets[chunk] + lengths[chunk]) > exc.size].tolist():
                sid = ids[row].as_py()
                report.problems.append(
                    Problem(
                        "truncated",
                        shard.path,
                        f"shard {shard.path} ends at {exc.size} bytes, before {column!r} of "
                        f"sample {sid!r} does",
                        sid,
                        column,
                    )
                )
            chunk = chunk[(offsets[chunk] + lengths[chunk]) <= exc.size]
            if not len(chunk):
                continue
            views = store.get_ranges(shard.path, offsets[chunk], lengths[chunk])
        for row, view in zip(chunk.tolist(), views, strict=True):
            report.payloads_checked += 1
            report.bytes_checked += len(view)
            if sums and xxhash.xxh3_64_intdigest(view) != int(a.checksum[row]):
                sid = ids[row].as_py()
                report.problems.append(
                    Problem(
                        "checksum",
                        shard.path,
                        f"{column!r} of sample {sid!r} in {shard.path} does not match its checksum",
                        sid,
                        column,
                    )
                )
