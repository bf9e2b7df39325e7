"""Rows of an index by row group: which group of which part holds each asked row, and a
byte-bounded LRU of the groups already read (docs/format.md, "Reading at scale")."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_core import LRU

#: Default bound of the row-group cache of one opened version (`IndexColumns`), in bytes
#: of decoded Arrow/numpy values; `FERROLOAD_INDEX_CACHE_BYTES` overrides it.
INDEX_CACHE_BYTES = 256 << 20
#: A read of more row groups than the cache holds keeps at most 1 / SCAN_SHARE of it
#: (see `GroupReader.each_group`).
SCAN_SHARE = 4


def default_cache_bytes() -> int:
    """`FERROLOAD_INDEX_CACHE_BYTES` when set to a non-negative integer, else
    `INDEX_CACHE_BYTES`."""
    raw = os.environ.get("FERROLOAD_INDEX_CACHE_BYTES", "")
    return int(raw) if raw.strip().isdigit() else INDEX_CACHE_BYTES


class GroupCache:
    """Loaded row groups, least recently used first out once over `max_bytes`: the one
    `ferroload_core.LRU`, weighed by the bytes each put says its value holds.

    A row group larger than the whole budget is not kept (the read that loaded it still
    uses it). Thread-safe.

    Attributes:
        loads: entries put so far (row groups read), for tests and benchmarks.
    """

    def __init__(self, max_bytes: int) -> None:
        self.loads = 0
        self._entries: LRU[tuple[Any, ...], tuple[Any, int]] = LRU(max_bytes, weigh=_nbytes)
        self._lock = threading.Lock()  # for `loads`

    @property
    def max_bytes(self) -> int:
        """The bound."""
        return self._entries.max_weight

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._entries.weight

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: tuple[Any, ...]) -> Any:
        """The value under `key` (now the most recently used), or None."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: tuple[Any, ...], value: Any, nbytes: int, *, keep: bool = True) -> None:
        """Keep `value` (`nbytes` large) under `key`, evicting the least recently used
        (`keep=False`: only count the load)."""
        with self._lock:
            self.loads += 1
        if keep:
            self._entries.put(key, (value, nbytes))

    def held(self) -> list[tuple[Any, ...]]:
        """The keys held, least recently used first."""
        return self._entries.held()


def _nbytes(entry: tuple[Any, int]) -> int:
    return entry[1]


@dataclass(frozen=True)
class RowPlan:
    """Where asked rows live, grouped by row group.

    Attributes:
        groups: (part, row group) of each group touched, sorted.
        order: positions in the asked rows, sorted by group (stable).
        bounds: `order[bounds[i]:bounds[i + 1]]` are the rows of `groups[i]`.
        inner: for each asked row, its row number within its group.
    """

    groups: list[tuple[int, int]]
    order: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    inner: npt.NDArray[np.int64]

    def segments(self) -> list[tuple[tuple[int, int], npt.NDArray[np.int64]]]:
        """((part, group), positions in the asked rows) for each group touched."""
        b = self.bounds.tolist()
        return [(g, self.order[b[i] : b[i + 1]]) for i, g in enumerate(self.groups)]


def plan_rows(
    rows: npt.NDArray[np.int64],
    part_bounds: npt.NDArray[np.int64],
    group_starts: Callable[[int], npt.NDArray[np.int64]],
) -> RowPlan:
    """Group `rows` (each in `[0, part_bounds[-1])`) by the part and row group holding them.

    Args:
        rows: row numbers of the whole index, any order, repeats allowed.
        part_bounds: cumulative row counts of the parts (`[0, n0, n0 + n1, …]`).
        group_starts: for a part, the cumulative row counts of its row groups; called
            once for each part touched (only those: a footer read each).

    Costs O(len(rows) · log) and one `group_starts` call per part touched.
    """
    n = len(rows)
    pidx = np.searchsorted(part_bounds, rows, side="right") - 1
    by_part = np.argsort(pidx, kind="stable")
    sp = pidx[by_part]
    cuts = (np.flatnonzero(np.diff(sp)) + 1).tolist()
    group = np.empty(n, dtype=np.int64)
    inner = np.empty(n, dtype=np.int64)
    for a, b in zip([0, *cuts], [*cuts, n], strict=True):
        if a == b:
            continue
        p = int(sp[a])
        sel = by_part[a:b]
        local = rows[sel] - part_bounds[p]
        gs = group_starts(p)
        g = np.searchsorted(gs, local, side="right") - 1
        group[sel] = g
        inner[sel] = local - gs[g]
    key = (pidx.astype(np.int64) << 32) | group
    order = np.argsort(key, kind="stable").astype(np.int64)
    sk = key[order]
    starts = np.flatnonzero(np.diff(sk)) + 1 if n else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], starts, [n]]).astype(np.int64) if n else np.zeros(1, np.int64)
    firsts = sk[bounds[:-1]] if n else sk
    groups = [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in firsts.tolist()]
    return RowPlan(groups, order, bounds, inner)
