"""A thread pool whose workers pull items from a shared counter (work stealing)."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ferroload_core import available_cpus


class DecodePool:
    """Runs `fn(i)` for every `i < n` on `threads` threads, the caller's among them.

    The codecs release the GIL while they decode, so the threads run in parallel.
    Workers take the next index from a shared counter: a slow image never holds back a
    whole fixed chunk.
    """

    def __init__(self, threads: int | None = None) -> None:
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive int or None, got {threads!r}")
        self.threads = threads or available_cpus()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child inherits the executor but none of its threads: waiting on
                # it would hang for ever. Start afresh (the parent's lock is not ours either).
                self._executor = None
                self._pid = os.getpid()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.threads - 1, thread_name_prefix="ferroload-decode"
                )
            return self._executor

    def run(
        self,
        n: int,
        fn: Callable[[int], None],
        *,
        meanwhile: Callable[[], None] | None = None,
        threads: int | None = None,
    ) -> None:
        """Call `fn(i)` for i in range(n) on at most `threads` threads (default: the
        pool's); exceptions propagate (the first one raised).

        `meanwhile`, if given, runs in the calling thread while the pool's other threads
        start on the items, before the caller joins them: a loader reads the next batch
        there, overlapping it with this one's decoding without a thread of its own (one
        more runnable thread than cores would slow the decoding by about 10%).
        """
        workers = min(self.threads if threads is None else threads, n)
        if workers <= 1:
            if meanwhile is not None:
                meanwhile()
            for i in range(n):
                fn(i)
            return
        counter = itertools.count()

        def work() -> None:
            for i in counter:
                if i >= n:
                    return
                fn(i)

        futures = [self._pool().submit(work) for _ in range(workers - 1)]
        try:
            if meanwhile is not None:
                meanwhile()
            work()
        finally:
            for f in futures:
                f.result()

    def close(self) -> None:
        """Stop the worker threads (a later `run` starts new ones)."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __getstate__(self) -> dict[str, int]:
        return {"threads": self.threads}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["threads"])  # type: ignore[misc]
