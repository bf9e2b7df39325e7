"""The global order of one epoch: a pure function of (dataset layout, seed, epoch)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Order = npt.NDArray[np.int64]

#: Default shuffle buffer of the shard-block shuffle, in items.
DEFAULT_SHUFFLE_BUFFER = 8192


def rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator for `(seed, *keys)`: independent streams, identical on every machine."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *keys])))


def permutation(n: int, seed: int, epoch: int) -> Order:
    """A full random permutation of `range(n)` for (seed, epoch)."""
    return rng(seed, epoch, 0).permutation(n).astype(np.int64, copy=False)


def shard_blocks(shard_of: npt.NDArray[np.integer]) -> list[Order]:
    """Item ids grouped by shard, each group in item order, groups by first appearance."""
    shard_of = np.asarray(shard_of)
    if len(shard_of) == 0:
        return []
    order = np.argsort(shard_of, kind="stable").astype(np.int64)
    codes = shard_of[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    groups = np.split(order, cuts)
    return sorted(groups, key=lambda g: int(g[0]))


def shard_block_shuffle(blocks: list[Order], seed: int, epoch: int, buffer: int) -> Order:
    """Shards in a seeded order, then a seeded shuffle buffer of `buffer` items over them.

    The buffer is the classic one (fill it, then for each incoming item emit a random
    slot and put the item there; at the end emit the rest in random order), computed
    without a Python loop: the item emitted at step t is the last one written to slot
    `j_t` before t, found by grouping the steps by slot.
    """
    if buffer < 1:
        raise ValueError(f"shuffle_buffer must be >= 1, got {buffer}")
    g = rng(seed, epoch, 1)
    stream = (
        np.concatenate([blocks[i] for i in g.permutation(len(blocks))])
        if blocks
        else np.zeros(0, dtype=np.int64)
    )
    n = len(stream)
    s = min(buffer, n)
    steps = n - s
    if s == 0:
        return stream
    slots = g.integers(0, s, size=steps)
    # the item in slot j_t at step t: written at the previous step with the same slot,
    # else the initial fill of that slot
    by_slot = np.lexsort((np.arange(steps), slots))
    prev = np.full(steps, -1, dtype=np.int64)
    same = slots[by_slot[1:]] == slots[by_slot[:-1]]
    prev[by_slot[1:][same]] = by_slot[:-1][same]
    emitted = np.where(prev >= 0, stream[s + np.maximum(prev, 0)], stream[slots])
    # what the buffer holds at the end: each slot's last write, or its initial fill
    final = stream[:s].copy()
    if steps:
        last_step = np.full(s, -1, dtype=np.int64)
        np.maximum.at(last_step, slots, np.arange(steps))
        written = last_step >= 0
        final[written] = stream[s + last_step[written]]
    return np.concatenate([emitted, final[g.permutation(s)]]).astype(np.int64, copy=False)


def mixture(
    sizes: list[int],
    weights: npt.NDArray[np.float64],
    length: int,
    seed: int,
    epoch: int,
    shuffle: bool,
) -> Order:
    """Item ids (offset per source) of a weighted mixture of `length` slots.

    Each slot draws its source with probability `weights`; a source's k-th draw takes the
    k-th item of that source's own order (a permutation per pass when `shuffle`, so a
    source drawn more often than it has items starts a fresh pass).
    """
    g = rng(seed, epoch, 2)
    choice = g.choice(len(sizes), size=length, p=weights)
    out = np.empty(length, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for src, size in enumerate(sizes):
        where = np.flatnonzero(choice == src)
        if not len(where):
            continue
        passes = -(-len(where) // size)
        if shuffle:
            local = np.concatenate(
                [rng(seed, epoch, 3, src, p).permutation(size) for p in range(passes)]
            )
        else:
            local = np.tile(np.arange(size, dtype=np.int64), passes)
        out[where] = offsets[src] + local[: len(where)]
    return out


def locality(
    order: Order, shard_of: npt.NDArray[np.integer] | None = None, window: int = 1024
) -> dict[str, float]:
    """How shuffled an order is, and how local its reads are (see docs/loader.md).

    Returns:
        `mean_jump`: mean |order[i+1] - order[i]| over the number of items (about 1/3
        for a uniform permutation, 0 for the dataset order); `adjacent`: the fraction of
        consecutive pairs that were neighbours in the dataset; with `shard_of`,
        `shards_per_window`: mean distinct shards among `window` consecutive items (what
        a streaming reader must keep open).
    """
    out = {"mean_jump": 0.0, "adjacent": 0.0}
    if len(order) >= 2:
        jumps = np.abs(np.diff(order))
        out = {
            "mean_jump": float(jumps.mean() / len(order)),
            "adjacent": float((jumps == 1).mean()),
        }
    if shard_of is not None and len(order):
        codes = np.asarray(shard_of)[order]
        counts = [len(np.unique(codes[i : i + window])) for i in range(0, len(codes), window)]
        out["shards_per_window"] = float(np.mean(counts))
    return out
