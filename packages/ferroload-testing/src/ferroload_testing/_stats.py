"""What a fault proxy counts: `ProxyStats`, and the thread-safe counters behind it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ProxyStats:
    """What a [`FaultProxy`][ferroload_testing.FaultProxy] saw.

    Attributes:
        connections: client connections accepted.
        requests: requests received (whatever happened to them).
        forwarded: requests forwarded to the target and answered.
        errors_injected: requests answered with a 503 by the proxy itself.
        drops_injected: connections dropped mid-request, without an answer.
        answers_lost: requests forwarded whose answer was never relayed.
        bytes: response body bytes relayed from the target to clients.
        peak_in_flight: the most requests forwarded at the same time (waiting out the
            delay or the target's answer).
    """

    connections: int = 0
    requests: int = 0
    forwarded: int = 0
    errors_injected: int = 0
    drops_injected: int = 0
    answers_lost: int = 0
    bytes: int = 0
    peak_in_flight: int = 0


class InFlight:
    """One forwarded request's place in the in-flight count; `end()` may be called twice."""

    __slots__ = ("_counters", "_ended")

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._ended = False

    def end(self) -> None:
        """Leave the in-flight count (a no-op the second time)."""
        if not self._ended:
            self._ended = True
            self._counters._leave()


class Counters:
    """The counters of one proxy, shared by its connection threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys((f.name for f in fields(ProxyStats)), 0)
        self._in_flight = 0

    def add(self, name: str, n: int = 1) -> None:
        """Add `n` to the counter `name` (a `ProxyStats` field)."""
        with self._lock:
            self._counts[name] += n

    def answered(self, nbytes: int) -> None:
        """Count a forwarded request whose answer, of `nbytes` body bytes, is relayed."""
        with self._lock:
            self._counts["forwarded"] += 1
            self._counts["bytes"] += nbytes

    def enter(self) -> InFlight:
        """Count a request as forwarded and not yet answered (for `peak_in_flight`)."""
        with self._lock:
            self._in_flight += 1
            peak = self._counts["peak_in_flight"]
            self._counts["peak_in_flight"] = max(peak, self._in_flight)
        return InFlight(self)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def snapshot(self) -> ProxyStats:
        """The counters so far."""
        with self._lock:
            return ProxyStats(**self._counts)

    def reset(self) -> None:
        """Set every counter back to zero (requests in flight stay in flight)."""
        with self._lock:
            for name in self._counts:
                self._counts[name] = 0
