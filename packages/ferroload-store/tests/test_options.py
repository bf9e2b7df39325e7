from __future__ import annotations

import pickle
import random
from datetime import timedelta

import pytest

from ferroload_store import DEFAULT_MAX_GAP, DEFAULT_PART_SIZE, IOOptions
from ferroload_store._options import parse_duration


def test_defaults() -> None:
    opts = IOOptions()
    assert opts.max_concurrency == 16
    assert opts.part_size == DEFAULT_PART_SIZE == 8 << 20
    assert opts.max_gap == DEFAULT_MAX_GAP
    assert opts.retries == 5
    assert (opts.backoff, opts.max_backoff) == (0.05, 2.0)
    assert (opts.timeout_seconds, opts.connect_timeout_seconds) == (30.0, 5.0)
    assert pickle.loads(pickle.dumps(opts)) == opts


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_concurrency": 0}, r"max_concurrency must be an int >= 1, got 0"),
        ({"max_concurrency": 2.5}, r"max_concurrency must be an int"),
        ({"part_size": 0}, r"part_size must be an int >= 1"),
        ({"max_gap": -1}, r"max_gap must be an int >= 0"),
        ({"retries": True}, r"retries must be an int >= 0, got True"),
        ({"backoff": -0.1}, r"backoff must be a number of seconds >= 0"),
        ({"backoff": 1.0, "max_backoff": 0.5}, r"max_backoff \(0.5\) must not be smaller"),
        ({"timeout": "soon"}, r"timeout 'soon' is not a duration"),
        ({"timeout": 0}, r"timeout must be longer than zero"),
        ({"connect_timeout": -1.0}, r"connect_timeout must be a finite, non-negative"),
    ],
)
def test_bad_values_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IOOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("500ms", 0.5),
        ("1m 30s", 90.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        ("250us", 0.00025),
        (timedelta(seconds=3), 3.0),
        (7, 7.0),
    ],
)
def test_durations(text: str | float | timedelta, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_backoff_is_exponential_with_full_jitter_and_a_cap() -> None:
    opts = IOOptions(backoff=0.05, max_backoff=2.0)
    rng = random.Random(0)
    for attempt in range(1, 12):
        bound = min(2.0, 0.05 * 2 ** (attempt - 1))
        waits = [opts.backoff_delay(attempt, rng) for _ in range(200)]
        assert all(0.0 <= w <= bound for w in waits)
        assert max(waits) > 0.8 * bound  # spread over the whole interval
        assert min(waits) < 0.2 * bound
    assert opts.backoff_delay(10_000, rng) <= 2.0  # no overflow for absurd attempts
    assert IOOptions(backoff=0.0, max_backoff=0.0).backoff_delay(3) == 0.0
