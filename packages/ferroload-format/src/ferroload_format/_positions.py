"""Positions of a dataset or view, checked and mapped onto the rows of its version.

A view (`Dataset.subset`, `take`, a slice) is an array of rows of its version in its own
order; these functions turn its positions into those rows, and the version's shard runs
and presence statistics into the view's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_format._errors import SampleIndexError
from ferroload_format._index_columns import IndexColumns

#: What a single position may be.
IndexLike = int | np.integer[Any]


def row_at(i: IndexLike, n: int, rows: npt.NDArray[np.int64] | None, uri: str) -> int:
    """The row of position `i` (negative counts from the end) of `n` positions; `rows`:
    a view's rows (None: the whole version)."""
    if type(i) is not int and (not isinstance(i, (int, np.integer)) or isinstance(i, bool)):
        raise TypeError(f"sample positions are ints, got {type(i).__name__}")
    j = int(i)
    if j < 0:
        j += n
    if not 0 <= j < n:
        raise SampleIndexError(
            f"position {int(i)} is out of range for {uri} ({n} samples)", uri=uri
        )
    return j if rows is None else int(rows[j])


def rows_at(
    indices: npt.ArrayLike, n: int, rows: npt.NDArray[np.int64] | None, uri: str
) -> npt.NDArray[np.int64]:
    """The rows of positions `indices` (as `row_at`, for many at once)."""
    idx = np.asarray(indices)
    if idx.dtype == bool or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise TypeError(f"sample positions are ints, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False).reshape(-1)
    if idx.size:
        bad = (idx < -n) | (idx >= n)
        if bad.any():
            raise SampleIndexError(
                f"position {int(idx[bad][0])} is out of range for {uri} ({n} samples)",
                uri=uri,
            )
        idx = np.where(idx < 0, idx + n, idx)
    return idx if rows is None else rows[idx]


def view_shard_runs(
    starts: npt.NDArray[np.int64], codes: npt.NDArray[np.int32], rows: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """A view's runs of one shard (`starts`, `codes`), from its version's runs."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    of_rows = codes[np.searchsorted(starts, rows, side="right") - 1]
    first = np.concatenate([[0], np.flatnonzero(np.diff(of_rows)) + 1]).astype(np.int64)
    return first, of_rows[first]


def all_present_at(index: IndexColumns, modality: str, rows: npt.NDArray[np.int64]) -> bool:
    """Whether every one of `rows` has `modality`, their locations read in bounded chunks."""
    step = 1 << 16
    for start in range(0, len(rows), step):
        if not index.locate(modality, rows[start : start + step]).present.all():
            return False
    return True
