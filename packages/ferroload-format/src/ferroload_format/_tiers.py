"""The tiered rule (docs/format.md §7.6, §6.2): which of the newest items a new one takes in.

Index parts (by rows) and shard lists (by shards) grow the same way, like the size tiers
of an LSM tree: a new item takes in the newest existing one while that holds at most
`MERGE_FACTOR` times what the new item has gathered so far, then the next newest, and so
on. Each item left then holds more than `MERGE_FACTOR` times the next, so N units make
about log2(N) items, and a unit is rewritten about log2(N) times over its life.
"""

from __future__ import annotations

from collections.abc import Sequence

#: An item takes in the newest older one while that holds at most this many times what
#: it has gathered so far.
MERGE_FACTOR = 2


def newest_taken(
    sizes: Sequence[int], size: int, *, factor: int = MERGE_FACTOR, limit: int | None = None
) -> int:
    """How many of the newest items (their `sizes`, oldest first) a new item of `size`
    takes in: the newest while it holds at most `factor` times the size gathered so far
    (the new item's own included) and, with a `limit`, the gathered size stays within it.

    Examples:
        >>> newest_taken([8, 4, 2, 1], 1)
        4
        >>> newest_taken([100, 5], 3)
        1
    """
    k, gathered = 0, size
    while k < len(sizes):
        n = sizes[-1 - k]
        if n > factor * gathered or (limit is not None and gathered + n > limit):
            break
        gathered += n
        k += 1
    return k
