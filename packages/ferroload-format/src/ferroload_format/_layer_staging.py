"""Staging one partition of a layer: its tar shard, then its Parquet rows (docs/format.md §10.2).

The Parquet file's presence marks the partition done: a run that was killed before it
resumes with the partition, whose earlier shard becomes a leftover for `gc`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format import _commit
from ferroload_format._index import MODALITY_TYPE, write_part
from ferroload_format._index_arrays import arrow_array
from ferroload_format._layer_parts import PARTITION_META, LayerSchema, staged_partition_path
from ferroload_format._names import member_name, new_txn_id
from ferroload_format._paths import layer_shard_paths
from ferroload_format._records import ShardInfo
from ferroload_format._shard_sequence import write_side_index
from ferroload_format._tar import ShardWriter
from ferroload_store import Store


def stage_partition(
    store: Store,
    schema: LayerSchema,
    identity: str,
    k: int,
    rows: npt.NDArray[np.int64],
    ids: list[str],
    values: Mapping[str, Sequence[Any]],
    payloads: Mapping[str, Sequence[bytes | bytearray | memoryview | None]],
) -> None:
    """Stage partition `k` of the layer `schema` computed by `identity`: `rows` (checked,
    ascending rows of the base version) whose sample ids are `ids`, with their `values`
    and `payloads` (as `LayerWriter.write_partition` takes them)."""
    n = len(rows)
    arrays = schema.value_arrays(k, values, ids)
    data = schema.payload_lists(k, payloads, ids)
    shard, locs = _write_shard(store, schema, k, ids, data)
    _commit._checkpoint("partition-shard-written")
    if shard is None:
        shard_col = pa.nulls(n, type=pa.string())
    else:  # the shard's path where the row has a payload, else null
        has = np.logical_or.reduce([loc[0] for loc in locs])
        shard_col = pc.if_else(
            arrow_array(has), pa.scalar(shard.path), pa.scalar(None, pa.string())
        )
    columns: list[Any] = [
        arrow_array(rows),
        pa.array(ids, type=pa.string()),
        shard_col,
        *(
            pa.StructArray.from_arrays([arrow_array(a) for a in loc], fields=list(MODALITY_TYPE))
            for loc in locs
        ),
        *arrays,
    ]
    meta = {
        "layer": schema.name,
        "identity": identity,
        "partition": k,
        "shard": shard.to_json() if shard is not None else None,
    }
    table = pa.Table.from_arrays(
        columns,
        schema=schema.partition_schema().with_metadata({PARTITION_META: json.dumps(meta).encode()}),
    )
    store.put(staged_partition_path(schema.name, identity, k), write_part(table))
    _commit._checkpoint("partition-staged")


def _write_shard(
    store: Store, schema: LayerSchema, k: int, ids: list[str], data: list[Sequence[Any]]
) -> tuple[ShardInfo | None, list[list[npt.NDArray[Any]]]]:
    """Write partition `k`'s shard; returns it (None: no payload) and, per modality,
    the [present, offset, length, checksum] arrays of its rows."""
    n = len(ids)
    locs = [
        [
            np.zeros(n, np.bool_),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.uint64),
        ]
        for _ in schema.modalities
    ]
    if not any(item is not None for items in data for item in items):
        return None, locs
    path, side_path = layer_shard_paths(schema.name, new_txn_id(), k)
    shard = ShardWriter(store.open_writer(path), path)
    try:
        for i, sid in enumerate(ids):
            had = False
            for m, items, loc in zip(schema.modalities, data, locs, strict=True):
                item = items[i]
                if item is None:
                    continue
                off, length, checksum = shard.add(member_name(sid, m.name, m.ext), item)
                loc[0][i], loc[1][i], loc[2][i], loc[3][i] = True, off, length, checksum
                had = True
            shard.num_samples += had
        size = shard.close()
    except BaseException:
        shard.abort()
        raise
    write_side_index(store, side_path, shard.members)
    info = ShardInfo(path, side_path, size, shard.num_samples, len(shard.members.names), 0)
    return info, locs
