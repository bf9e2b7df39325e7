"""The one in-process least-recently-used cache of ferroload: bounded by a count or a
weight (bytes, records), thread-safe, with an eviction hook."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class LRU(Generic[K, V]):
    """A mapping that keeps at most `max_weight` of weight, least recently used out.

    Args:
        max_weight: the bound on the summed weight of the values kept (with the default
            `weigh`, the number of entries).
        weigh: the weight of one value (default: 1, so the bound counts entries). A value
            heavier than the whole bound is not kept.
        on_evict: called with `(key, value)` for each entry pushed out by `put` (under the
            cache's lock: keep it short; not called by `pop` or `clear`).

    Every method takes the cache's own lock, so threads may share one instance.

    Examples:
        >>> cache = LRU[str, bytes](max_weight=4, weigh=len)
        >>> cache.put("a", b"12"); cache.put("b", b"34")
        >>> cache.get("a")
        b'12'
        >>> cache.put("c", b"5")  # over 4 bytes: "b", the least recently used, goes
        >>> cache.held(), cache.weight
        (['a', 'c'], 3)
    """

    def __init__(
        self,
        max_weight: int,
        *,
        weigh: Callable[[V], int] = _one,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        if max_weight < 0:
            raise ValueError(f"LRU max_weight must be >= 0, got {max_weight}")
        self.max_weight = max_weight
        self.weight = 0
        self._weigh = weigh
        self._on_evict = on_evict
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value under `key`, now the most recently used; None when absent."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V) -> None:
        """Keep `value` under `key` (replacing what was there) as the most recently used,
        then evict least recently used entries until the weight is within the bound."""
        w = self._weigh(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.weight -= old[1]
            if w > self.max_weight:
                return
            self._entries[key] = (value, w)
            self.weight += w
            while self.weight > self.max_weight:
                k, (v, n) = self._entries.popitem(last=False)
                self.weight -= n
                if self._on_evict is not None:
                    self._on_evict(k, v)

    def pop(self, key: K) -> V | None:
        """Remove `key`; its value, or None when absent (no eviction hook)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self.weight -= entry[1]
            return entry[0]

    def clear(self) -> None:
        """Remove every entry (no eviction hook)."""
        with self._lock:
            self._entries.clear()
            self.weight = 0

    def held(self) -> list[K]:
        """The keys held, least recently used first."""
        with self._lock:
            return list(self._entries)

    def values(self) -> list[V]:
        """The values held, least recently used first (their order is left as it is)."""
        with self._lock:
            return [entry[0] for entry in self._entries.values()]
