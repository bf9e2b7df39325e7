"""The index checks of `verify`: shard lists, index parts (size, columns), Parquet statistics, sample-id runs, layer indexes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_core import UnsafePathError
from ferroload_format._errors import FormatError, ManifestError
from ferroload_format._index import index_schema
from ferroload_format._index_columns import IndexColumns
from ferroload_format._layer_parts import LayerSchema
from ferroload_format._manifest import Manifest
from ferroload_format._part_files import PartFiles, open_part
from ferroload_format._part_schema import schema_problems
from ferroload_format._paths import version_path
from ferroload_format._records import IndexPart, LayerInfo
from ferroload_format._shard_lists import read_shard_list
from ferroload_format._verify_report import Problem, VerifyReport
from ferroload_store import ObjectNotFoundError, Store, StoreError


def check_shard_lists(store: Store, manifest: Manifest, report: VerifyReport) -> None:
    """Every shard list of `manifest` is there, of its recorded size and checksum, and
    holds its recorded number of valid shard records, whose sizes add up to its recorded
    `shard_bytes` (read again, not from the cache; each shard's size is then checked
    against the shard itself)."""
    uri = f"{store.uri}/{version_path(manifest.version)}"
    for lst in manifest.shard_lists:
        try:
            read_shard_list(store, lst, manifest_uri=uri, cached=False)
        except (ManifestError, UnsafePathError) as exc:
            report.problems.append(Problem("shard-list", lst.path, str(exc)))


def part_schemas(manifest: Manifest, uri: str) -> list[tuple[pa.Schema, IndexPart]]:
    """(the schema it must have, the part) for every index part of `manifest`, its
    layers' included."""
    base = index_schema([m.name for m in manifest.modalities], manifest.metadata)
    out = [(base, part) for part in manifest.index_parts]
    for la in manifest.layers:
        schema = LayerSchema(uri, la.name, la.columns, la.modalities, la.base_version)
        out += [(schema.layer_schema(), part) for part in la.index_parts]
    return out


def check_part(
    store: Store, part: IndexPart, schema: pa.Schema, files: PartFiles, report: VerifyReport
) -> bool:
    """An index part is there with its recorded size, its footer parses, and its columns
    (read from the footer, no data page) are exactly `schema`'s, each of the schema's
    type (`schema_problems`): a part missing a column, holding another or storing one as
    another type opens and counts its rows, but reads of its rows fail. False when the
    part is missing or its footer unreadable (nothing else of it can be read)."""
    size = None
    for key in (part.path, part.staged):
        try:
            size = store.head(key).size
            break
        except ObjectNotFoundError:
            continue
        except (OSError, StoreError) as exc:
            report.problems.append(
                Problem("index-part", part.path, f"index part {part.path} unreadable: {exc}")
            )
            return False
    if size is not None and size != part.size:
        report.problems.append(
            Problem(
                "index-part",
                part.path,
                f"index part {part.path} is {size} bytes, the manifest says {part.size}",
            )
        )
    try:
        have = open_part(store, part, files)[0].schema_arrow
    except ManifestError as exc:
        report.problems.append(Problem("index-part", part.path, str(exc)))
        return False
    except (OSError, StoreError, pa.ArrowException) as exc:
        report.problems.append(
            Problem("index-part", part.path, f"index part {part.path} is not a Parquet file: {exc}")
        )
        return False
    for column, why in schema_problems(have, schema):
        report.problems.append(
            Problem(
                "index-schema",
                part.path,
                f"index part {part.path} {why}. The part was altered (reads or merges "
                "of its rows fail on it): restore it",
                column=column,
            )
        )
    return True


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


def check_statistics(store: Store, part: IndexPart, report: VerifyReport) -> None:
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


def _sorted_pairs(hashes: np.ndarray, parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((parts, hashes))
    return hashes[order], parts[order]


def check_id_runs(store: Store, manifest: Manifest, ids: pa.Array, report: VerifyReport) -> None:
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


def check_layer_index(
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
