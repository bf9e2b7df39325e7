"""`IOOptions`: how a store talks to an object store (concurrency, part size, retries, timeouts)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import timedelta

from ferroload_core import backoff_delay
from ferroload_store._ranges import DEFAULT_MAX_GAP

#: Merged reads longer than this are split into parallel requests of about this size.
DEFAULT_PART_SIZE = 8 * 1024 * 1024

_UNITS = {
    "ns": 1e-9,
    "nsec": 1e-9,
    "us": 1e-6,
    "usec": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}
_SPAN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]+)\s*")


def parse_duration(value: str | float | timedelta, *, name: str = "duration") -> float:
    """Seconds in a duration given as seconds, a `timedelta`, or text like `"30s"`.

    The text is one or more spans of a number and a unit (`ns`, `us`, `ms`, `s`, `min`,
    `h`, and their long forms), as obstore's client options write them: `"1m 30s"`.

    Raises:
        ValueError: for a negative duration or text that is not a duration.

    Examples:
        >>> parse_duration("1m 30s"), parse_duration("250ms"), parse_duration(2)
        (90.0, 0.25, 2.0)
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"{name} must be a duration, got {value!r}")
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        pos, seconds = 0, 0.0
        while pos < len(text):
            m = _SPAN.match(text, pos)
            if m is None or m.group(2) not in _UNITS:
                raise ValueError(
                    f"{name} {value!r} is not a duration; write e.g. '30s', '500ms' or '1m 30s'"
                )
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if not text:
            raise ValueError(f"{name} is empty; write e.g. '30s'")
    else:
        raise ValueError(f"{name} must be a number of seconds, a timedelta or text like '30s'")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a finite, non-negative duration, got {value!r}")
    return seconds


@dataclass(frozen=True)
class IOOptions:
    """How a `Store` reads from an object store (S3, GCS, Azure, HTTP).

    Local and memory stores ignore these options.

    Attributes:
        max_concurrency: requests in flight at most, per `Store`, whatever the number of
            threads reading through it.
        part_size: a merged read longer than this is split into parallel requests of
            about this many bytes, stitched back into one buffer.
        max_gap: ranges of one object closer than this many bytes are read together
            (the gap is fetched and thrown away).
        retries: how many times a transient failure (HTTP 5xx or 429, a dropped or reset
            connection, a timeout) is retried before the read fails. Permanent failures
            (a missing object, a denied permission, a short object) are never retried.
            `0` turns retries off.
        backoff: seconds to wait at most before the first retry; the bound doubles with
            each further retry, and the actual wait is drawn uniformly below it
            ("full jitter").
        max_backoff: the largest bound on one wait, in seconds.
        timeout: the time one request may take from start to end: seconds, a
            `timedelta`, or text such as `"30s"`.
        connect_timeout: the time to establish a connection, written the same way.

    Examples:
        >>> opts = IOOptions(max_concurrency=32, part_size=16 << 20, timeout="1m")
        >>> opts.timeout_seconds
        60.0
        >>> IOOptions(retries=-1)
        Traceback (most recent call last):
        ...
        ValueError: IOOptions.retries must be an int >= 0, got -1
    """

    max_concurrency: int = 16
    part_size: int = DEFAULT_PART_SIZE
    max_gap: int = DEFAULT_MAX_GAP
    retries: int = 5
    backoff: float = 0.05
    max_backoff: float = 2.0
    timeout: str | float | timedelta = "30s"
    connect_timeout: str | float | timedelta = "5s"

    def __post_init__(self) -> None:
        _check_int("max_concurrency", self.max_concurrency, 1)
        _check_int("part_size", self.part_size, 1)
        _check_int("max_gap", self.max_gap, 0)
        _check_int("retries", self.retries, 0)
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"IOOptions.{name} must be a number of seconds >= 0, got {value!r}"
                )
        if self.max_backoff < self.backoff:
            raise ValueError(
                f"IOOptions.max_backoff ({self.max_backoff}) must not be smaller than "
                f"backoff ({self.backoff})"
            )
        for name in ("timeout", "connect_timeout"):
            if parse_duration(getattr(self, name), name=f"IOOptions.{name}") <= 0:
                raise ValueError(f"IOOptions.{name} must be longer than zero")

    @property
    def timeout_seconds(self) -> float:
        """`timeout` in seconds."""
        return parse_duration(self.timeout)

    @property
    def connect_timeout_seconds(self) -> float:
        """`connect_timeout` in seconds."""
        return parse_duration(self.connect_timeout)

    def backoff_delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1 for the first retry).

        Drawn uniformly from `[0, min(max_backoff, backoff * 2 ** (attempt - 1))]`.

        Examples:
            >>> opts = IOOptions(backoff=0.1, max_backoff=1.0)
            >>> all(0 <= opts.backoff_delay(a) <= min(1.0, 0.1 * 2 ** (a - 1)) for a in range(1, 9))
            True
        """
        return backoff_delay(attempt, base=self.backoff, cap=self.max_backoff, rng=rng)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"IOOptions.{name} must be an int >= {minimum}, got {value!r}")
