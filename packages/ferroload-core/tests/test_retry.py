"""`backoff_delay`: exponential backoff with full jitter, capped."""

from __future__ import annotations

import random

from ferroload_core import backoff_delay


def test_bounds_double_up_to_the_cap() -> None:
    rng = random.Random(0)
    for attempt, bound in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (100, 0.5), (0, 0.1)]:
        draws = [backoff_delay(attempt, base=0.1, cap=0.5, rng=rng) for _ in range(500)]
        assert all(0 <= d <= bound for d in draws)
        assert max(draws) > 0.8 * bound  # full jitter reaches the bound
    assert backoff_delay(1, base=0.0, cap=1.0) == 0.0
