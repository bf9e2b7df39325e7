"""The prefetch thread of a `FerroLoader`: batches built in order, ahead of the consumer.

`BatchItems` computes the item ids of upcoming batches a chunk at a time; `Prefetcher`
reads and decodes the batches of one pass on its thread, within a byte budget.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ferroload_codec import DecodeError
from ferroload_loader._batch import IndexWindow
from ferroload_loader._fields import BatchState
from ferroload_loader._readahead import ReadAhead
from ferroload_loader._sampler import RankItems


class _PeakStats(Protocol):
    peak_prefetch_bytes: int
    blocked_seconds: float


class BatchBuilder(Protocol):
    """What a `Prefetcher` builds batches with: a `FerroLoader`."""

    @property
    def prefetch_bytes(self) -> int: ...

    @property
    def stats(self) -> _PeakStats: ...

    def estimate_bytes(self, items: int | npt.NDArray[np.int64]) -> int: ...

    def _prepare(
        self,
        items: npt.NDArray[np.int64],
        seed: int,
        epoch: int,
        window: IndexWindow | None = None,
        index: int | None = None,
    ) -> BatchState: ...

    def _finish(
        self, state: BatchState, meanwhile: Callable[[], None] | None = None
    ) -> tuple[dict[str, Any], list[DecodeError]]: ...


class BatchItems:
    """Batch `k`'s item ids of a rank's view, each computed once, several batches at a
    time: an order costs a few numpy calls per computation whatever its size (about
    200 us for one batch of 256, 40 us of it per round of cycle walking, against
    0.1-0.2 us an item in large runs), and the index window, the prefetcher and the
    read-ahead all ask for the same batches. Batches are kept until the prefetcher has
    prepared them (`forget`): at most what the index window and the read-ahead plan
    ahead. The first computation is of its own batch only: the first batch waits for
    nothing else (a chunk of 8192 items costs ~3 ms at the start of a process).

    Batch `k` of `count` is the view's batch `first + k * stride`: a DataLoader worker
    builds every `stride`-th batch of the view, and computes those only (none past
    `count`: with `drop_last` the view's last items make no batch)."""

    #: Items computed together (rounded to whole batches).
    CHUNK = 8192

    def __init__(
        self, view: RankItems, batch_size: int, count: int, *, first: int = 0, stride: int = 1
    ) -> None:
        self._view = view
        self._batch_size = batch_size
        self._count = count
        self._start, self._stride = first, stride
        self._per = max(1, self.CHUNK // batch_size)
        self._memo: dict[int, npt.NDArray[np.int64]] = {}
        self._lock = threading.Lock()
        self._done = 0  # batches below this are forgotten and not kept again
        self._first = True  # nothing computed yet

    def __call__(self, k: int) -> npt.NDArray[np.int64]:
        with self._lock:
            got = self._memo.get(k)
        if got is not None:
            return got
        b = self._batch_size
        per, self._first = (1 if self._first else self._per), False
        per = max(1, min(per, self._count - k))
        first, stride = self._start + k * self._stride, self._stride
        marks = range(first, first + per * stride, stride)  # the view's batches
        pos = [self._view.positions(m * b, (m + 1) * b) for m in marks]
        items = self._view.order.at(np.concatenate(pos))  # one computation for them all
        batches = np.split(items, np.cumsum([len(p) for p in pos[:-1]]))
        with self._lock:
            for j, arr in enumerate(batches):
                if k + j >= self._done:
                    self._memo[k + j] = arr
        return batches[0]

    def forget(self, k: int) -> None:
        """Batches up to `k` are prepared: drop them."""
        with self._lock:
            for j in range(self._done, k + 1):
                self._memo.pop(j, None)
            self._done = max(self._done, k + 1)


class Prefetcher:
    """Builds the batches of one iteration, in order, ahead of the consumer.

    One thread: while the decode pool's other threads start on batch i, this thread reads
    batch i+1 (ids, metadata, payload views: `prepare`), then joins the decoding. Reading
    thus overlaps decoding without an extra runnable thread (which would slow decoding
    by about 10% on a machine whose cores the decoders already fill). The first batch is
    handed over before batch 1 is read, so that it waits for its own reads only (and,
    for at most `FIRST_HANDOVER_S`, until the consumer has taken it). Built batches wait
    within a byte budget (one is always allowed when none is waiting).
    """

    #: Longest wait for the consumer to take the first batch before batch 1 is read.
    FIRST_HANDOVER_S = 0.005

    def __init__(
        self,
        loader: BatchBuilder,
        count: int,
        batch_of: Callable[[int], npt.NDArray[np.int64]],
        seed: int,
        epoch: int,
        readahead: ReadAhead | None = None,
        window: IndexWindow | None = None,
    ) -> None:
        self._loader = loader
        self._readahead = readahead
        self._window = window
        self._batch_of = batch_of
        self._prepared = 0
        self._queue: deque[tuple[Any, int, int]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, args=(count, batch_of, seed, epoch), name="ferroload-prefetch",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def _prepare(self, items: npt.NDArray[np.int64], seed: int, epoch: int) -> Any:
        try:
            return self._loader._prepare(items, seed, epoch, self._window, self._prepared)
        except BaseException as exc:  # handed on, raised in the consumer in its turn
            return exc
        finally:
            if self._readahead is not None:
                self._readahead.done(self._prepared)
            if isinstance(self._batch_of, BatchItems):
                self._batch_of.forget(self._prepared)
            self._prepared += 1

    def _run(
        self, count: int, batch_of: Callable[[int], npt.NDArray[np.int64]], seed: int, epoch: int
    ) -> None:
        budget = self._loader.prefetch_bytes
        items: npt.NDArray[np.int64] | None
        state: Any
        try:
            items = batch_of(0) if count else None
        except BaseException as exc:  # handed on, raised in the consumer
            items, state = None, exc
        else:
            state = self._prepare(items, seed, epoch) if items is not None else None
        for i in range(count):
            n_items = len(items) if items is not None else 0
            cost = self._loader.estimate_bytes(n_items)
            with self._cond:
                if not self._stopped and self._queue and self._bytes + cost > budget:
                    t0 = time.perf_counter()
                    while not self._stopped and self._queue and self._bytes + cost > budget:
                        self._cond.wait()
                    self._loader.stats.blocked_seconds += time.perf_counter() - t0
                if self._stopped:
                    return
            upcoming: list[Any] = []
            following: list[Any] = []

            def read_next(
                i: int = i, upcoming: list[Any] = upcoming, following: list[Any] = following
            ) -> None:
                if i + 1 < count:
                    try:
                        nxt = batch_of(i + 1)
                    except BaseException as exc:  # handed on, raised in the consumer
                        following.append(None)
                        upcoming.append(exc)
                        return
                    following.append(nxt)
                    upcoming.append(self._prepare(nxt, seed, epoch))

            # the first batch is handed over before the second is read (the consumer's
            # first batch waits for its own reads only); later ones overlap the next read
            meanwhile = read_next if i else None
            if isinstance(state, BaseException):
                result: Any = state
            else:
                try:
                    result = self._loader._finish(state, meanwhile)
                except BaseException as exc:  # handed on, raised in the consumer
                    result = exc
            with self._cond:
                self._queue.append((result, cost, n_items))
                self._bytes += cost
                stats = self._loader.stats
                stats.peak_prefetch_bytes = max(stats.peak_prefetch_bytes, self._bytes)
                self._cond.notify_all()
            if isinstance(result, BaseException):
                return
            if meanwhile is None:
                self._hand_over()
                read_next()
            # finish_batch always runs its meanwhile
            state = upcoming[0] if upcoming else None
            items = following[0] if following else None

    def _hand_over(self) -> None:
        """Let a waiting consumer take the first batch before the second is read: woken,
        it needs the GIL, which this thread's Python work on the next batch's reads would
        hold for up to the interpreter's switch interval (5 ms). Waits until the batch is
        taken, at most `FIRST_HANDOVER_S`."""
        with self._cond:
            if self._queue and not self._stopped:
                t0 = time.perf_counter()
                self._cond.wait(self.FIRST_HANDOVER_S)
                self._loader.stats.blocked_seconds += time.perf_counter() - t0

    def take(self) -> tuple[dict[str, Any], list[DecodeError], int]:
        """The next batch, its decode errors and the number of items it was built from."""
        with self._cond:
            while not self._queue:
                if not self._thread.is_alive():
                    raise RuntimeError("the prefetch thread stopped without a batch")
                self._cond.wait(timeout=0.5)
            result, cost, n_items = self._queue.popleft()
            self._bytes -= cost
            self._cond.notify_all()
        if isinstance(result, BaseException):
            raise result
        batch, errors = result
        return batch, errors, n_items

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._bytes = 0
            self._cond.notify_all()
        if self._readahead is not None:
            self._readahead.stop()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
