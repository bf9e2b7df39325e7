"""Thread-safe named counters: their base, `StoreStats` (a store's requests and bytes)
and `CacheStats` (a block cache's hits, puts and evictions)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Counters:
    """Integer counters, as dataclass fields of a subclass; safe to update from threads."""

    _lock: threading.Lock = field(
        default_factory=threading.Lock, repr=False, compare=False, kw_only=True
    )

    def add(self, **counts: int) -> None:
        """Add to the named counters."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict."""
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for k in list(vars(self)):
                if not k.startswith("_"):
                    setattr(self, k, 0)


@dataclass
class StoreStats(Counters):
    """Request and byte counters of one `Store` (reads, writes, listings).

    Useful to check that reads are coalesced: `get_requests` counts every request that
    fetched bytes, whatever its size (a read split into parts counts each part).
    `retries` counts the requests to an object store that failed transiently and were
    made again (see [`IOOptions`][ferroload_store.IOOptions]). `mapped_trims` counts
    the times the pages of local files' memory maps were dropped from the process (every
    `MAPPED_TRIM_BYTES` or so of mapped reads), which keeps its RSS bounded.
    """

    get_requests: int = 0
    bytes_read: int = 0
    put_requests: int = 0
    bytes_written: int = 0
    list_requests: int = 0
    head_requests: int = 0
    delete_requests: int = 0
    retries: int = 0
    mapped_trims: int = 0

    def add_read(self, requests: int, nbytes: int) -> None:
        """Count read requests and the bytes they returned (the hot path of `add`)."""
        with self._lock:
            self.get_requests += requests
            self.bytes_read += nbytes


@dataclass
class CacheStats(Counters):
    """Counters of one `BlockCache` in this process (thread-safe).

    A damaged entry found by `get` counts as a miss and as `corrupt`.
    """

    hits: int = 0
    misses: int = 0
    hit_bytes: int = 0
    puts: int = 0
    put_bytes: int = 0
    corrupt: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
