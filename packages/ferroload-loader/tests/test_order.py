from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferroload_loader import SHUFFLE_RAMP_START, locality
from ferroload_loader._order import (
    MixtureOrder,
    PermutationOrder,
    SequentialOrder,
    ShardBlockOrder,
    permutation,
    rng,
    runs_of,
)


def test_permutations_depend_only_on_seed_and_epoch() -> None:
    a = permutation(1000, 7, 0)
    assert np.array_equal(a, permutation(1000, 7, 0))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, permutation(1000, 7, 1))
    assert not np.array_equal(a, permutation(1000, 8, 0))


def test_the_shuffled_order_of_a_seed_is_the_same_in_every_version() -> None:
    """An order is a promise: a run resumed from a checkpoint, or repeated a release
    later, sees the same samples for the same (seed, epoch). Pinned values: a change to
    the Feistel network, its keys or numpy's seeded stream shows up here first."""
    assert PermutationOrder(20_000, 0, 0).at(np.arange(0, 20_000, 997)).tolist() == [
        13868, 17285, 12383, 5732, 4664, 6531, 17648, 7657, 10851, 7246, 18767,
        14515, 17030, 971, 9396, 2756, 13617, 10896, 19270, 9883, 6962,
    ]  # fmt: skip
    assert PermutationOrder(10**9 + 7, 3, 5).at(np.arange(0, 50, 7)).tolist() == [
        678415111, 323119078, 237302096, 215780684, 482306571, 720962672, 338792189, 871706619,
    ]  # fmt: skip
    blocks = ShardBlockOrder(np.array([0, 300, 700]), np.array([0, 1, 2]), 1000, 11, 2, 256)
    assert blocks.at(np.arange(0, 1000, 61)).tolist() == [
        703, 773, 793, 845, 21, 985, 861, 102, 244, 333, 261, 568, 518, 351, 541, 678, 681,
    ]  # fmt: skip


@given(st.integers(0, 3000), st.integers(0, 5))
def test_the_feistel_order_is_a_permutation_for_any_length(n: int, seed: int) -> None:
    order = PermutationOrder(n, seed, 1)
    whole = order.materialize()
    assert sorted(whole.tolist()) == list(range(n))
    if n:
        pos = np.random.default_rng(seed).integers(0, n, 50)
        assert np.array_equal(order.at(pos), whole[pos])  # any positions, any order


def test_positions_are_computed_without_the_whole_order() -> None:
    n = 10**12  # an order that could never be materialised
    order = PermutationOrder(n, 3, 0)
    tracemalloc.start()
    got = order.at(np.arange(n - 1000, n))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert ((got >= 0) & (got < n)).all() and len(np.unique(got)) == 1000
    assert peak < 2 << 20
    assert order.computed == 1000
    with pytest.raises(IndexError):
        order.at([n])


def test_the_feistel_order_is_as_mixed_as_a_numpy_permutation() -> None:
    n = 200_000
    shard_of = np.arange(n) // 2600
    ours = locality(permutation(n, 0, 0), shard_of, window=8192)
    ref = locality(np.random.default_rng(0).permutation(n), shard_of, window=8192)
    assert abs(ours["mean_jump"] - 1 / 3) < 0.005
    assert abs(ours["mean_jump"] - ref["mean_jump"]) < 0.005
    assert abs(ours["shards_per_window"] - ref["shards_per_window"]) < 1
    assert ours["adjacent"] < 1e-4
    # no bias of a position towards an item: each item lands uniformly over seeds
    firsts = np.asarray([PermutationOrder(10, s, 0).at([0])[0] for s in range(2000)])
    assert np.bincount(firsts, minlength=10).min() > 150


