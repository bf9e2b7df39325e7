"""Known-order read-ahead: the epoch's order is fixed in advance, so the cache blocks the
next batches need are fetched before the batch builder asks, and the blocks no batch of
the planned window reads again are marked cold (evicted first).

The plan is incremental: batches are planned a window at a time ahead of the batch
builder (their payload locations through `Dataset.locate`), so its memory is that of
the window, not of the epoch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
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


def _block_uses(
    source: ResolvedSource,
    modalities: Sequence[str],
    batches: Sequence[npt.NDArray[np.int64]],
    objects: list[CachedObject],
    obj_id: dict[tuple[int, int], int],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Every (object, block, batch) that `batches` read, with repeats; new shards are
    added to `objects` / `obj_id`. Payload locations come from `Dataset.locate` of the
    batches' positions only."""
    empty = np.zeros(0, dtype=np.int64)
    if not batches or not modalities:
        return empty, empty, empty
    lens = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
    items = np.concatenate(batches).astype(np.int64, copy=False)
    batch_of = np.repeat(np.arange(len(batches), dtype=np.int64), lens)
    keys_obj, keys_block, keys_batch = [empty], [empty], [empty]
    for d, slots, pos in source.split(items):
        ds = source.datasets[d]
        bs = ds.store.block_size
        if bs is None:
            continue
        for name in modalities:
            loc = ds.locate(name, pos)  # a layer's modalities live in its own shards
            length = np.asarray(loc.length, dtype=np.int64)
            codes_all = np.asarray(loc.shard, dtype=np.int64)
            keep = np.flatnonzero(np.asarray(loc.present) & (length > 0) & (codes_all >= 0))
            if not len(keep):
                continue
            start = np.asarray(loc.offset, dtype=np.int64)[keep]
            b0 = start // bs
            b1 = (start + length[keep] - 1) // bs
            count = b1 - b0 + 1
            rep = np.repeat(np.arange(len(keep)), count)
            within = np.arange(len(rep)) - np.repeat(np.cumsum(count) - count, count)
            codes = codes_all[keep]
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
            keys_obj.append(lut[inverse.reshape(-1)][rep])
            keys_block.append(b0[rep] + within)
            keys_batch.append(batch_of[slots[keep]][rep])
    return np.concatenate(keys_obj), np.concatenate(keys_block), np.concatenate(keys_batch)


