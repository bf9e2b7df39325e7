"""How long to wait before a retry: the one backoff of ferroload (object-store requests,
the catalog's file lock)."""

from __future__ import annotations

import random


def backoff_delay(
    attempt: int, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number `attempt` (1 for the first): exponential
    backoff with full jitter, drawn uniformly from `[0, min(cap, base * 2 ** (attempt - 1))]`
    (so that many clients retrying at once spread out).

    Examples:
        >>> all(0 <= backoff_delay(a, base=0.1, cap=1.0) <= min(1.0, 0.1 * 2 ** (a - 1))
        ...     for a in range(1, 9))
        True
    """
    bound = min(cap, base * 2.0 ** min(max(0, attempt - 1), 60))
    return (rng or random).uniform(0.0, bound)
