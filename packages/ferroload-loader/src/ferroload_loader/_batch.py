"""Building one batch: ids, coalesced reads, parallel decoding, failures, collation."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_loader._fields import (
    BatchState,
    Field,
    OnError,
    Share,
    read_index,
    whole_share,
)
from ferroload_loader._source import ResolvedSource

logger = logging.getLogger(__name__)

#: The most items an `IndexWindow` reads the index for at once.
WINDOW_ITEMS = 1 << 22
#: The most bytes a window's ids, metadata values and payload locations may hold (a
#: loader keeps two windows: the one in use and the next one, read in the background).
WINDOW_BYTES = 192 << 20
#: The same for an order that reads the index in sequence (streaming, dataset order).
LOCAL_WINDOW_ITEMS = 1 << 18


def window_options(mode: str) -> tuple[int, int | None]:
    """`IndexWindow`'s (`max_items`, `growth`) for a sampler mode: a shuffled order (`permutation`,
    `mixture`) touches every row group in any large window, so its windows jump to
    `WINDOW_ITEMS` (fewer passes over the index); an order that walks the index in
    sequence (`shard_block`, `sequential`) touches row groups in proportion to a window's
    items, so its windows double up to `LOCAL_WINDOW_ITEMS` (no stall while a large one
    is read, and two small windows in memory). Both are also bounded by `WINDOW_BYTES`."""
    if mode in ("shard_block", "sequential"):
        return LOCAL_WINDOW_ITEMS, 2
    return WINDOW_ITEMS, None


class IndexWindow:
    """What the index holds for the next batches of an iteration, read for many batches
    at once.

    A shuffled order puts the items of one batch in as many row groups of the index as
    it has items; read batch by batch, each row group is decoded for one or two rows,
    and a large index (more row groups than the index cache holds) is decoded again
    for every batch. The window asks the index for the items of many batches together:
    one pass over the row groups they touch, in row-group order, each decoded once for
    all of them; then hands each batch its share (zero-copy slices).

    The first two windows are of one batch each (the first batches wait for their own
    rows only; a loader reads batch 1 before it hands over batch 0), then as large as
    `max_items` and `max_bytes` allow (a shuffled window of more items than the index has
    row groups costs one pass over them all whatever its size, so the fewer windows an
    epoch has, the fewer passes: the items of a window are sized by the bytes per item
    the windows read so far held), or, with `growth`, each `growth` times the batches of
    the one before, within the same bounds (for orders that read the index in sequence:
    see `window_options`). Once a window is read, the next one is read in a background
    thread while its batches are used (`background=False`: when its first batch is asked
    for). Memory: two windows of ids, metadata values and payload locations, each at most
    `max_bytes` (ids and one integer column: ~40 bytes an item, 160 MiB at 2**22 items;
    wide metadata such as captions reaches the byte bound first). After each read the
    Arrow memory pool returns what the read freed (mimalloc would keep it: 1.43-1.54 GB
    peak at 10^8 rows without, 1.34-1.44 GB with).

    Args:
        source: what the loader reads from.
        fields: the loader's fields (their metadata columns and modalities are read).
        batch_of: the items of batch `i` of the iteration (called from the background
            thread too).
        count: batches in the iteration.
        max_items: the most items read at once.
        max_bytes: the most bytes a window may hold (estimated from the windows before).
        growth: None: the third window on holds `max_items`; a factor: windows grow by
            it, from one batch.
        background: read the next window ahead, in a thread.
    """

    def __init__(
        self,
        source: ResolvedSource,
        fields: Sequence[Field],
        batch_of: Callable[[int], npt.NDArray[np.int64]],
        count: int,
        *,
        max_items: int = WINDOW_ITEMS,
        max_bytes: int = WINDOW_BYTES,
        growth: int | None = None,
        background: bool = True,
    ) -> None:
        self._source = source
        self._fields = list(fields)
        self._batch_of = batch_of
        self._count = count
        self._max = max(1, max_items)
        self._max_bytes = max(1, max_bytes)
        self._per_item = 0.0  # bytes a window held per item (the largest seen)
        self._growth = growth
        self._last = 1  # batches of the last window reserved
        self._background = background
        self._sizes = [1, 1]  # the first windows' batches; then as many as fit
        self._cap = max(1, count)  # batches that fit in max_items (known after a read)
        self._ready: dict[int, tuple[npt.NDArray[np.int64], list[Share]]] = {}
        self._unread = (0, 0)  # batches read on their own (their window's read failed)
        self._pending: tuple[int, int, int] | None = None  # [start, stop) being read, gen
        self._generation = 0  # bumped when the batches asked for leave the windows' order
        self._cond = threading.Condition()
        #: windows read so far (for tests and benchmarks)
        self.windows = 0

    def shares(self, i: int, items: npt.NDArray[np.int64]) -> list[Share] | None:
        """The shares of batch `i` (whose items are `items`): from a window read (or
        being read) already, else from a window read now from `i`; None when batch `i`
        should be read on its own (its items are not the order's, or reading its window
        failed: the batch's own read then raises in its turn)."""
        with self._cond:
            while True:
                got = self._ready.pop(i, None)
                if got is not None or self._unread[0] <= i < self._unread[1]:
                    break
                p = self._pending
                if p is not None and p[0] <= i < p[1] and p[2] == self._generation:
                    self._cond.wait()
                    continue
                # not read, nor being read: batches were skipped (a resume); start here
                self._ready.clear()
                self._generation += 1
                stop = self._reserve(i)
                if stop == i:
                    break
                gen = self._generation
                self._cond.release()
                try:
                    self._read(i, stop, gen)
                finally:
                    self._cond.acquire()
        # the window holds the very arrays `batch_of` handed out (a `BatchItems` keeps
        # them until prepared): identity first, the comparison only for other arrays
        if got is None or (got[0] is not items and not np.array_equal(got[0], items)):
            return None
        return got[1]

    def _reserve(self, i: int) -> int:
        """Mark the next window, from batch `i`, as being read (under the lock); returns
        its end."""
        if self._sizes:
            size = self._sizes.pop(0)
        elif self._growth:
            size = min(self._cap, self._last * self._growth)
        else:
            size = self._cap
        self._last = size
        stop = min(self._count, i + size)
        self._pending = (i, stop, self._generation) if stop > i else None
        return stop

    def _read(self, i: int, stop: int, gen: int) -> None:
        """Read the window [i, stop) (not under the lock), keep its batches' shares and
        start reading the next window in the background."""
        batches: list[npt.NDArray[np.int64]] = []
        total = 0
        for j in range(i, stop):
            try:
                b = np.asarray(self._batch_of(j), dtype=np.int64)
            except Exception:  # the loader asks again and hands the error on
                break
            if batches and total + len(b) > self._max:
                break
            if batches and (total + len(b)) * self._per_item > self._max_bytes:
                break
            batches.append(b)
            total += len(b)
        shares: list[Share] | None = None
        if batches:
            try:
                shares = read_index(self._source, self._fields, np.concatenate(batches))
                # a window's read leaves ~100 bytes an item of freed Arrow buffers, which
                # the allocator keeps for reuse unless told to return them
                pa.default_memory_pool().release_unused()
            except Exception:  # each batch reads on its own and fails in its own turn
                shares = None
        with self._cond:
            if gen != self._generation:
                return  # a read for batches nobody asks for any more
            self._pending = None
            end = i + len(batches)
            if shares is None:
                self._unread = (i, end)
            else:
                self.windows += 1
                first = 0
                for k, b in enumerate(batches):
                    last = first + len(b)
                    mine = []
                    for s in shares:
                        lo, hi = np.searchsorted(s.slots, [first, last]).tolist()
                        if hi > lo:
                            mine.append(s.slice(lo, hi, first))
                    self._ready[i + k] = (b, mine)
                    first = last
                if total:  # later windows: as many batches as fit in both bounds
                    self._per_item = max(self._per_item, _nbytes(shares) / total)
                    fit = min(self._max, int(self._max_bytes / max(self._per_item, 1.0)))
                    self._cap = max(1, fit * len(batches) // total)
            self._cond.notify_all()
            if self._background and shares is not None and 0 < len(batches) == stop - i:
                nxt = self._reserve(end)
                if nxt > end:
                    threading.Thread(
                        target=self._read, args=(end, nxt, gen), name="ferroload-index-window",
                        daemon=True,
                    ).start()  # fmt: skip


def _nbytes(shares: Sequence[Share]) -> int:
    """Bytes the shares of a window hold (their arrays; Arrow buffers by size)."""
    total = 0
    for s in shares:
        total += s.slots.nbytes + s.pos.nbytes
        total += sum(c.nbytes for c in s.columns.values())
        for a in s.locations.values():
            total += sum(x.nbytes for x in (a.present, a.shard, a.offset, a.length, a.checksum))
    return total


def prepare_batch(
    source: ResolvedSource,
    fields: Sequence[Field],
    items: npt.NDArray[np.int64],
    *,
    seed: int,
    epoch: int,
    window: IndexWindow | None = None,
    index: int | None = None,
) -> BatchState:
    """The reading half of a batch: ids, seeds, payload views and metadata columns.

    With a `window` and the batch's `index` in the iteration, what the index holds for
    the batch comes from the window (read for many batches at once); without, the batch
    reads the row groups holding its own items.
    """
    shares = window.shares(index, items) if window is not None and index is not None else None
    if shares is None:
        shares = read_index(source, fields, items)
    sample_ids: list[str]
    if whole_share(shares, len(items)):  # one dataset: the ids in batch order already
        sample_ids = shares[0].columns["sample_id"].to_pylist()
    else:
        sample_ids = [""] * len(items)
        for s in shares:
            ids = s.columns["sample_id"].to_pylist()
            for k, sid in zip(s.slots.tolist(), ids, strict=True):
                sample_ids[k] = sid
    batch = BatchState(
        items=items,
        sample_ids=sample_ids,
        seed_epoch=(seed, epoch),
        ok=np.ones(len(items), dtype=np.bool_),
        shares=shares,
    )
    for f in fields:
        f.prepare(batch, source)
    return batch


def payload_bytes(shares: Sequence[Share]) -> int:
    """Encoded bytes of the payloads `shares` locate (absent ones count 0): a few numpy
    calls per share and modality, none per item."""
    total = 0
    for s in shares:
        for a in s.locations.values():
            total += int(a.length.sum(where=a.present))
    return total


def finish_batch(
    batch: BatchState,
    fields: Sequence[Field],
    *,
    on_error: OnError,
    meanwhile: Callable[[], None] | None = None,
    clock: list[float] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """The decoding half: decode into the batch arrays, then leave failed items out.

    `meanwhile` runs in this thread while the decode pool's other threads work on the
    first decoded column (or after the columns, when none uses the pool); it must not
    raise. `clock`, if given, gets the `time.perf_counter()` at which decoding ended
    (what follows is collation).

    Returns:
        The batch (column name -> array or list; `sample_id` always) and the errors of the
        items left out (with `on_error` "skip" or "warn").

    Raises:
        DecodeError: the first failure, with `on_error="raise"`.
    """
    batch.meanwhile = meanwhile
    for f in fields:
        f.fill(batch)
    leftover = batch.take_meanwhile()
    if leftover is not None:
        leftover()
    if clock is not None:
        clock.append(time.perf_counter())
    columns: dict[str, Any] = {"sample_id": batch.sample_ids, **batch.columns}
    errors: list[Any] = []
    if not batch.ok.all():
        if on_error == "raise":
            raise batch.errors[0]
        keep = np.flatnonzero(batch.ok)
        if on_error == "warn":
            for err in batch.errors:
                logger.warning("left a sample out of its batch: %s", err)
        columns = {k: _take(v, keep) for k, v in columns.items()}
        errors = list(batch.errors)
    for f in fields:
        f.finish(columns)
    return columns, errors


def build_batch(
    source: ResolvedSource,
    fields: Sequence[Field],
    items: npt.NDArray[np.int64],
    *,
    seed: int,
    epoch: int,
    on_error: OnError,
) -> tuple[dict[str, Any], list[Any]]:
    """Read and decode the items of one batch (`prepare_batch`, then `finish_batch`)."""
    state = prepare_batch(source, fields, items, seed=seed, epoch=epoch)
    return finish_batch(state, fields, on_error=on_error)


def _take(values: Any, keep: npt.NDArray[np.int64]) -> Any:
    if isinstance(values, np.ndarray):
        return values[keep]
    return [values[i] for i in keep.tolist()]
