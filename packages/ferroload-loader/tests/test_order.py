from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_loader import locality
from ferroload_loader._order import (
    mixture,
    permutation,
    rng,
    shard_block_shuffle,
    shard_blocks,
)


def test_permutations_depend_only_on_seed_and_epoch() -> None:
    a = permutation(1000, 7, 0)
    assert np.array_equal(a, permutation(1000, 7, 0))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, permutation(1000, 7, 1))
    assert not np.array_equal(a, permutation(1000, 8, 0))


def _reference_shuffle_buffer(
    blocks: list[np.ndarray], seed: int, epoch: int, buffer: int, initial: int
) -> list[int]:
    """The textbook loop (fill `initial`, grow while emitting, then replace), drawing the
    same random numbers in the same order."""
    g = rng(seed, epoch, 1)
    stream = [int(x) for i in g.permutation(len(blocks)) for x in blocks[i]] if blocks else []
    n = len(stream)
    s0 = min(initial, buffer, n)
    if s0 == 0:
        return stream
    ramp = min(buffer - s0, (n - s0) // 2)
    steps = ramp + (n - s0 - 2 * ramp)
    highs = [s0 + t + 1 if t < ramp else s0 + ramp for t in range(steps)]
    slots = g.integers(0, np.asarray(highs, dtype=np.int64)).tolist() if steps else []
    buf = stream[:s0]
    c = s0
    out = []
    for t, j in enumerate(slots):
        if t < ramp:  # grow: one more item comes in
            buf.append(stream[c])
            c += 1
        out.append(buf[j])
        buf[j] = stream[c]
        c += 1
    assert c == n
    return out + [buf[k] for k in g.permutation(len(buf)).tolist()]


@given(
    st.lists(st.integers(1, 30), min_size=0, max_size=12),
    st.integers(1, 50),
    st.integers(1, 60),
    st.integers(0, 3),
)
def test_vectorised_shuffle_buffer_equals_the_loop(
    block_sizes: list[int], buffer: int, initial: int, seed: int
) -> None:
    blocks, start = [], 0
    for n in block_sizes:
        blocks.append(np.arange(start, start + n, dtype=np.int64))
        start += n
    got = shard_block_shuffle(blocks, seed, 2, buffer, initial)
    assert got.tolist() == _reference_shuffle_buffer(blocks, seed, 2, buffer, initial)
    assert sorted(got.tolist()) == list(range(start))


def test_the_buffer_starts_emitting_after_its_initial_fill() -> None:
    blocks = [np.arange(10_000, dtype=np.int64)]
    order = shard_block_shuffle(blocks, 0, 0, 4096)  # default start: 128 items
    # the k-th item emitted comes from the first 128 + 2k of the stream
    k = np.arange(len(order) // 4)
    assert (order[: len(k)] < 128 + 2 * k + 1).all()
    assert order[0] < 128
    with pytest.raises(ValueError, match="initial fill"):
        shard_block_shuffle(blocks, 0, 0, 10, 0)


def test_shard_blocks_group_items_by_shard() -> None:
    shard_of = np.array([2, 2, 0, 0, 0, 1, 2])
    assert [b.tolist() for b in shard_blocks(shard_of)] == [[0, 1, 6], [2, 3, 4], [5]]
    assert shard_blocks(np.array([], dtype=np.int64)) == []


def test_shard_block_order_stays_local_while_a_permutation_does_not() -> None:
    n, per_shard = 20_000, 500
    shard_of = np.arange(n) // per_shard
    blocks = shard_blocks(shard_of)
    local = locality(shard_block_shuffle(blocks, 0, 0, 200), shard_of, window=1000)
    full = locality(permutation(n, 0, 0), shard_of, window=1000)
    assert full["mean_jump"] > 0.3  # a random pair sits a third of the dataset apart
    assert full["shards_per_window"] > 35  # a permutation touches every shard constantly
    # a buffer of 200 keeps 1000 consecutive reads within a handful of shards
    assert local["shards_per_window"] < 8
    assert local["adjacent"] < 0.01  # yet consecutive items are rarely neighbours
    assert locality(np.arange(n), shard_of)["adjacent"] == 1.0


def test_mixture_draws_by_weight_and_passes_through_each_source() -> None:
    sizes = [100, 50]
    order = mixture(sizes, np.array([0.8, 0.2]), 1000, 3, 0, True)
    first = order[order < 100]
    second = order[order >= 100] - 100
    assert 0.75 < len(first) / 1000 < 0.85
    # each pass over a source is a permutation of it
    assert sorted(first[:100].tolist()) == list(range(100))
    assert sorted(second[:50].tolist()) == list(range(50))
    assert np.array_equal(order, mixture(sizes, np.array([0.8, 0.2]), 1000, 3, 0, True))
    assert not np.array_equal(order, mixture(sizes, np.array([0.8, 0.2]), 1000, 3, 1, True))
    plain = mixture(sizes, np.array([0.5, 0.5]), 10, 3, 0, False)
    assert plain[plain < 100].tolist() == list(range(len(plain[plain < 100])))


def test_bad_buffer() -> None:
    with pytest.raises(ValueError, match="shuffle_buffer"):
        shard_block_shuffle([np.arange(3)], 0, 0, 0)
