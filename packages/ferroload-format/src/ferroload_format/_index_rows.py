"""Some rows of the index by row group: columns, payload locations, shard codes and shard runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._index_arrays import ModalityArrays, absent_values, arrow_array
from ferroload_format._index_groups import GroupReader
from ferroload_format._part_files import open_part
from ferroload_format._records import LayerInfo


def take_rows(
    reader: GroupReader, name: str, rows: npt.NDArray[np.int64], layer: LayerInfo | None
) -> pa.Array:
    """Column `name` (of `layer`, None: the base) at `rows`, in that order, read by row
    group; rows a layer does not cover read as absent / null."""
    scope = reader.scope(layer)
    field_type = reader.schema.field(name).type
    covered = rows if layer is None else rows[rows < scope.bounds[-1]]
    plan = reader.plan(scope, covered)
    segments = plan.segments()
    found: list[list[pa.Array]] = [[] for _ in segments]

    def use(i: int, v: pa.Array) -> None:
        inner = plan.inner[segments[i][1]]
        if len(inner) <= 4:  # random positions: a row or two per group: slices are
            # type-exact and ~5x cheaper than a take; copied at once, so that the
            # group itself can go (a read touching every group would hold them all)
            found[i] = [pa.concat_arrays([v.slice(k, 1) for k in inner.tolist()])]
        else:
            found[i] = [v.take(arrow_array(inner))]

    reader.each_group(scope, plan.groups, "col", name, use)
    pieces = [a for f in found for a in f]
    found.clear()  # the pieces go as soon as they are merged
    order = plan.order
    if layer is not None and len(covered) < len(rows):
        # rows the layer does not cover: absent / null, placed after the covered ones
        inside = np.flatnonzero(rows < scope.bounds[-1])
        outside = np.flatnonzero(rows >= scope.bounds[-1])
        pieces.append(absent_values(field_type, len(outside)))
        order = np.concatenate([inside[order], outside])
    if not pieces:
        return pa.array([], type=field_type)
    merged = pa.concat_arrays(pieces)
    pieces.clear()
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = np.arange(len(order), dtype=np.int64)
    return merged.take(arrow_array(inverse))


def locate_rows(
    reader: GroupReader, name: str, rows: npt.NDArray[np.int64], layer: LayerInfo | None
) -> ModalityArrays:
    """Where modality `name`'s (of `layer`, None: the base) payloads of `rows` live, one
    entry per row in the order given, read by row group (each range checked when read)."""
    n = len(rows)
    out = ModalityArrays(
        present=np.zeros(n, dtype=np.bool_),
        shard=np.full(n, -1, dtype=np.int32),
        offset=np.zeros(n, dtype=np.int64),
        length=np.zeros(n, dtype=np.int64),
        checksum=np.zeros(n, dtype=np.uint64),
    )
    scope = reader.scope(layer)
    inside = np.flatnonzero(rows < scope.bounds[-1]) if layer is not None else None
    covered = rows if inside is None else rows[inside]
    plan = reader.plan(scope, covered)
    segments = plan.segments()

    def use(i: int, v: ModalityArrays) -> None:
        sel = segments[i][1]
        at = sel if inside is None else inside[sel]
        k = plan.inner[sel]
        out.present[at] = v.present[k]
        out.shard[at] = v.shard[k]
        out.offset[at] = v.offset[k]
        out.length[at] = v.length[k]
        out.checksum[at] = v.checksum[k]

    reader.each_group(scope, plan.groups, "loc", name, use)
    return out


def shard_codes_at(reader: GroupReader, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """The base shard code of each of `rows`, read by row group."""
    out = np.empty(len(rows), dtype=np.int32)
    scope = reader.scope(None)
    plan = reader.plan(scope, rows)
    segments = plan.segments()

    def use(i: int, v: npt.NDArray[np.int32]) -> None:
        sel = segments[i][1]
        out[sel] = v[plan.inner[sel]]

    reader.each_group(scope, plan.groups, "codes", "shard", use)
    return out


def group_runs(reader: GroupReader) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """The runs of one base shard (first row, shard code) of the version, from the row
    groups' statistics where they say one shard, else by reading the group's codes."""
    scope = reader.scope(None)
    starts: list[npt.NDArray[np.int64]] = []
    codes: list[npt.NDArray[np.int32]] = []
    for p in range(len(scope.parts)):
        gstarts = reader.starts(scope, p)
        base = int(scope.bounds[p])
        ones = [reader.one_shard(p, g) for g in range(len(gstarts) - 1)]
        mixed = [(p, g) for g, one in enumerate(ones) if one is None]
        runs: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = {}

        def use(
            i: int,
            v: npt.NDArray[np.int32],
            mixed: Any = mixed,
            runs: Any = runs,
            base: int = base,
            gstarts: Any = gstarts,
        ) -> None:
            g = mixed[i][1]
            runs[g] = runs_of(v, base + int(gstarts[g]))

        reader.each_group(scope, mixed, "codes", "shard", use)
        for g, one in enumerate(ones):
            if one is not None:
                starts.append(np.asarray([base + int(gstarts[g])], dtype=np.int64))
                codes.append(np.asarray([one], dtype=np.int32))
            elif g in runs:
                starts.append(runs[g][0])
                codes.append(runs[g][1])
    if not starts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    s_all = np.concatenate(starts)
    c_all = np.concatenate(codes)
    keep = np.concatenate([[True], c_all[1:] != c_all[:-1]])
    return s_all[keep], c_all[keep]


def present_in_groups(reader: GroupReader, name: str, layer: LayerInfo | None) -> bool:
    """Whether every row has a payload of modality `name` (of `layer`, None: the base):
    from the Parquet statistics of its `present` field where they say so, else by reading
    the row groups they leave open."""
    scope = reader.scope(layer)
    if int(scope.bounds[-1]) < reader.manifest.num_samples:
        return False  # rows a layer does not cover read as absent
    path = f"{name}.present"
    for p, part in enumerate(scope.parts):
        starts = reader.starts(scope, p)
        md = open_part(reader.store, part, reader.files)[0].metadata
        col = next(
            (i for i in range(md.num_columns) if md.schema.column(i).path == path),
            None,
        )
        for g in range(len(starts) - 1):
            stats = None if col is None else md.row_group(g).column(col).statistics
            if stats is not None and stats.has_min_max:
                if stats.min is False:
                    return False
                if stats.min is True:
                    continue
            found: list[bool] = []

            def seen(_: int, v: ModalityArrays, found: list[bool] = found) -> None:
                found.append(bool(v.present.all()))

            reader.each_group(scope, [(p, g)], "loc", name, seen)
            if not all(found):
                return False
    return True


def runs_of(
    codes: npt.NDArray[np.int32], first: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """(starts, codes) of the runs of equal `codes`, starts offset by `first`."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1]).astype(np.int64)
    return starts + first, codes[starts].astype(np.int32)
