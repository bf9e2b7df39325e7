from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_loader import Sampler


def rank_sequences(n: int, world: int, **kw: object) -> list[list[int]]:
    return [list(Sampler(n, rank=r, world_size=world, **kw)) for r in range(world)]  # type: ignore[arg-type]


def test_ranks_partition_the_epoch() -> None:
    seqs = rank_sequences(100, 4, seed=1)
    assert [len(s) for s in seqs] == [25] * 4
    assert sorted(sum(seqs, [])) == list(range(100))


def test_uneven_tails_are_padded_or_dropped() -> None:
    padded = rank_sequences(10, 4, seed=1)
    assert [len(s) for s in padded] == [3] * 4
    assert set(sum(padded, [])) == set(range(10))  # two items appear twice
    dropped = rank_sequences(10, 4, seed=1, drop_last=True)
    assert [len(s) for s in dropped] == [2] * 4
    assert len(set(sum(dropped, []))) == 8


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_the_global_order_is_the_same_for_every_world_size(world: int) -> None:
    n = 96
    seqs = rank_sequences(n, world, seed=5)
    interleaved = [seqs[i % world][i // world] for i in range(n)]
    assert interleaved == Sampler(n, seed=5, rank=0, world_size=1).global_order().tolist()


@given(
    n=st.integers(1, 300),
    world1=st.integers(1, 5),
    world2=st.integers(1, 5),
    batch1=st.integers(1, 20),
    steps=st.integers(0, 30),
    seed=st.integers(0, 3),
)
def test_resume_under_another_world_size_loses_and_repeats_nothing(
    n: int, world1: int, world2: int, batch1: int, steps: int, seed: int
) -> None:
    first = [
        Sampler(n, seed=seed, rank=r, world_size=world1, drop_last=True) for r in range(world1)
    ]
    per_rank = len(first[0])
    steps = min(steps, per_rank // batch1)
    used = [x for s in first for x in s.indices()[: steps * batch1].tolist()]
    for s in first:
        s.advance(steps * batch1)
    state = first[0].state_dict()
    assert all(s.state_dict() == state for s in first)
    second = []
    for r in range(world2):
        s = Sampler(n, seed=seed, rank=r, world_size=world2, drop_last=True)
        s.load_state_dict(state)
        second.append(s.indices().tolist())
    rest = [x for seq in second for x in seq]
    assert not set(used) & set(rest)  # nothing repeated
    assert len(used) + len(rest) == len(set(used) | set(rest))
    order = first[0].global_order().tolist()
    # what is left is exactly the rest of the global order (less the tail drop_last cuts)
    assert sorted(rest) == sorted(order[steps * batch1 * world1 :][: len(rest)])
    assert len(rest) == (n - steps * batch1 * world1) // world2 * world2


def test_set_epoch_and_state() -> None:
    s = Sampler(50, seed=2)
    e0 = list(s)
    s.set_epoch(1)
    assert list(s) != e0
    s.set_epoch(1)
    s.begin_pass()
    s.advance(10)
    assert s.consumed == 10
    assert (len(s), s.remaining()) == (50, 40)  # len: the whole epoch, as torch counts
    state = s.state_dict()
    other = Sampler(50, seed=99)
    other.load_state_dict(state)
    other.set_epoch(1)  # the current epoch again: position kept (what a resume needs)
    assert (other.seed, other.epoch, other.consumed) == (2, 1, 10)
    assert list(other) == s.indices().tolist()
    with pytest.raises(ValueError, match="items"):
        Sampler(51).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        Sampler(50).load_state_dict({**state, "version": 99})
    # a state of the older, materialised orders would resume into another order
    with pytest.raises(ValueError, match="older ferroload whose epoch orders differ"):
        Sampler(50).load_state_dict({**state, "version": 1})
    with pytest.raises(ValueError, match="version 2"):  # the even-power Feistel orders
        Sampler(50).load_state_dict({**state, "version": 2})
    s.advance(1000)
    assert s.exhausted and s.consumed == 50


def test_unshuffled_order_is_the_dataset_order() -> None:
    assert list(Sampler(6, shuffle=False, rank=1, world_size=2)) == [1, 3, 5]


def test_rank_and_world_size_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = Sampler(9, seed=0)
    assert (s.rank, s.world_size) == (2, 3)
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="rank"):
        Sampler(9)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        Sampler(9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_items": -1}, "num_items"),
        ({"num_items": 5, "mode": "zigzag"}, "mode"),
        ({"num_items": 5, "mode": "shard_block"}, "shard_of"),
        ({"num_items": 5, "mode": "mixture"}, "mixture"),
        ({"num_items": 5, "world_size": 0}, "world_size"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Sampler(**kwargs)  # type: ignore[arg-type]


def test_sampler_is_cheap_to_iterate_for_a_million_items() -> None:
    s = Sampler(1_000_000, seed=0, rank=1, world_size=4)
    idx = s.indices()
    assert len(idx) == 250_000
    assert idx.dtype == np.int64


@given(
    n=st.integers(0, 200),
    world=st.integers(1, 6),
    consumed=st.integers(0, 220),
    batch=st.integers(1, 9),
    drop_last=st.booleans(),
    mode=st.sampled_from(["permutation", "shard_block", "sequential"]),
)
def test_batches_computed_on_demand_are_the_rank_share(
    n: int, world: int, consumed: int, batch: int, drop_last: bool, mode: str
) -> None:
    shard_of = np.arange(n) // 7
    for rank in range(world):
        s = Sampler(n, seed=2, rank=rank, world_size=world, drop_last=drop_last, mode=mode,  # type: ignore[arg-type]
                    shard_of=shard_of, shuffle_buffer=5)  # fmt: skip
        s.consumed = consumed
        # the materialised rule: the rest of the global order, wrapped or cut per rank
        rest = s.global_order()[min(consumed, n) :]
        if drop_last:
            rest = rest[: len(rest) // world * world]
        elif len(rest) % world:
            rest = np.resize(rest, -(-len(rest) // world) * world)
        expected = rest[rank::world].tolist()
        assert s.remaining() == len(expected)
        assert s.indices().tolist() == expected
        got = [s.batch(k, batch).tolist() for k in range(-(-len(expected) // batch))]
        assert sum(got, []) == expected
        assert s.batch(len(got), batch).tolist() == []


@pytest.mark.parametrize("drop_last", [False, True])
def test_512_ranks_cover_the_epoch_once_and_start_without_per_rank_work(drop_last: bool) -> None:
    n, world, batch = 1_000_003, 512, 64
    samplers = [
        Sampler(n, seed=4, rank=r, world_size=world, drop_last=drop_last) for r in range(world)
    ]
    per_rank = n // world if drop_last else -(-n // world)
    assert {len(s) for s in samplers} == {s.remaining() for s in samplers} == {per_rank}
    items = np.concatenate([s.indices() for s in samplers])
    order = samplers[0].global_order()
    counts = np.bincount(items, minlength=n)
    if drop_last:  # the first n // world * world items of the global order, each once
        assert len(items) == n // world * world
        assert counts.max() == 1 and set(np.flatnonzero(counts)) == set(order[: len(items)])
    else:  # every item, and the wrap-around pads with the head of the order
        assert counts.min() == 1
        assert sorted(np.flatnonzero(counts == 2)) == sorted(order[: per_rank * world - n])
    # a rank's start-up (its sampler and first batch) computes that batch only, whatever
    # the number of ranks
    for w in (1, 8, 512):
        s = Sampler(n, seed=4, rank=w - 1, world_size=w, drop_last=drop_last)
        first = s.batch(0, batch)
        assert len(first) == batch and s.order().computed == batch
    tracemalloc.start()
    s = Sampler(10**8, seed=4, rank=511, world_size=512)
    s.batch(1000, 256)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 256 << 10  # a batch's worth of positions, not 10^8 items


def test_shard_block_sampler_takes_shard_runs() -> None:
    shard_of = np.repeat(np.arange(50), 20)
    from ferroload_loader._order import runs_of

    by_runs = Sampler(1000, seed=1, mode="shard_block", shard_runs=runs_of(shard_of))
    by_column = Sampler(1000, seed=1, mode="shard_block", shard_of=shard_of)
    assert by_runs.indices().tolist() == by_column.indices().tolist()
    assert sorted(by_runs.indices().tolist()) == list(range(1000))


def test_iteration_is_lazy() -> None:
    s = Sampler(10**9, seed=0, rank=3, world_size=4)
    it = iter(s)
    head = [next(it) for _ in range(10)]
    assert head == s.order().at(3 + 4 * np.arange(10)).tolist()
    assert s.consumed == 40
    assert s.order().computed < 10_000


def _streaming(world: int, rank: int = 0, **kw: object) -> Sampler:
    shard_of = np.repeat(np.arange(64), 100)
    return Sampler(6400, seed=3, mode="shard_block", shard_of=shard_of, rank=rank,  # type: ignore[arg-type]
                   world_size=world, shuffle_buffer=256, **kw)  # fmt: skip


def test_streaming_ranks_read_shards_of_their_own_by_default() -> None:
    shard_of = np.repeat(np.arange(64), 100)
    touched = [set(shard_of[_streaming(8, r).indices()].tolist()) for r in range(8)]
    assert sum(len(t) for t in touched) <= 64 + 7  # only the lanes' boundary shards twice
    one = [set(shard_of[_streaming(8, r, lanes=1).indices()].tolist()) for r in range(8)]
    assert all(len(t) == 64 for t in one)  # one lane: every rank reads every shard
    assert _streaming(8).lanes == 8 and "lanes=8" in repr(_streaming(8))
    with pytest.raises(ValueError, match="lanes"):
        _streaming(2, lanes=0)


@given(world2=st.integers(1, 9), steps=st.integers(0, 6), batch=st.integers(1, 40))
def test_a_streaming_state_keeps_its_lanes_under_another_world_size(
    world2: int, steps: int, batch: int
) -> None:
    world1 = 4
    first = [_streaming(world1, r, drop_last=True) for r in range(world1)]
    order = first[0].global_order()
    seen = []
    for s in first:
        view = s.view()
        seen += view.items(0, steps * batch).tolist()
        s.advance(min(steps * batch, len(view)))
    state = first[0].state_dict()
    assert state["lanes"] == world1
    rest = []
    for r in range(world2):
        s = _streaming(world2, r, drop_last=True)
        s.load_state_dict(state)
        assert s.lanes == world1  # the order goes on in the lanes it started with
        assert np.array_equal(s.global_order(), order)
        rest += s.indices().tolist()
    assert not set(seen) & set(rest)  # nothing repeats
    assert len(seen) + len(rest) >= len(order) - world2  # at most a dropped tail is lost


def test_streaming_states_with_other_lanes() -> None:
    state = _streaming(4).state_dict()
    with pytest.raises(ValueError, match="lanes=2"):
        _streaming(4, lanes=2).load_state_dict(state)
    for hostile in (0, -3, "8", True, 2.5):  # a checkpoint from elsewhere
        with pytest.raises(ValueError, match="lanes must be a positive int"):
            _streaming(4).load_state_dict({**state, "lanes": hostile})
    old = {k: v for k, v in state.items() if k != "lanes"}  # saved before lanes existed
    s = _streaming(4)
    s.load_state_dict(old)
    assert s.lanes == 1
    assert np.array_equal(s.global_order(), _streaming(1).global_order())


def test_a_slurm_array_task_is_not_a_training_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # one reading of the environment (ferroload_core.rank_from_env) for the loader and
    # the map; the map runs a partition per array task, a training loader must not
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "8")
    s = Sampler(10)
    assert (s.rank, s.world_size) == (0, 1)


def test_at_epoch_end_counts_whole_batches_with_drop_last() -> None:
    """The rule that `begin_pass` and `FerroIterableDataset` both resume by: no item left,
    or with `drop_last` no whole batch of the loader's size."""
    s = Sampler(20, seed=1, drop_last=True)
    assert not s.at_epoch_end(7)  # the start of the epoch, however few items
    s.advance(14)
    assert s.at_epoch_end(7) and not s.at_epoch_end(6) and not s.at_epoch_end()
    s.advance(6)
    assert s.at_epoch_end() and s.at_epoch_end(7)
    kept = Sampler(20, seed=1)  # without drop_last the 6 items make a batch
    kept.advance(14)
    assert not kept.at_epoch_end(7)
    assert not Sampler(0).at_epoch_end()  # an empty dataset never moves on
