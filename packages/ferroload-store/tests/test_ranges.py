from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_store import coalesce_ranges, split_reads

ranges = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3_000)), min_size=0, max_size=60)


@given(ranges, st.integers(0, 2_000), st.integers(1, 8_000))
def test_every_range_lies_inside_its_read(
    rs: list[tuple[int, int]], gap: int, max_read: int
) -> None:
    starts = [s for s, _ in rs]
    lengths = [n for _, n in rs]
    plan = coalesce_ranges(starts, lengths, max_gap=gap, max_read=max_read)
    assert len(plan.read_of) == len(rs)
    for i, (s, n) in enumerate(rs):
        r = plan.read_of[i]
        assert plan.starts[r] + plan.offset_in_read[i] == s
        assert plan.offset_in_read[i] >= 0
        assert plan.offset_in_read[i] + n <= plan.lengths[r]
    # Reads are in offset order and bounded in size unless a single range alone is larger.
    # (Overlapping ranges split by the cap may overlap; the uncapped test checks gaps.)
    assert np.all(np.diff(plan.starts) >= 0)
    biggest_single = max(lengths, default=0)
    assert np.all(plan.lengths <= max(max_read, biggest_single))


@given(ranges, st.integers(0, 2_000))
def test_without_a_size_cap_neighbours_closer_than_the_gap_share_a_read(
    rs: list[tuple[int, int]], gap: int
) -> None:
    plan = coalesce_ranges([s for s, _ in rs], [n for _, n in rs], max_gap=gap, max_read=1 << 40)
    ends = plan.starts + plan.lengths
    assert np.all(plan.starts[1:] - ends[:-1] > gap)


def test_example_merges_close_ranges_only() -> None:
    plan = coalesce_ranges([0, 100, 1_000_000, 60], [50, 50, 10, 10], max_gap=64)
    assert plan.num_reads == 2
    assert plan.starts.tolist() == [0, 1_000_000]
    assert plan.lengths.tolist() == [150, 10]
    assert plan.read_of.tolist() == [0, 0, 1, 0]
    assert plan.offset_in_read.tolist() == [0, 100, 0, 60]


def test_max_read_splits_long_runs() -> None:
    plan = coalesce_ranges(np.arange(0, 1000, 100), np.full(10, 100), max_gap=0, max_read=300)
    assert plan.lengths.tolist() == [300, 300, 300, 100]


@pytest.mark.parametrize(("starts", "lengths"), [([1, 2], [1]), ([-1], [1]), ([0], [-5])])
def test_bad_input(starts: list[int], lengths: list[int]) -> None:
    with pytest.raises(ValueError, match=r"lengths|non-negative"):
        coalesce_ranges(starts, lengths)


reads = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)), min_size=0, max_size=40)


@given(reads, st.integers(1, 3_000))
def test_parts_tile_every_read_exactly(rs: list[tuple[int, int]], part_size: int) -> None:
    starts = [s for s, _ in rs]
    lengths = [n for _, n in rs]
    parts = split_reads(starts, lengths, part_size)
    assert np.all(np.diff(parts.read_of) >= 0)
    for r, (s, n) in enumerate(rs):
        mine = parts.read_of == r
        ps, pl, po = parts.starts[mine], parts.lengths[mine], parts.offset_in_read[mine]
        # Adjacent, in order, covering [s, s + n) exactly, as few as part_size allows.
        assert ps[0] == s and po[0] == 0
        assert np.all(ps[1:] == ps[:-1] + pl[:-1])
        assert np.all(ps - s == po)
        assert pl.sum() == n
        assert len(ps) == max(1, -(-n // part_size))
        assert np.all(pl <= part_size)
        assert pl.max() - pl.min() <= 1  # equal to a byte


def test_split_example_and_errors() -> None:
    parts = split_reads([0], [40 << 20], 8 << 20)
    assert parts.num_parts == 5
    assert parts.lengths.tolist() == [8 << 20] * 5
    empty = split_reads([], [], 10)
    assert empty.num_parts == 0
    with pytest.raises(ValueError, match="part_size"):
        split_reads([0], [10], 0)
    with pytest.raises(ValueError, match="non-negative"):
        split_reads([0], [-1], 10)
