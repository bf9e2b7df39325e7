"""The global order of one epoch: a pure function of (dataset layout, seed, epoch).

An order is computed on demand: `order.at(positions)` gives the item ids at any global
positions of the epoch, in memory proportional to the number of positions asked for, so
a rank's start-up and memory do not grow with the dataset (or with the number of ranks).
Every order is built from one primitive, a seeded bijection on `[0, n)` (`_bijection`):
a Feistel network over the next power of two, cycle-walked into range.
"""

from __future__ import annotations

import numpy as np
import numpy.random  # loaded with the module: numpy would at the first order (~5 ms)
import numpy.typing as npt

Order = npt.NDArray[np.int64]

#: Default shuffle window of the shard-block order, in items.
DEFAULT_SHUFFLE_BUFFER = 65_536
#: Items in the first shuffle window of the shard-block order (the windows then double
#: up to the full `shuffle_buffer`): the first batch reads from the first 128 items.
SHUFFLE_RAMP_START = 128
#: Slots of a mixture whose per-source counts are drawn together.
MIXTURE_CHUNK = 1 << 16
#: Rounds of the Feistel network.
ROUNDS = 6

_U64 = np.uint64
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator for `(seed, *keys)`: independent streams, identical on every machine."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *keys])))


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a bijection of uint64 with full avalanche (wrapping)."""
    x = (x ^ (x >> _U64(30))) * _M1
    x = (x ^ (x >> _U64(27))) * _M2
    return x ^ (x >> _U64(31))


def _round_keys(seed: int, *tags: int) -> npt.NDArray[np.uint64]:
    """ROUNDS 64-bit keys for `(seed, *tags)`."""
    return rng(seed, *tags).integers(0, 1 << 64, size=ROUNDS, dtype=np.uint64, endpoint=False)


def _lane_keys(
    base: npt.NDArray[np.uint64], ids: npt.NDArray[np.uint64]
) -> list[npt.NDArray[np.uint64]]:
    """Per-lane round keys: the keys `base` mixed with each lane's id (one independent
    bijection per id, such as a window or a pass over a source)."""
    h = _mix(ids * _GOLDEN + _U64(1))
    return [_mix(h ^ k) for k in base]


def _bits(n: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Per lane, the bits `t >= 1` of the smallest power of two that holds `[0, n)`."""
    if n.ndim == 0 or (n.size and bool((n == n.flat[0]).all())):
        one = max(int(n.flat[0]) - 1, 1).bit_length() if n.size else 1
        return np.full(n.shape, one, dtype=np.uint64)
    uniq, inverse = np.unique(n, return_inverse=True)
    bits = np.asarray([max(int(v) - 1, 1).bit_length() for v in uniq], dtype=np.uint64)
    return bits[inverse.reshape(n.shape)]


def _feistel(
    x: npt.NDArray[np.uint64], t: npt.NDArray[np.uint64], keys: list[npt.NDArray[np.uint64]]
) -> npt.NDArray[np.uint64]:
    """An unbalanced Feistel network on `t`-bit values: each round takes the low `s` bits
    `L` and the high `t - s` bits `H` to `(L, H ^ F(L))` (so `L` moves to the top), with
    `s` alternating between `t // 2` and `t - t // 2`: a bijection of `[0, 2**t)` for
    any `t`, invertible round by round."""
    one = _U64(1)
    s = t >> one
    for k in keys:
        low = x & ((one << s) - one)
        high = x >> s
        rest = t - s
        x = (low << rest) | (high ^ (_mix(low ^ k) & ((one << rest) - one)))  # type: ignore[assignment]
        s = rest
    return x


def _bijection(
    i: npt.NDArray[np.int64],
    n: npt.NDArray[np.int64],
    keys: list[npt.NDArray[np.uint64]],
) -> npt.NDArray[np.int64]:
    """For each lane, `pi(i)` where `pi` is the lane's seeded bijection on `[0, n)`.

    `keys` are per-lane arrays (or broadcastable scalars). A Feistel network permutes
    `[0, 2**t)`, the smallest power of two that holds `[0, n)`; values that land outside
    `[0, n)` are sent through it again (cycle walking: the cycle through an in-range value
    returns to the range), iterating only the lanes still out of range: `2**t / n < 2`
    rounds per lane on average.
    """
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), i.shape)
    t = _bits(n)
    un = n.astype(np.uint64)
    full = [np.broadcast_to(k, i.shape) for k in keys]
    x = _feistel(i.astype(np.uint64), t, full)
    todo = np.flatnonzero(x >= un)
    while len(todo):
        y = _feistel(x[todo], t[todo], [k[todo] for k in full])
        x[todo] = y
        todo = todo[y >= un[todo]]
    return x.astype(np.int64)


def _positions(positions: npt.ArrayLike, n: int) -> Order:
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= n):
        raise IndexError(f"positions must be in [0, {n})")
    return pos


