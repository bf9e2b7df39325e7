"""`verify`: check shards, side indexes and every payload's checksum of one version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from ferroload_core import (
    ProgressArg,
    ProgressCallback,
    UnsafePathError,
    check_relative_path,
    progress_reporter,
)
from ferroload_format._errors import DatasetDamagedError, FormatError, ManifestError
from ferroload_format._index_arrays import ModalityArrays
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import IndexPart, LayerInfo, Manifest, ShardInfo, version_path
from ferroload_format._names import member_name
from ferroload_format._part_files import open_part, read_part_table
from ferroload_format._shard_lists import read_shard_list, shards_of
from ferroload_format._tar import BLOCK
from ferroload_store import ObjectNotFoundError, ObjectTruncatedError, Store, StoreError

#: Bytes read per request while verifying (ranges are coalesced up to this size).
_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class Problem:
    """One thing `verify` found wrong.

    Attributes:
        kind: `missing-shard`, `shard-size`, `truncated`, `checksum`, `side-index`,
            `layer-index` (a layer's index part unreadable or not matching the rows),
            `payload-range` (a range outside its shard or off the tar block grid),
            `tar-header` (a range over the tar header of its member), `overlap` (two
            ranges of one shard overlapping), `num-rows` (an index part holding another
            number of rows than the manifest says), `index-part` (an index part missing
            or unreadable), `id-run` (a sample-id run unreadable or not holding exactly
            the ids of the parts it covers), `shard-list` (a shard list missing, of
            another size or checksum, or not holding its shards: nothing else is
            checked then), `statistics` (a row group's Parquet
            statistics that do not bound its values: `subset` prunes by them), or
            `unsafe-path` (a shard reached through a symlink out of the root, or a side
            index member name that could leave it when the tar is extracted; a manifest
            path that could is refused when the dataset is opened).
        shard: the shard involved (the index part, for index problems).
        sample_id: the sample involved, when one is.
        column: the modality (or index column) involved, when one is.
        message: a sentence for people.
    """

    kind: str
    shard: str
    message: str
    sample_id: str | None = None
    column: str | None = None


@dataclass
class VerifyReport:
    """What `Dataset.verify()` checked and found."""

    uri: str
    version: int
    problems: list[Problem] = field(default_factory=list)
    shards_checked: int = 0
    payloads_checked: int = 0
    bytes_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is damaged."""
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise `DatasetDamagedError` listing the problems, if there are any."""
        if self.problems:
            first = self.problems[0]
            lines = "\n".join(f"  {p.kind}: {p.message}" for p in self.problems[:20])
            more = f"\n  … and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
            raise DatasetDamagedError(
                f"{self.uri} version {self.version} is damaged ({len(self.problems)} "
                f"problem(s)):\n{lines}{more}",
                uri=self.uri,
                shard=first.shard,
                sample_id=first.sample_id,
                column=first.column,
                problems=list(self.problems),
            )


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
    _check_shard_lists(store, manifest, report)
    for part in manifest.index_parts:
        try:
            read_part_table(store, part, ["sample_id"])
        except ManifestError as exc:
            kind = "num-rows" if getattr(exc, "part", None) == part.path else "index-part"
            report.problems.append(Problem(kind, part.path, str(exc)))
    if report.problems:  # nothing below can trust the index
        return report
    ids = index.column("sample_id")
    for part in manifest.index_parts:
        _check_statistics(store, part, report)
    _check_id_runs(store, manifest, ids, report)
    for layer in manifest.layers:
        _check_layer_index(store, layer, index, ids, report)
    # (shard, the modalities whose payloads it holds), in the order of `index.shards`
    owners = [(s, manifest.modalities) for s in shards_of(store, manifest)]
    owners += [(s, layer.modalities) for layer in manifest.layers for s in layer.shards]
    for code, (shard, modalities) in enumerate(owners):
        progress(code, len(owners))
        report.shards_checked += 1
        if not _check_shard_object(store, shard, report):
            continue
        side = _side_index(store, shard, report)
        arrays = {mod.name: index.unchecked_modality(mod.name) for mod in modalities}
        good = _check_ranges(shard, code, index, arrays, ids, report)
        for mod in modalities:
            a = arrays[mod.name]
            rows = np.flatnonzero(good[mod.name] & (a.shard == code))
            rows = rows[np.argsort(a.offset[rows], kind="stable")]
            for sid, row in zip(ids.take(rows).to_pylist(), rows.tolist(), strict=True):
                entry = side.get(member_name(sid, mod.name, mod.ext)) if side else None
                want = (int(a.offset[row]), int(a.length[row]), int(a.checksum[row]))
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
            _check_payloads(store, shard, mod.name, a, rows, ids, report)
    progress(len(owners), len(owners))
    return report


def _check_shard_lists(store: Store, manifest: Manifest, report: VerifyReport) -> None:
    """Every shard list of `manifest` is there, of its recorded size and checksum, and
    holds its recorded number of valid shard records (read again, not from the cache)."""
    uri = f"{store.uri}/{version_path(manifest.version)}"
    for lst in manifest.shard_lists:
        try:
            read_shard_list(store, lst, manifest_uri=uri, cached=False)
        except (ManifestError, UnsafePathError) as exc:
            report.problems.append(Problem("shard-list", lst.path, str(exc)))


def _leaf(table: pa.Table, path: str) -> pa.Array | None:
    """The values of column chunk `path` (`name` or `struct.field`) of a row group."""
    name, _, rest = path.partition(".")
    if table.schema.get_field_index(name) < 0:
        return None
    arr: pa.Array = table.column(name).combine_chunks()
    for part in rest.split(".") if rest else ():
        if not pa.types.is_struct(arr.type) or arr.type.get_field_index(part) < 0:
            return None
        arr = arr.field(part)
    return arr


def _check_statistics(store: Store, part: IndexPart, report: VerifyReport) -> None:
    """The Parquet statistics of every row group of an index part bound its values:
    `subset` skips row groups by them (`_pruning`), so statistics that lie would lose
    rows without an error. Min and max must bound the values (NaN aside: statistics
    leave it out), the null count must be exact."""
    try:
        pf, _ = open_part(store, part, {})
    except ManifestError as exc:
        report.problems.append(Problem("index-part", part.path, str(exc)))
        return
    meta = pf.metadata
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        table: pa.Table | None = None
        for c in range(group.num_columns):
            chunk = group.column(c)
            stats = chunk.statistics
            if stats is None:
                continue
            if table is None:
                table = pf.read_row_group(g)
            values = _leaf(table, chunk.path_in_schema)
            if values is None:
                continue
            wrong = _statistics_problem(stats, values)
            if wrong:
                report.problems.append(
                    Problem(
                        "statistics",
                        part.path,
                        f"index part {part.path}, row group {g}: the statistics of "
                        f"{chunk.path_in_schema!r} {wrong}; subset() prunes by them and would "
                        "lose rows. The part was altered: restore it, or copy the dataset (copy_to)",
                        column=chunk.path_in_schema,
                    )
                )


def _statistics_problem(stats: Any, values: pa.Array) -> str | None:
    """What is wrong with a column chunk's statistics for its `values`, or None."""
    if stats.has_null_count and stats.null_count != values.null_count:
        return f"count {stats.null_count} nulls, the values hold {values.null_count}"
    if not stats.has_min_max or pa.types.is_dictionary(values.type):
        return None
    if pa.types.is_floating(values.type):
        values = pc.filter(values, pc.invert(pc.is_nan(values)))
    if len(values) == values.null_count:
        return None
    got = pc.min_max(values)
    low, high = got["min"].as_py(), got["max"].as_py()
    try:
        smin, smax = stats.min, stats.max
        if smin > low or smax < high:
            return f"say [{smin!r}, {smax!r}], the values span [{low!r}, {high!r}]"
    except Exception:  # statistics pyarrow cannot decode or compare: pruning skips them too
        return None
    return None


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


def _sorted_pairs(hashes: np.ndarray, parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((parts, hashes))
    return hashes[order], parts[order]


def _check_id_runs(store: Store, manifest: Manifest, ids: pa.Array, report: VerifyReport) -> None:
    """Each sample-id run must hold exactly the ids of the parts it covers (a run missing
    one would let an append add a duplicate)."""
    from ferroload_format._ids import hash_ids, read_run

    starts = np.cumsum([0, *(p.num_rows for p in manifest.index_parts)])
    rows = {
        p.version: (int(a), int(b))
        for p, a, b in zip(manifest.index_parts, starts, starts[1:], strict=False)
    }
    for run in manifest.id_runs:
        covered = sorted(rows.keys() & set(run.parts))
        try:
            hashes, parts = read_run(store, run)
        except (OSError, pa.ArrowException, StoreError) as exc:
            report.problems.append(
                Problem("id-run", run.path, f"sample-id run {run.path} unreadable: {exc}")
            )
            continue
        keep = np.isin(parts, np.asarray(covered, dtype=np.int64))
        have = _sorted_pairs(hashes[keep], parts[keep])
        want = _sorted_pairs(
            np.concatenate(
                [
                    np.zeros(0, np.int64),
                    *(hash_ids(ids.slice(rows[v][0], rows[v][1] - rows[v][0])) for v in covered),
                ]
            ),
            np.concatenate(
                [
                    np.zeros(0, np.int64),
                    *(np.full(rows[v][1] - rows[v][0], v, np.int64) for v in covered),
                ]
            ),
        )
        if not (np.array_equal(have[0], want[0]) and np.array_equal(have[1], want[1])):
            report.problems.append(
                Problem(
                    "id-run",
                    run.path,
                    f"sample-id run {run.path} does not hold exactly the ids of index parts "
                    f"{covered}; remove it from the manifest's id_runs or rewrite it",
                )
            )


def _check_layer_index(
    store: Store, layer: LayerInfo, index: IndexColumns, ids: pa.Array, report: VerifyReport
) -> None:
    """A layer's index part must be readable and list the base version's sample ids."""
    where = ", ".join(p.path for p in layer.index_parts)
    try:
        theirs = pa.concat_arrays(
            [t.column("sample_id").combine_chunks() for t in index.read_layer(layer, ["sample_id"])]
        )
    except (FormatError, StoreError, OSError, ValueError) as exc:
        report.problems.append(
            Problem("layer-index", where, f"index of layer {layer.name!r} unreadable: {exc}")
        )
        return
    if not theirs.equals(ids.slice(0, layer.num_rows)):
        report.problems.append(
            Problem(
                "layer-index",
                where,
                f"index of layer {layer.name!r} ({where}) does not list the sample ids of "
                f"version {layer.base_version} in order",
            )
        )


def _check_payloads(
    store: Store,
    shard: ShardInfo,
    column: str,
    a: ModalityArrays,
    rows: npt.NDArray[np.int64],
    ids: pa.Array,
    report: VerifyReport,
) -> None:
    """Read the payloads of `rows` in large coalesced chunks and compare checksums."""
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
            if xxhash.xxh3_64_intdigest(view) != int(a.checksum[row]):
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
