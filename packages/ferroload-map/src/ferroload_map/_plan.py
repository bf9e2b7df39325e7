"""`plan_partitions`: the one partition plan every executor shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ferroload_format import Dataset

#: The most rows a default partition holds (one layer shard's worth at most).
DEFAULT_PARTITION_SIZE = 4096
#: The fewest rows a default partition holds (below, per-partition costs dominate).
MIN_PARTITION_SIZE = 256
#: Small datasets are cut into about this many partitions, so that every worker gets work.
TARGET_PARTITIONS = 32


@dataclass(frozen=True, order=True)
class Partition:
    """Consecutive base rows `[start, stop)`, computed and staged as one unit.

    Attributes:
        index: the partition number (`k` of the staged `part-k`).
        start: the first base row.
        stop: one past the last base row.
    """

    index: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def rows(self) -> npt.NDArray[np.int64]:
        """The base row positions of the partition, ascending."""
        return np.arange(self.start, self.stop, dtype=np.int64)


def default_partition_size(n: int) -> int:
    """Rows per partition when none is given: about `TARGET_PARTITIONS` partitions, within
    [`MIN_PARTITION_SIZE`, `DEFAULT_PARTITION_SIZE`]. A function of the row count only,
    so a resumed run (with any executor or number of workers) cuts the same plan.

    Examples:
        >>> default_partition_size(1_000), default_partition_size(10_000)
        (256, 313)
        >>> default_partition_size(1_000_000)
        4096
    """
    return min(DEFAULT_PARTITION_SIZE, max(MIN_PARTITION_SIZE, -(-n // TARGET_PARTITIONS)))


def plan_partitions(ds: Dataset | int, size: int | None = None) -> list[Partition]:
    """Cut the rows of a dataset version into partitions of `size` consecutive rows.

    The plan depends only on the number of rows and `size`, so every run, rank and
    executor cuts the same partitions and a resumed run finds its staged ones.

    Args:
        ds: the dataset (all rows of its version), or a number of rows.
        size: rows per partition; the last one may be shorter (default:
            `default_partition_size` of the row count).

    Raises:
        ValueError: if `size` is not a positive int.

    Examples:
        >>> [(p.start, p.stop) for p in plan_partitions(10, 4)]
        [(0, 4), (4, 8), (8, 10)]
    """
    n = ds if isinstance(ds, int) else ds.manifest.num_samples
    if size is None:
        size = default_partition_size(n)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"partition_size must be a positive int, got {size!r}")
    return [Partition(k, start, min(start + size, n)) for k, start in enumerate(range(0, n, size))]
