"""Sample ids of a layer's base version, kept per process on the one LRU.

Worker processes (and Ray workers) that stage many partitions of a layer read the ids of
its base version once: the whole column when a writer needs every id (its commit), the
row groups a partition covers otherwise.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_core import LRU
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import Manifest
from ferroload_store import Store

#: Base versions whose ids (and indexes) a process keeps.
_IDS_KEEP = 4
#: Sample ids of recently used base versions, by (dataset root, version, txn).
_IDS: LRU[tuple[str, int, str], pa.Array] = LRU(_IDS_KEEP)
#: Indexes of base versions, for the sample ids of one partition's rows (read by row
#: group: a worker writing a partition reads the row groups it covers, not every id of
#: the base).
_INDEXES: LRU[tuple[str, int, str], IndexColumns] = LRU(_IDS_KEEP)


def _key(store: Store, base: Manifest) -> tuple[str, int, str]:
    return (store.uri, base.version, base.txn)


def kept_ids(store: Store, base: Manifest) -> pa.Array | None:
    """Every sample id of `base`, when this process has read them already (else None)."""
    return _IDS.get(_key(store, base))


def base_ids(store: Store, base: Manifest) -> pa.Array:
    """Every sample id of `base`, read once per process."""
    ids = kept_ids(store, base)
    if ids is None:
        ids = IndexColumns(store, base).column("sample_id")
        _IDS.put(_key(store, base), ids)
    return ids


def ids_at(store: Store, base: Manifest, rows: npt.NDArray[np.int64]) -> list[str]:
    """Sample ids of `rows` of `base`, read from the row groups holding them (through an
    index kept per process)."""
    key = _key(store, base)
    index = _INDEXES.get(key)
    if index is None:
        index = IndexColumns(store, base)
        _INDEXES.put(key, index)
    ids: list[str] = index.take(["sample_id"], rows)["sample_id"].to_pylist()
    return ids