def _block_bytes(
    objects: list[CachedObject], obj: npt.NDArray[np.int64], block: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    sizes = np.asarray([objects[i].size for i in obj.tolist()], dtype=np.int64)
    bs_of = np.asarray([objects[i].store.block_size or 1 for i in obj.tolist()], dtype=np.int64)
    return np.clip(sizes - block * bs_of, 0, bs_of).astype(np.int64)


def plan_blocks(
    source: ResolvedSource,
    modalities: Sequence[str],
    batches: Sequence[npt.NDArray[np.int64]],
) -> BlockPlan | None:
    """The blocks `batches` read from the datasets' block caches (None when no dataset of
    `source` has one, for example local ones)."""
    objects: list[CachedObject] = []
    o, b, t = _block_uses(source, modalities, batches, objects, {})
    if not objects:
        return None
    # one row per (object, block): its first and last batch
    order = np.lexsort((t, b, o))
    o, b, t = o[order], b[order], t[order]
    new = np.ones(len(o), dtype=bool)
    new[1:] = (o[1:] != o[:-1]) | (b[1:] != b[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(o)) - 1
    uo, ub, first, last = o[starts], b[starts], t[starts], t[ends]
    nbytes = _block_bytes(objects, uo, ub)
    by_use = np.lexsort((ub, uo, first))
    return BlockPlan(objects, uo[by_use], ub[by_use], first[by_use], last[by_use], nbytes[by_use])


#: The most bytes one read-ahead step fetches at once.
STEP_MAX = 64 << 20
#: Batches planned beyond the one whose blocks are marked cold, at least.
AHEAD_MIN = 4
#: Batches the read-ahead plans at a time while it waits for room in its budget.
PLAN_CHUNK = 16

_Key = tuple[int, int]


class _Block:
    """A block of the planned window: its size, last planned reader, whether fetched."""

    __slots__ = ("fetched", "last", "nbytes")

    def __init__(self, nbytes: int, last: int) -> None:
        self.nbytes = nbytes
        self.last = last
        self.fetched = False


class ReadAhead:
    """Fetches the blocks of upcoming batches, in order of first use, on a background
    thread, planning a window of batches at a time.

    `batch_of(k)` gives batch `k`'s item ids (of `count` batches). At most `budget`
    bytes of fetched blocks are still waiting for their last planned reader (the blocks
    of the batch about to be built are always allowed). `done(k)` tells it that batch
    `k` has read its payloads: blocks that no batch up to `k + ahead` reads again are
    marked cold in the cache and leave the budget, where `ahead` is at least `horizon`
    (the loader passes two shuffle windows for the streaming order, whose blocks are
    reused within a window) and `AHEAD_MIN`, and the plan always reaches that far before
    anything is marked: a block read again later than that is no longer known to be
    needed soon, and cold only means "evict first".
    """

    def __init__(
        self,
        source: ResolvedSource,
        modalities: Sequence[str],
        batch_of: Callable[[int], npt.NDArray[np.int64]],
        count: int,
        budget: int,
        *,
        horizon: int = 0,
    ) -> None:
        self._source = source
        self._modalities = list(modalities)
        self._batch_of = batch_of
        self._count = count
        self._budget = budget
        self._ahead = max(horizon, AHEAD_MIN)
        self._cond = threading.Condition()
        self._plan_lock = threading.Lock()
        self._objects: list[CachedObject] = []
        self._obj_id: dict[tuple[int, int], int] = {}
        self._planned = 0  # batches planned: 0..planned-1
        self._blocks: dict[_Key, _Block] = {}  # blocks of the window, by (object, block)
        self._batch_keys: dict[int, list[_Key]] = {}  # per planned batch not yet fetched
        self._last_of: dict[int, set[_Key]] = {}  # batch -> blocks it reads last (so far)
        self._done = -1  # batches whose payloads have been read: 0..done
        self._retired = -1  # batches whose last-read blocks were marked: 0..retired
        self._live = 0  # fetched bytes not yet past their last use
        self._stopped = False
        self.fetched_bytes = 0
        self.planned_peak = 0  # the most blocks the window held at once
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ferroload-readahead", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ planning

    def _ensure_planned(self, upto: int) -> None:
        """Plan batches up to `upto` (exclusive)."""
        upto = min(upto, self._count)
        with self._plan_lock:
            lo = self._planned
            if upto <= lo:
                return
            batches = [self._batch_of(k) for k in range(lo, upto)]
            o, b, t = _block_uses(
                self._source, self._modalities, batches, self._objects, self._obj_id
            )
            t = t + lo
            # one row per (batch, object, block), in batch order
            order = np.lexsort((b, o, t))
            o, b, t = o[order], b[order], t[order]
            keep = np.ones(len(o), dtype=bool)
            keep[1:] = (o[1:] != o[:-1]) | (b[1:] != b[:-1]) | (t[1:] != t[:-1])
            o, b, t = o[keep], b[keep], t[keep]
            nbytes = _block_bytes(self._objects, o, b) if len(o) else o
            with self._cond:
                for k in range(lo, upto):
                    self._batch_keys[k] = []
                for oi, bi, ti, nb in zip(
                    o.tolist(), b.tolist(), t.tolist(), nbytes.tolist(), strict=True
                ):
                    key = (oi, bi)
                    blk = self._blocks.get(key)
                    if blk is None:
                        blk = self._blocks[key] = _Block(nb, ti)
                    else:
                        self._last_of[blk.last].discard(key)
                        blk.last = ti
                    self._last_of.setdefault(ti, set()).add(key)
                    self._batch_keys[ti].append(key)
                self._planned = upto
                self.planned_peak = max(self.planned_peak, len(self._blocks))
                self._cond.notify_all()

    def _need(self, k: int) -> int:
        """Bytes of batch `k`'s blocks not fetched yet (under the lock)."""
        return sum(
            blk.nbytes
            for key in self._batch_keys.get(k, ())
            if (blk := self._blocks.get(key)) is not None and not blk.fetched
        )

    # ------------------------------------------------------------------ fetching

    def _run(self) -> None:
        k, n = 0, self._count
        # Steps start small (the first batch waits for the first step) and double up to
        # STEP_MAX: a step's blocks are fetched together (coalesced, in parallel).
        step = 0
        try:
            while k < n:
                self._ensure_planned(k + 1)
                with self._cond:
                    while not self._stopped and (
                        k > self._done + 1 and self._live + self._need(k) > self._budget
                    ):
                        if self._planned < self._horizon():
                            break  # plan further while waiting: it lets blocks retire
                        self._cond.wait()
                    if self._stopped:
                        return
                    waiting = k > self._done + 1 and self._live + self._need(k) > self._budget
                    if not waiting and k <= self._done:  # the builder is past it
                        self._batch_keys.pop(k, None)
                        k += 1
                        continue
                    room = min(self._budget - self._live, step)
                    urgent = self._done + 1
                if waiting:
                    self._ensure_planned(min(self._planned + PLAN_CHUNK, self._horizon()))
                    self._retire()
                    continue
                j, took = k, 0
                keys: list[_Key] = []
                while j < n:
                    if j > k and j > urgent and took >= room:
                        break  # full: no need to plan batch j for this step
                    self._ensure_planned(j + 1)
                    with self._cond:
                        need = self._need(j)
                        if j > k and j > urgent and took + need > room:
                            break
                        for key in self._batch_keys.pop(j, ()):
                            blk = self._blocks.get(key)
                            if blk is not None and not blk.fetched:
                                blk.fetched = True  # claimed: fetched by this step
                                keys.append(key)
                        took += need
                    j += 1
                step = min(max(2 * step, 2 * took), STEP_MAX)
                self._fetch(keys)
                self._retire()
                k = j
        except BaseException as exc:  # the builder then fetches for itself
            self.error = exc
            logger.warning("read-ahead stopped: %s", exc)

    def _fetch(self, keys: list[_Key]) -> None:
        if not keys:
            return
        self._store_call(keys, cold=False)
        with self._cond:
            nbytes = late = 0
            cold: list[_Key] = []
            for key in keys:
                blk = self._blocks.get(key)
                size = blk.nbytes if blk is not None else self._size(key)
                nbytes += size
                if blk is None:  # retired while being fetched: its last reader is done
                    cold.append(key)
                if blk is None or not blk.fetched:  # (or planned anew since): not live
                    late += size
            self._live += nbytes - late
            self.fetched_bytes += nbytes
        if cold:
            self._store_call(cold, cold=True)

    def _size(self, key: _Key) -> int:
        o, b = key
        return int(_block_bytes(self._objects, np.asarray([o]), np.asarray([b]))[0])

    def _store_call(self, keys: list[_Key], *, cold: bool) -> None:
        by_obj: dict[int, list[int]] = {}
        for o, b in keys:
            by_obj.setdefault(o, []).append(b)
        for o, blocks in by_obj.items():
            ob = self._objects[o]
            arr = np.asarray(blocks, dtype=np.int64)
            if cold:
                ob.store.mark_cold_blocks(ob.path, arr, size=ob.size, version=ob.version)
            else:
                ob.store.prefetch_blocks(ob.path, arr, size=ob.size, version=ob.version)

    # ------------------------------------------------------------------ progress

    def _horizon(self) -> int:
        """How far the plan must reach for every batch done so far to have its last-read
        blocks marked."""
        with self._cond:
            return min(self._count, self._done + 1 + self._ahead)

    def _retire(self) -> None:
        """Mark cold the blocks whose last planned reader is done, for every done batch
        the plan reaches `ahead` batches past (or the end of the pass)."""
        with self._cond:
            # batch j's last readers are final once the plan reaches j + ahead (or the end)
            upto = (
                self._done
                if self._planned >= self._count
                else min(self._done, self._planned - 1 - self._ahead)
            )
            cold: list[_Key] = []
            while self._retired < upto:
                self._retired += 1
                for key in self._last_of.pop(self._retired, ()):
                    blk = self._blocks.pop(key)
                    if blk.fetched:
                        self._live -= blk.nbytes
                    cold.append(key)
            self._cond.notify_all()
        # Every block last read by these batches, whoever fetched it: when the read-ahead
        # falls behind, the batch builder fetches blocks itself, and the read-ahead may
        # never reach them before the pass ends.
        if cold:
            try:
                self._store_call(cold, cold=True)
            except Exception as exc:  # only an eviction hint
                logger.debug("could not mark blocks cold: %s", exc)

    def done(self, k: int) -> None:
        """Batch `k` has read its payloads.

        Its blocks are marked once the plan reaches `ahead` batches past it: the
        read-ahead thread plans that far in the background; when the builder has
        overtaken the plan (or the read-ahead stopped on an error), and for the last
        batch of the pass, the plan is extended here.
        """
        with self._cond:
            self._done = max(self._done, k)
            self._cond.notify_all()
        behind = self._planned <= k or not self._thread.is_alive()
        if not self._stopped and (behind or k >= self._count - 1):
            try:
                self._ensure_planned(self._horizon())
            except Exception as exc:  # the read-ahead reports its own errors
                logger.debug("could not plan past batch %d: %s", k, exc)
        self._retire()

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