class EpochOrder:
    """The order of one epoch, computed on demand: `len()` items, `at(positions)` their
    ids. `computed` counts the positions computed so far (what tests measure work by).

    A loader's threads (the prefetcher, the index window, the read-ahead) call `at` at
    the same time: an order that keeps what it computed must guard it (`BucketOrder`
    computes its spans under a lock); the others compute from fixed keys only."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.computed = 0

    def __len__(self) -> int:
        return self.n

    def at(self, positions: npt.ArrayLike) -> Order:
        """The item ids at these global positions (int64, in the order given)."""
        pos = _positions(positions, self.n)
        self.computed += len(pos)
        return self._at(pos) if len(pos) else np.zeros(0, dtype=np.int64)

    def _at(self, pos: Order) -> Order:
        raise NotImplementedError

    def materialize(self) -> Order:
        """The whole order (O(n) memory: for inspection and tests)."""
        return self.at(np.arange(self.n, dtype=np.int64))


class SequentialOrder(EpochOrder):
    """The dataset order."""

    def _at(self, pos: Order) -> Order:
        return pos.copy()


class PermutationOrder(EpochOrder):
    """A seeded pseudo-random permutation of `range(n)` for (seed, epoch)."""

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        super().__init__(n)
        self._keys = list(_round_keys(seed, epoch, 0))

    def _at(self, pos: Order) -> Order:
        return _bijection(pos, np.int64(self.n), self._keys)  # type: ignore[arg-type]


def runs_of(shard_of: npt.ArrayLike) -> tuple[Order, npt.NDArray[np.int32]]:
    """`(starts, codes)` of the runs of equal shard in a per-item shard array (what
    `Dataset.shard_runs()` returns without the whole array)."""
    codes = np.asarray(shard_of)
    if not len(codes):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1]).astype(np.int64)
    return starts, codes[starts].astype(np.int32)


class ShardBlockOrder(EpochOrder):
    """Shards in a seeded order, each read whole, then a seeded shuffle within windows;
    optionally dealt out in `lanes` that hold disjoint shards.

    The *stream* visits the shards in a seeded order (a shard's runs in position order).
    The stream is cut into `lanes` contiguous pieces of equal length (±1): a lane holds
    whole shards but the one or two it shares with a neighbour. Global position `p`
    belongs to lane `p mod lanes`, as that lane's item `p // lanes`: so rank `r` of
    `W = lanes` ranks (which takes positions `r, r+W, …`) reads only lane `r`'s shards,
    and with any `W` that divides `lanes`, `lanes / W` lanes of its own. Each lane is cut
    into windows, and the items of each window are permuted by the window's own seeded
    bijection: no state carries from one window to the next, so any position is computed
    in O(log runs). A lane's first window holds `initial` items (default
    `min(buffer, SHUFFLE_RAMP_START)`) and each next one twice as many, up to `buffer`:
    the first batch reads from the first `initial` items of each lane, not from a whole
    window (WebDataset's `shuffle(initial=…)` has the same purpose). With one lane this
    is one stream in one sequence of windows.

    Memory: O(runs) for the shard layout (given as runs, `Dataset.shard_runs()`), O(1)
    per position.
    """

    def __init__(
        self,
        starts: npt.ArrayLike,
        codes: npt.ArrayLike,
        n: int,
        seed: int,
        epoch: int,
        buffer: int,
        initial: int | None = None,
        lanes: int = 1,
    ) -> None:
        if buffer < 1:
            raise ValueError(f"shuffle_buffer must be >= 1, got {buffer}")
        if initial is not None and initial < 1:
            raise ValueError(f"the shuffle buffer's initial fill must be >= 1, got {initial}")
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        super().__init__(n)
        starts = np.asarray(starts, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        if len(starts) != len(codes) or (n and (not len(starts) or starts[0] != 0)):
            raise ValueError("shard runs must start at position 0, one code per run")
        lengths = np.diff(np.append(starts, n))
        # shards by first appearance, then in a seeded order; a shard's runs in place order
        uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        by_appearance = np.argsort(first, kind="stable")
        shard_rank = np.empty(len(uniq), dtype=np.int64)
        shard_rank[by_appearance[rng(seed, epoch, 1).permutation(len(uniq))]] = np.arange(len(uniq))
        run_order = np.lexsort((starts, shard_rank[inverse.reshape(-1)]))
        self._run_start = starts[run_order]
        self._stream_start = np.concatenate([[0], np.cumsum(lengths[run_order])[:-1]]).astype(
            np.int64
        )
        self.buffer = buffer
        self.lanes = min(lanes, max(n, 1))
        # lane l is stream[l*q + min(l, r) :][: q + (l < r)]
        self._q, self._r = divmod(n, self.lanes)
        longest = self._q + (self._r > 0)
        s0 = min(SHUFFLE_RAMP_START if initial is None else initial, buffer)
        ramp = []  # the growing windows' starts (within a lane)
        size, at = s0, 0
        while size < buffer and at < longest:
            ramp.append(at)
            at += size
            size *= 2
        self._ramp = np.asarray([*ramp, at], dtype=np.int64)  # + where full windows start
        self._keys = _round_keys(seed, epoch, 4)

    def lane_of(self, pos: Order) -> tuple[Order, Order, Order, Order]:
        """Per global position: its lane, its place in the lane, the lane's first stream
        position and the lane's length."""
        i, lane = np.divmod(pos, self.lanes)
        first = lane * self._q + np.minimum(lane, self._r)
        return lane, i, first, self._q + (lane < self._r)

    def windows(self, i: Order, length: Order | int) -> tuple[Order, Order, Order]:
        """Per place `i` in a lane of `length` items: its window's id, first place and
        size."""
        ramp_end = int(self._ramp[-1])
        in_ramp = i < ramp_end
        k = np.searchsorted(self._ramp, i, side="right") - 1
        full = (i - ramp_end) // self.buffer
        wid = np.where(in_ramp, k, len(self._ramp) - 1 + full)
        start = np.where(
            in_ramp, self._ramp[np.minimum(k, len(self._ramp) - 1)], ramp_end + full * self.buffer
        )
        end = np.where(
            in_ramp, self._ramp[np.minimum(k + 1, len(self._ramp) - 1)], start + self.buffer
        )
        return wid, start, np.minimum(end, length) - start

    def _at(self, pos: Order) -> Order:
        lane, i, first, length = self.lane_of(pos)
        wid, start, size = self.windows(i, length)
        # lane 0's windows keep the ids of the one-lane order
        ids = wid.astype(np.uint64) | (lane.astype(np.uint64) << _U64(40))
        keys = _lane_keys(self._keys, ids)
        stream = first + start + _bijection(i - start, size, keys)
        run = np.searchsorted(self._stream_start, stream, side="right") - 1
        out: Order = self._run_start[run] + (stream - self._stream_start[run])
        return out


class MixtureOrder(EpochOrder):
    """A weighted mixture of `length` slots over sources of `sizes` items (item ids
    offset per source).

    Every slot draws its source with probability `weights`, independently, and a
    source's k-th draw takes the k-th item of that source's own order (a seeded
    permutation per pass over it when `shuffle`, else its dataset order): a source drawn
    more often than it has items starts a new pass. Computed in chunks of `chunk` slots:
    a chunk's per-source counts are drawn at construction (multinomial), and a seeded
    bijection of the chunk places them, which is exactly the distribution of independent
    draws. Memory: O(length / chunk × sources).
    """

    def __init__(
        self,
        sizes: list[int],
        weights: npt.NDArray[np.float64],
        length: int,
        seed: int,
        epoch: int,
        shuffle: bool,
        chunk: int = MIXTURE_CHUNK,
    ) -> None:
        super().__init__(length)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.shuffle = shuffle
        self.chunk = chunk
        p = np.asarray(weights, dtype=np.float64)
        p = p / p.sum()
        g = rng(seed, epoch, 2)
        full, last = divmod(length, chunk)
        counts = g.multinomial(chunk, p, size=full).astype(np.int64).reshape(full, len(p))
        if last:
            counts = np.vstack([counts, g.multinomial(last, p).astype(np.int64)[None, :]])
        # per chunk and source: draws of the source before this chunk, and where its slots
        # start within the chunk's arrangement
        self._before = np.cumsum(counts, axis=0) - counts
        self._within = np.cumsum(counts, axis=1) - counts
        self._ends = np.cumsum(counts, axis=1)
        self._keys = _round_keys(seed, epoch, 2, 1)
        self._pass_keys = _round_keys(seed, epoch, 3)

    def _at(self, pos: Order) -> Order:
        c, j = np.divmod(pos, self.chunk)
        size = np.minimum(self.chunk, self.n - c * self.chunk)
        q = _bijection(j, size, _lane_keys(self._keys, c.astype(np.uint64)))
        src = (q[:, None] >= self._ends[c]).sum(axis=1)
        k = self._before[c, src] + q - self._within[c, src]
        n_src = self.sizes[src]
        passes, idx = np.divmod(k, n_src)
        if self.shuffle:
            ids = (src.astype(np.uint64) << _U64(40)) ^ passes.astype(np.uint64)
            idx = _bijection(idx, n_src, _lane_keys(self._pass_keys, ids))
        out: Order = self.offsets[src] + idx
        return out


def permutation(n: int, seed: int, epoch: int) -> Order:
    """The whole permutation order of `range(n)` for (seed, epoch) (materialised)."""
    return PermutationOrder(n, seed, epoch).materialize()


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