def _runs(sizes: list[int], codes: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
    starts = np.cumsum([0, *sizes])[:-1].astype(np.int64)
    return starts, np.asarray(codes, dtype=np.int32), int(sum(sizes))


def _reference_stream(
    starts: np.ndarray, codes: np.ndarray, n: int, seed: int, epoch: int
) -> list[int]:
    """Shards by first appearance in a seeded order, each shard's runs in place order."""
    lengths = np.diff(np.append(starts, n))
    shards: list[int] = list(dict.fromkeys(codes.tolist()))
    out = []
    for i in rng(seed, epoch, 1).permutation(len(shards)).tolist():
        for s, ln, c in zip(starts.tolist(), lengths.tolist(), codes.tolist(), strict=True):
            if c == shards[i]:
                out.extend(range(s, s + ln))
    return out


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 5)), min_size=0, max_size=12),
    st.integers(1, 70),
    st.integers(1, 20),
    st.integers(0, 3),
)
def test_shard_block_order_shuffles_windows_of_the_shard_stream(
    runs: list[tuple[int, int]], buffer: int, initial: int, seed: int
) -> None:
    starts, codes, n = _runs([r[0] for r in runs], [r[1] for r in runs])
    order = ShardBlockOrder(starts, codes, n, seed, 2, buffer, initial)
    got = order.materialize()
    assert sorted(got.tolist()) == list(range(n))
    stream = _reference_stream(starts, codes, n, seed, 2)
    # windows: `initial` items, then twice as many each, up to `buffer`, then `buffer`
    sizes, at, size = [], 0, min(initial, buffer)
    while at < n:
        sizes.append(min(size, n - at))
        at += size
        size = min(2 * size, buffer)
    at = 0
    for size in sizes:  # each window is a permutation of its stretch of the stream
        assert sorted(got[at : at + size].tolist()) == sorted(stream[at : at + size])
        at += size
    pos = np.arange(n)[::-1]
    assert np.array_equal(order.at(pos), got[pos])


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 5)), min_size=0, max_size=12),
    st.integers(1, 30),
    st.integers(1, 9),
    st.integers(0, 3),
)
def test_lanes_deal_contiguous_pieces_of_the_stream(
    runs: list[tuple[int, int]], buffer: int, lanes: int, seed: int
) -> None:
    starts, codes, n = _runs([r[0] for r in runs], [r[1] for r in runs])
    order = ShardBlockOrder(starts, codes, n, seed, 2, buffer, 1, lanes=lanes)
    got = order.materialize()
    assert sorted(got.tolist()) == list(range(n))
    stream = _reference_stream(starts, codes, n, seed, 2)
    used = order.lanes  # never more lanes than items
    q, r = divmod(n, used)
    for lane in range(used):
        first, length = lane * q + min(lane, r), q + (lane < r)
        mine = got[lane::used]  # the lane's items: positions lane, lane + lanes, ...
        assert len(mine) == length
        # a lane is a contiguous piece of the stream, shuffled within its own windows
        assert sorted(mine.tolist()) == sorted(stream[first : first + length])
        at, size = 0, 1
        while at < length:
            piece = stream[first + at : first + min(at + size, length)]
            assert sorted(mine[at : at + size].tolist()) == sorted(piece)
            at += size
            size = min(2 * size, buffer)
    if used == 1:  # one lane is the one-stream order
        plain = ShardBlockOrder(starts, codes, n, seed, 2, buffer, 1).materialize()
        assert np.array_equal(got, plain)


