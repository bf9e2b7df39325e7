"""The parallel part of an import: threads read and check inputs, results come in order.

The calling thread gets the results in input order.

Two shapes:

* `ordered_map(items, fn)`: one task per item (an image file, a batch of rows);
  `fn(item)` runs on the pool, results come back in the order of `items`.
* `ordered_streams(sources, fn)`: one task per source that yields many results (a tar,
  a Parquet file); up to `workers` sources are read at once, each into its own bounded
  queue, and the calling thread drains the queues source by source.

Both keep a bounded number of results in flight (memory stays flat however large the
input), and both stop their threads when the consumer stops early (an error, a
`close()`). A result is `Failed(exc)` when `fn` raised: the consumer decides what a
failure means (`on_error`).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R")

_POLL_S = 0.1


@dataclass(frozen=True)
class Failed:
    """The exception a task raised, in place of its result."""

    error: BaseException


class _End:
    pass


_END = _End()


def ordered_map(
    items: Iterable[T], fn: Callable[[T], R], *, workers: int, window: int | None = None
) -> Iterator[tuple[T, R | Failed]]:
    """`(item, fn(item))` for each item, in input order, `fn` running on `workers` threads
    with at most `window` (default `4 * workers`) items in flight."""
    window = window or 4 * workers
    pending: deque[tuple[T, Future[R]]] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="ferroload-convert")

    def take() -> tuple[T, R | Failed]:
        item, future = pending.popleft()
        try:
            return item, future.result()
        except Exception as exc:
            return item, Failed(exc)

    try:
        for item in items:
            pending.append((item, pool.submit(fn, item)))
            if len(pending) >= window:
                yield take()
        while pending:
            yield take()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Stream(Generic[T]):
    def __init__(self, source: T, size: int) -> None:
        self.source = source
        self.queue: queue.Queue[object] = queue.Queue(size)


def ordered_streams(
    sources: Iterable[T],
    fn: Callable[[T], Iterable[R]],
    *,
    workers: int,
    buffer: int = 64,
) -> Iterator[tuple[T, R | Failed]]:
    """`(source, result)` for every result of `fn(source)`, source by source in input
    order. `fn` runs on `workers` threads, each reading one source at a time and running
    ahead of the consumer by at most `buffer` results. When `fn(source)` raises, its
    stream ends with `(source, Failed(exc))`."""
    stop = threading.Event()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="ferroload-convert")
    streams: deque[_Stream[T]] = deque()
    upcoming = iter(sources)

    def put(stream: _Stream[T], value: object) -> bool:
        while not stop.is_set():
            try:
                stream.queue.put(value, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce(stream: _Stream[T]) -> None:
        results: Iterator[R] = iter(())
        try:
            results = iter(fn(stream.source))  # may raise before yielding anything
            for result in results:
                if not put(stream, result):
                    return
        except Exception as exc:
            put(stream, Failed(exc))
        finally:
            close = getattr(results, "close", None)
            if close is not None:  # a generator: release its files now, not at collection
                close()
            put(stream, _END)

    def launch() -> None:
        # Sources start in input order (the pool's queue is FIFO), so the one the consumer
        # waits for is always running or done: no deadlock however many are blocked.
        while len(streams) < workers:
            source = next(upcoming, _END)
            if isinstance(source, _End):
                return
            stream = _Stream(source, buffer)
            streams.append(stream)
            pool.submit(produce, stream)

    try:
        launch()
        while streams:
            stream = streams[0]
            value = stream.queue.get()
            if isinstance(value, _End):
                streams.popleft()
                launch()
                continue
            yield stream.source, cast("R | Failed", value)
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
