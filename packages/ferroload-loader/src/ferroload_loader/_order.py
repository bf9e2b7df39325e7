"""The global order of one epoch: a pure function of (dataset layout, seed, epoch)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Order = npt.NDArray[np.int64]

#: Default shuffle buffer of the shard-block shuffle, in items.
DEFAULT_SHUFFLE_BUFFER = 8192
#: Items the shuffle buffer holds when it starts emitting (it then grows to full size).
SHUFFLE_RAMP_START = 128


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


def shard_block_shuffle(
    blocks: list[Order], seed: int, epoch: int, buffer: int, initial: int | None = None
) -> Order:
    """Shards in a seeded order, then a seeded shuffle buffer of `buffer` items over them.

    The buffer starts emitting once it holds `initial` items (default
    `min(buffer, SHUFFLE_RAMP_START)`), then grows by one item per item emitted (two
    come in, one goes out) until it holds `buffer`; from there each incoming item
    replaces the one emitted; at the end the rest leaves in random order. So the first
    batch waits for `initial` items to be read, not for a whole buffer (WebDataset's
    `shuffle(initial=…)` does the same). Computed without a Python loop: the item emitted
    at step t is the last one written to the chosen slot before t.
    """
    if buffer < 1:
        raise ValueError(f"shuffle_buffer must be >= 1, got {buffer}")
    if initial is not None and initial < 1:
        raise ValueError(f"the shuffle buffer's initial fill must be >= 1, got {initial}")
    g = rng(seed, epoch, 1)
    stream = (
        np.concatenate([blocks[i] for i in g.permutation(len(blocks))])
        if blocks
        else np.zeros(0, dtype=np.int64)
    )
    n = len(stream)
    s0 = min(SHUFFLE_RAMP_START if initial is None else initial, buffer, n)
    if s0 == 0:
        return stream
    ramp = min(buffer - s0, (n - s0) // 2)  # steps that also grow the buffer
    size = s0 + ramp
    steps = ramp + (n - s0 - 2 * ramp)
    t = np.arange(steps, dtype=np.int64)
    highs = np.where(t < ramp, s0 + t + 1, size)
    slots = g.integers(0, highs) if steps else np.zeros(0, dtype=np.int64)
    # Every step, in time order: an append (while growing), the read of the chosen slot,
    # the write of the incoming item into it. Sorting these by slot (stably, so time order
    # stays within a slot; a radix sort for small buffers) puts each read right after
    # the write it returns: a running maximum of write positions finds it.
    ent_slot = np.empty((steps, 3), dtype=np.int64)
    ent_slot[:, 0] = s0 + t
    ent_slot[:, 1] = slots
    ent_slot[:, 2] = slots
    ent_pos = np.empty((steps, 3), dtype=np.int64)
    ent_pos[:, 0] = s0 + 2 * t
    ent_pos[:, 1] = t  # a read: which step it belongs to
    ent_pos[:, 2] = np.where(t < ramp, s0 + 2 * t + 1, s0 + ramp + t)
    valid = np.ones((steps, 3), dtype=bool)
    valid[ramp:, 0] = False
    is_read = np.zeros((steps, 3), dtype=bool)
    is_read[:, 1] = True
    all_slot = np.concatenate([np.arange(s0), ent_slot[valid]])
    all_pos = np.concatenate([np.arange(s0), ent_pos[valid]])
    all_read = np.concatenate([np.zeros(s0, dtype=bool), is_read[valid]])
    narrow = np.int16 if size < (1 << 15) else np.int32
    order = np.argsort(all_slot.astype(narrow), kind="stable")
    pos, read = all_pos[order], all_read[order]
    last_write = np.maximum.accumulate(np.where(read, 0, np.arange(len(order))))
    emitted = np.empty(steps, dtype=np.int64)
    emitted[pos[read]] = stream[pos[last_write[read]]]
    ends = np.append(np.flatnonzero(np.diff(all_slot[order])), len(order) - 1)
    final = stream[pos[last_write[ends]]]
    return np.concatenate([emitted, final[g.permutation(size)]]).astype(np.int64, copy=False)


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
