from __future__ import annotations

import numpy as np
import pytest

from ferroload_map import Partition, plan_partitions


def test_partitions_cover_every_row_once_in_order() -> None:
    plan = plan_partitions(10, 4)
    assert plan == [Partition(0, 0, 4), Partition(1, 4, 8), Partition(2, 8, 10)]
    assert [len(p) for p in plan] == [4, 4, 2]
    assert np.concatenate([p.rows() for p in plan]).tolist() == list(range(10))
    assert plan[1].rows().dtype == np.int64


@pytest.mark.parametrize(("n", "size", "count"), [(0, 4, 0), (1, 4, 1), (8, 4, 2), (9, 4, 3)])
def test_partition_count(n: int, size: int, count: int) -> None:
    assert len(plan_partitions(n, size)) == count


def test_plan_of_a_dataset_uses_its_rows(make_dataset) -> None:  # type: ignore[no-untyped-def]
    ds = make_dataset(7, memory=True, images=False)
    assert plan_partitions(ds, 3) == plan_partitions(7, 3)


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "4"])
def test_bad_partition_size(size: object) -> None:
    with pytest.raises(ValueError, match="partition_size"):
        plan_partitions(10, size)  # type: ignore[arg-type]