def test_each_rank_reads_shards_of_its_own_when_ranks_divide_the_lanes() -> None:
    n, per_shard = 100_000, 1_000
    shard_of = np.arange(n) // per_shard
    starts, codes = runs_of(shard_of)
    for world, lanes in [(8, 8), (4, 8), (8, 1)]:
        got = ShardBlockOrder(starts, codes, n, 0, 0, 4096, lanes=lanes).materialize()
        touched = [set(shard_of[got[r::world]].tolist()) for r in range(world)]
        shared = sum(len(a & b) for i, a in enumerate(touched) for b in touched[i + 1 :])
        if lanes == 1:  # one stream: every rank reads from every shard
            assert all(len(t) == n // per_shard for t in touched)
        else:  # at most the shards cut by the lanes' boundaries are shared
            assert sum(len(t) for t in touched) <= n // per_shard + lanes - 1
            assert shared <= lanes - 1


def test_the_first_batch_comes_from_the_first_items_of_the_stream() -> None:
    starts, codes = runs_of(np.arange(10_000) // 1000)
    order = ShardBlockOrder(starts, codes, 10_000, 0, 0, 4096)
    first = order.at(np.arange(SHUFFLE_RAMP_START))
    assert len(np.unique(first // 1000)) == 1  # one shard: the first 128 of the stream
    with pytest.raises(ValueError, match="initial fill"):
        ShardBlockOrder(starts, codes, 10_000, 0, 0, 10, 0)
    with pytest.raises(ValueError, match="shuffle_buffer"):
        ShardBlockOrder(starts, codes, 10_000, 0, 0, 0)


def test_runs_of_a_shard_column() -> None:
    starts, codes = runs_of(np.array([2, 2, 0, 0, 0, 1, 2]))
    assert starts.tolist() == [0, 2, 5, 6] and codes.tolist() == [2, 0, 1, 2]
    assert [len(x) for x in runs_of(np.array([], dtype=np.int64))] == [0, 0]


def test_shard_block_order_stays_local_while_a_permutation_does_not() -> None:
    n, per_shard = 20_000, 500
    shard_of = np.arange(n) // per_shard
    starts, codes = runs_of(shard_of)
    local = locality(ShardBlockOrder(starts, codes, n, 0, 0, 200).materialize(), shard_of, 1000)
    full = locality(permutation(n, 0, 0), shard_of, window=1000)
    assert full["mean_jump"] > 0.3  # a random pair sits a third of the dataset apart
    assert full["shards_per_window"] > 35  # a permutation touches every shard constantly
    # windows of 200 keep 1000 consecutive reads within a handful of shards
    assert local["shards_per_window"] < 8
    # yet consecutive items are rarely neighbours: about 2 / 200, as in any shuffle of 200
    assert local["adjacent"] < 0.015
    assert locality(np.arange(n), shard_of)["adjacent"] == 1.0


def test_mixture_draws_by_weight_and_passes_through_each_source() -> None:
    sizes = [100, 50]
    order = MixtureOrder(sizes, np.array([0.8, 0.2]), 1000, 3, 0, True).materialize()
    first = order[order < 100]
    second = order[order >= 100] - 100
    assert 0.75 < len(first) / 1000 < 0.85
    # every pass over a source is a permutation of it: draw counts differ by at most one
    for got, size in ((first, 100), (second, 50)):
        counts = np.bincount(got, minlength=size)
        assert counts.max() - counts.min() <= 1 and counts.sum() == len(got)
    again = MixtureOrder(sizes, np.array([0.8, 0.2]), 1000, 3, 0, True)
    assert np.array_equal(order, again.materialize())
    assert np.array_equal(again.at([999, 3, 500]), order[[999, 3, 500]])
    assert not np.array_equal(
        order, MixtureOrder(sizes, np.array([0.8, 0.2]), 1000, 3, 1, True).materialize()
    )
    plain = MixtureOrder(sizes, np.array([0.5, 0.5]), 100, 3, 0, False).materialize()
    assert sorted(plain[plain < 100].tolist()) == list(range(len(plain[plain < 100])))


@settings(max_examples=30)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
    st.integers(0, 400),
    st.integers(1, 64),
    st.booleans(),
)
def test_chunked_mixture_takes_each_source_draw_once(
    sizes: list[int], length: int, chunk: int, shuffle: bool
) -> None:
    weights = np.arange(1, len(sizes) + 1, dtype=np.float64)
    order = MixtureOrder(sizes, weights, length, 1, 0, shuffle, chunk=chunk).materialize()
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    src = np.searchsorted(offsets, order, side="right") - 1
    for s, size in enumerate(sizes):
        counts = np.bincount(order[src == s] - offsets[s], minlength=size)
        assert counts.max() - counts.min() <= 1  # passes are whole


def test_mixture_state_is_per_chunk_not_per_slot() -> None:
    n = 10**9
    tracemalloc.start()
    order = MixtureOrder([10**8, 10**6, 5], np.array([0.5, 0.3, 0.2]), n, 0, 0, True)
    got = order.at(np.arange(n - 512, n))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20  # 15,259 chunks x 3 sources of counts, not 10^9 slots
    assert len(got) == 512 and got.max() < 10**8 + 10**6 + 5


def test_sequential_is_the_dataset_order() -> None:
    assert SequentialOrder(5).at([4, 0, 2]).tolist() == [4, 0, 2]
