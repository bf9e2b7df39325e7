"""Range reads of an object store through a `BlockCache`: objects cut into aligned blocks,
each fetched once (by whichever thread asks first), kept on local disk, and served as
read-only views of verified private copies (never mappings of the cache files, which
another process may truncate or replace)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_core import LRU
from ferroload_store._cache import BlockCache

#: Bytes of verified blocks a `BlockReader` keeps in memory, so that a block read by
#: many batches is read and verified once. They are private copies (cache entries are
#: never mapped), so the bound is in bytes of process memory: 64 MiB, 16 blocks of the
#: default 4 MiB. Beyond it the least recently used are dropped. Set it per reader with
#: `BlockReader(..., view_cache_bytes=...)`.
VIEW_CACHE_BYTES = 64 << 20

#: fetch(starts, lengths) -> one buffer per read (shorter at the end of the object).
Fetch = Callable[[Sequence[int], Sequence[int]], list[Any]]


class BlockReader:
    """Reads blocks of objects of one store through its `BlockCache`.

    Concurrent requests for the same missing block make one fetch: the others wait for
    it. Blocks this process has verified stay in memory (an LRU of at most
    `view_cache_bytes`), so a block read by many batches is read and verified once.

    Args:
        cache: the disk cache.
        uri: what identifies the store in the keys: its URI and, for an object store,
            its endpoint and region (`Store` passes them), so that two stores with one
            URI on different endpoints never share entries.
        view_cache_bytes: the bound of the in-memory LRU (`VIEW_CACHE_BYTES`).
    """

    def __init__(
        self, cache: BlockCache, uri: str, *, view_cache_bytes: int = VIEW_CACHE_BYTES
    ) -> None:
        self.cache = cache
        self.uri = uri
        self.block_size = cache.block_size
        # Thread safety: the views are an `LRU`, which takes its own lock in every call;
        # `_lock` guards only the claims of blocks being fetched (`_inflight`).
        self._views: LRU[str, memoryview] = LRU(view_cache_bytes, weigh=_nbytes)
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @property
    def view_cache_bytes(self) -> int:
        """The bound of the in-memory LRU of verified blocks, in bytes (settable)."""
        return self._views.max_weight

    @view_cache_bytes.setter
    def view_cache_bytes(self, value: int) -> None:
        self._views.max_weight = value

    def keys(self, path: str, version: str, blocks: Sequence[int]) -> list[str]:
        """The cache keys of `blocks` of object `path` at `version`."""
        bs = self.block_size
        return [BlockCache.key(self.uri, path, version, b, bs) for b in blocks]

    def blocks(
        self,
        path: str,
        blocks: Sequence[int],
        *,
        size: int,
        version: str,
        fetch: Fetch,
        keep: bool = True,
    ) -> dict[int, memoryview]:
        """The data of `blocks` (unique indices) of an object of `size` bytes: from this
        process's views, else the disk cache, else fetched (contiguous missing blocks in
        one coalesced call of `fetch`, which splits and parallelises) and stored.

        With `keep=False` (prefetching), nothing is returned or kept in memory: the
        blocks only land in the disk cache.
        """
        keys = self.keys(path, version, blocks)
        out: dict[int, memoryview] = {}
        missing: list[tuple[int, str]] = []
        waits: list[tuple[int, str, threading.Event]] = []
        mine: list[tuple[int, str]] = []
        for b, key in zip(blocks, keys, strict=True):
            if keep:
                view = self._views.get(key)
                if view is not None:
                    out[b] = view
                    continue
            elif key in self._views:  # not `get`: a prefetch is no use of the view
                continue
            if not keep and self.cache.contains(key):
                continue
            missing.append((b, key))
        for b, key in missing:
            got = self.cache.get(key) if keep else None
            if got is not None:
                out[b] = got
                self._views.put(key, got)
                continue
            with self._lock:
                ev = self._inflight.get(key)
                if ev is None:
                    self._inflight[key] = threading.Event()
                else:
                    waits.append((b, key, ev))
                    continue
            # A fetch that ended between the lookup above and the claim has stored it.
            if keep:
                again = self._views.get(key) or self.cache.get(key)
                stored = again is not None
            else:
                again, stored = None, key in self._views or self.cache.contains(key)
            if not stored:
                mine.append((b, key))
                continue
            with self._lock:
                self._inflight.pop(key).set()
            if again is not None:
                out[b] = again
        if mine:
            try:
                self._fetch(path, mine, size, fetch, out if keep else None)
            finally:
                with self._lock:
                    for _, key in mine:
                        ev = self._inflight.pop(key, None)
                        if ev is not None:
                            ev.set()
        for b, key, ev in waits:
            ev.wait()
            if not keep:
                continue
            got = self._views.get(key) or self.cache.get(key)
            if got is None:  # the other fetch failed or the entry is gone: fetch it here
                self._fetch(path, [(b, key)], size, fetch, out)
            else:
                out[b] = got
        return out

    def _fetch(
        self,
        path: str,
        wanted: list[tuple[int, str]],
        size: int,
        fetch: Fetch,
        out: dict[int, memoryview] | None,
    ) -> None:
        bs = self.block_size
        idx = np.asarray([b for b, _ in wanted], dtype=np.int64)
        order = np.argsort(idx)
        idx = idx[order]
        keys = [wanted[i][1] for i in order.tolist()]
        # runs of consecutive blocks become one read each
        cuts = np.flatnonzero(np.diff(idx) != 1) + 1
        runs = np.split(np.arange(len(idx)), cuts)
        starts = [int(idx[r[0]]) * bs for r in runs]
        ends = [min(size, (int(idx[r[-1]]) + 1) * bs) for r in runs]
        bufs = fetch(starts, [e - s for s, e in zip(starts, ends, strict=True)])
        for run, start, buf in zip(runs, starts, bufs, strict=True):
            mv = memoryview(buf)
            for j in run.tolist():
                a = int(idx[j]) * bs - start
                data = mv[a : a + bs]
                self.cache.put(keys[j], data)
                if out is not None:
                    # the fetched bytes (a block's own copy when the read spans several,
                    # so that a kept block does not pin its neighbours), not a re-read
                    view = data if data.nbytes == mv.nbytes else memoryview(bytes(data))
                    view = view.toreadonly()
                    out[int(idx[j])] = view
                    self._views.put(keys[j], view)

    def ranges(
        self,
        path: str,
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        *,
        size: int,
        version: str,
        fetch: Fetch,
    ) -> list[memoryview]:
        """Ranges [starts[i], ends[i]) of the object (within `size`): a view into one block
        when a range lies in one, else a copy joining the blocks it spans."""
        bs = self.block_size
        nonempty = ends > starts
        b0 = starts // bs
        b1 = np.where(nonempty, (ends - 1) // bs, b0)
        span = b1 - b0 + 1
        need = np.unique(
            np.concatenate([np.arange(a, b + 1) for a, b in zip(b0[span > 1], b1[span > 1], strict=False)] + [b0])
        ) if (span > 1).any() else np.unique(b0)  # fmt: skip
        got = self.blocks(path, need.tolist(), size=size, version=version, fetch=fetch)
        out: list[memoryview] = []
        empty = memoryview(b"")
        for s, e, a, b, ok in zip(
            starts.tolist(), ends.tolist(), b0.tolist(), b1.tolist(), nonempty.tolist(), strict=True
        ):
            if not ok:
                out.append(empty)
            elif a == b:
                out.append(got[a][s - a * bs : e - a * bs])
            else:
                parts = [got[k] for k in range(a, b + 1)]
                joined = b"".join(parts)[s - a * bs : e - a * bs]
                out.append(memoryview(joined))
        return out

    def mark_cold(self, path: str, blocks: Sequence[int], *, version: str) -> None:
        """Blocks read for the last time (this epoch): evict them first."""
        keys = self.keys(path, version, blocks)
        self.cache.mark_cold(keys)
        for key in keys:
            self._views.pop(key)


def _nbytes(view: memoryview) -> int:
    return view.nbytes
