"""Known-order read-ahead: the epoch's order is fixed in advance, so the cache blocks the
next batches need are fetched before the batch builder asks, and the blocks read for the
last time this epoch are marked cold (evicted first)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ferroload_loader._source import ResolvedSource
from ferroload_store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedObject:
    """One shard as the store's block cache knows it."""

    store: Store
    path: str
    size: int
    version: str


@dataclass
class BlockPlan:
    """Every cache block an iteration reads, in the order of first use.

    Attributes:
        objects: the shards, indexed by `obj`.
        obj: per block, its shard.
        block: per block, its index in the shard (`offset // block_size`).
        first: per block, the first batch that reads it.
        last: per block, the last batch that reads it.
        nbytes: per block, its size (the last block of a shard is shorter).
    """

    objects: list[CachedObject]
    obj: npt.NDArray[np.int64]
    block: npt.NDArray[np.int64]
    first: npt.NDArray[np.int64]
    last: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.obj)

    @property
    def total_bytes(self) -> int:
        """Bytes of every block of the plan."""
        return int(self.nbytes.sum())


def plan_blocks(
    source: ResolvedSource,
    modalities: Sequence[str],
    batches: Sequence[npt.NDArray[np.int64]],
) -> BlockPlan | None:
    """The blocks `batches` read from the datasets' block caches (None when no dataset of
    `source` has one, for example local ones)."""
    if not batches or not modalities:
        return None
    lens = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
    items = np.concatenate(batches).astype(np.int64, copy=False)
    batch_of = np.repeat(np.arange(len(batches), dtype=np.int64), lens)
    objects: list[CachedObject] = []
    obj_id: dict[tuple[int, int], int] = {}
    keys_obj, keys_block, keys_batch = [], [], []
    for d, slots, pos in source.split(items):
        ds = source.datasets[d]
        bs = ds.store.block_size
        if bs is None:
            continue
        for name in modalities:
            shard_of = ds.shard_of(name)  # a layer's modalities live in its own shards
            length = ds.sizes(name)[pos]
            keep = np.flatnonzero(ds.present(name)[pos] & (length > 0))
            if not len(keep):
                continue
            start = ds.offsets(name)[pos[keep]]
            b0 = start // bs
            b1 = (start + length[keep] - 1) // bs
            count = b1 - b0 + 1
            rep = np.repeat(np.arange(len(keep)), count)
            within = np.arange(len(rep)) - np.repeat(np.cumsum(count) - count, count)
            codes = shard_of[pos[keep]].astype(np.int64)
            # shard code -> object id, vectorised (a mask per shard would be O(shards x items))
            uniq, inverse = np.unique(codes, return_inverse=True)
            lut = np.empty(len(uniq), dtype=np.int64)
            for j, code in enumerate(uniq.tolist()):
                key = (d, code)
                if key not in obj_id:
                    path, size, version = ds.shard_ref(code)
                    obj_id[key] = len(objects)
                    objects.append(CachedObject(ds.store, path, size, version))
                lut[j] = obj_id[key]
            keys_obj.append(lut[inverse][rep])
            keys_block.append(b0[rep] + within)
            keys_batch.append(batch_of[slots[keep]][rep])
    if not objects:
        return None
    o = np.concatenate(keys_obj)
    b = np.concatenate(keys_block)
    t = np.concatenate(keys_batch)
    # one row per (object, block): its first and last batch
    order = np.lexsort((t, b, o))
    o, b, t = o[order], b[order], t[order]
    new = np.ones(len(o), dtype=bool)
    new[1:] = (o[1:] != o[:-1]) | (b[1:] != b[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(o)) - 1
    uo, ub, first, last = o[starts], b[starts], t[starts], t[ends]
    sizes = np.asarray([objects[i].size for i in uo.tolist()], dtype=np.int64)
    bs_of = np.asarray([objects[i].store.block_size or 1 for i in uo.tolist()], dtype=np.int64)
    nbytes = np.clip(sizes - ub * bs_of, 0, bs_of).astype(np.int64)
    by_use = np.lexsort((ub, uo, first))
    return BlockPlan(objects, uo[by_use], ub[by_use], first[by_use], last[by_use], nbytes[by_use])


#: The most bytes one read-ahead step fetches at once.
STEP_MAX = 64 << 20


class ReadAhead:
    """Fetches a `BlockPlan`'s blocks in order of first use on a background thread.

    At most `budget` bytes of fetched blocks are still waiting for their last reader
    (the blocks of the batch about to be built are always allowed). `done(k)` tells it
    that batch `k` has read its payloads: blocks whose last use was `k` are marked cold in
    the cache and leave the budget.
    """

    def __init__(self, plan: BlockPlan, budget: int) -> None:
        self._plan = plan
        self._budget = budget
        self._cond = threading.Condition()
        self._done = -1  # batches whose payloads have been read: 0..done
        self._live = 0  # fetched bytes not yet past their last use
        self._fetched = np.zeros(len(plan), dtype=bool)
        self._stopped = False
        self.fetched_bytes = 0
        self.error: BaseException | None = None
        by_last = np.argsort(plan.last, kind="stable")
        cuts = np.searchsorted(plan.last[by_last], np.arange(int(plan.last.max()) + 2))
        self._last_of = [by_last[cuts[k] : cuts[k + 1]] for k in range(len(cuts) - 1)]
        self._thread = threading.Thread(target=self._run, name="ferroload-readahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        plan = self._plan
        i, n = 0, len(plan)
        # Steps start small (the first batch waits for the first step) and double up to
        # STEP_MAX: a step's blocks are fetched together (coalesced, in parallel).
        step = 0
        try:
            while i < n:
                with self._cond:
                    while not self._stopped and (
                        plan.first[i] > self._done + 1
                        and self._live + plan.nbytes[i] > self._budget
                    ):
                        self._cond.wait()
                    if self._stopped:
                        return
                    room = min(self._budget - self._live, step)
                    urgent = self._done + 1
                j, took = i + 1, int(plan.nbytes[i])
                while j < n and (plan.first[j] <= urgent or took + plan.nbytes[j] <= room):
                    took += int(plan.nbytes[j])
                    j += 1
                step = min(max(2 * step, 2 * took), STEP_MAX)
                self._fetch(i, j)
                i = j
        except BaseException as exc:  # the builder then fetches for itself
            self.error = exc
            logger.warning("read-ahead stopped: %s", exc)

    def _fetch(self, i: int, j: int) -> None:
        plan = self._plan
        objs = plan.obj[i:j]
        for o in np.unique(objs).tolist():
            sel = np.flatnonzero(objs == o) + i
            ob = plan.objects[o]
            ob.store.prefetch_blocks(ob.path, plan.block[sel], size=ob.size, version=ob.version)
        nbytes = int(plan.nbytes[i:j].sum())
        with self._cond:
            self._fetched[i:j] = True
            # blocks whose last reader is already done are cold at once
            late = np.arange(i, j)[plan.last[i:j] <= self._done]
            self._live += nbytes - int(plan.nbytes[late].sum())
            self.fetched_bytes += nbytes
        if len(late):
            self._mark_cold(late)

    def _mark_cold(self, sel: npt.NDArray[np.int64]) -> None:
        plan = self._plan
        objs = plan.obj[sel]
        for o in np.unique(objs).tolist():
            ob = plan.objects[o]
            blocks = plan.block[sel[objs == o]]
            ob.store.mark_cold_blocks(ob.path, blocks, size=ob.size, version=ob.version)

    def done(self, k: int) -> None:
        """Batch `k` has read its payloads."""
        sel = self._last_of[k] if k < len(self._last_of) else np.zeros(0, dtype=np.int64)
        with self._cond:
            self._done = max(self._done, k)
            fetched = sel[self._fetched[sel]]
            self._live -= int(self._plan.nbytes[fetched].sum())
            self._cond.notify_all()
        # Every block last read by batch k, whoever fetched it: when the read-ahead falls
        # behind, the batch builder fetches blocks itself, and the read-ahead may never
        # reach them before the pass ends.
        if len(sel):
            try:
                self._mark_cold(sel)
            except Exception as exc:  # only an eviction hint
                logger.debug("could not mark blocks cold: %s", exc)

    @property
    def live_bytes(self) -> int:
        """Fetched bytes still ahead of (or in use by) the batch builder."""
        with self._cond:
            return self._live

    def stop(self) -> None:
        """Stop fetching (an unfinished iteration)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
