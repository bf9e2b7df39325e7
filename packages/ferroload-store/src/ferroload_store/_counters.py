"""Thread-safe named counters (the base of `StoreStats` and `CacheStats`)."""

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
