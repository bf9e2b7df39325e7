"""`Sampler`: one rank's share of the epoch's global order; resumable, elastic."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ferroload_loader._buckets import BucketOrder, BucketPlan
from ferroload_loader._checks import (
    MAX_SHUFFLE_BUFFER,
    check_bool,
    check_epoch,
    check_int,
    check_lanes,
    check_seed,
)
from ferroload_loader._dist import resolve_rank
from ferroload_loader._errors import LoaderOptionError
from ferroload_loader._order import (
    DEFAULT_SHUFFLE_BUFFER,
    EpochOrder,
    MixtureOrder,
    Order,
    PermutationOrder,
    SequentialOrder,
    ShardBlockOrder,
    runs_of,
)
from ferroload_loader._state import STATE_VERSION, SamplerPosition, check_sampler_state

Mode = Literal["permutation", "shard_block", "sequential", "mixture"]
#: Items `iter(sampler)` computes at a time.
_ITER_CHUNK = 4096


class RankItems:
    """One rank's items for the rest of an epoch, computed on demand.

    The `j`-th item is at global position `start + (rank + j·world) mod rest` of the
    epoch's order (`rest` items after `start`): the wrap-around pads the tail so that
    every rank gets the same count, or `drop_last` cuts it. Nothing is materialised:
    `items(j0, j1)` computes those positions only.
    """

    def __init__(self, order: EpochOrder, start: int, rank: int, world: int, drop_last: bool):
        self.order = order
        self.start = start
        self.rank = rank
        self.world = world
        self.rest = max(len(order) - start, 0)
        per = self.rest // world if drop_last else -(-self.rest // world)
        self.count = per

    def __len__(self) -> int:
        return self.count

    def positions(self, j0: int, j1: int) -> Order:
        """Global positions of this rank's items `j0..j1`."""
        j1 = min(j1, self.count)
        if j1 <= j0:
            return np.zeros(0, dtype=np.int64)
        i = self.rank + np.arange(j0, j1, dtype=np.int64) * self.world
        return self.start + i % self.rest

    def items(self, j0: int, j1: int) -> Order:
        """Item ids of this rank's items `j0..j1` (clipped to its count)."""
        return self.order.at(self.positions(j0, j1))

    def batch(self, k: int, batch_size: int) -> Order:
        """Item ids of this rank's batch `k` of `batch_size` (the last may be short)."""
        return self.items(k * batch_size, (k + 1) * batch_size)


class Sampler:
    """The item order of one rank: deterministic per (seed, epoch), elastic, resumable.

    The epoch's *global* order is the same on every rank and whatever the world size;
    rank `r` of `W` takes its items `r, r+W, r+2W, …`. After `k` batches of `B` items on
    every rank, the first `k·B·W` items of the global order are used, so progress is one
    number (`consumed`) that any world size can resume from. In `shard_block` mode the
    global order is dealt out in `lanes` of disjoint shards (default: the world size of
    the run that starts it), so that each rank reads shards of its own; a resumed state
    keeps its lanes, so the order stays the same under another world size. The order is computed on
    demand (`batch`, `items`): a rank's memory and start-up do not grow with the number
    of items or of ranks.

    It is a valid `torch.utils.data.DataLoader` sampler (an iterable of item ids with a
    length), and Lightning calls its `set_epoch`.

    **Passes** follow torch's conventions. Each `iter(sampler)` (or loader pass) starts
    at the beginning of the current epoch, unless `load_state_dict` was called since the
    last pass began: then it starts at the restored position. A pass that ran to the end
    of its epoch moves the next pass to the next epoch by itself (as torch's
    `RandomSampler` draws a new order per pass); `set_epoch(e)` is the explicit control
    and wins over both. Iterating advances the position item by item, so `state_dict()`
    taken by torchdata's `StatefulDataLoader` after a batch resumes after that batch.
    `len(sampler)` is the whole epoch of this rank; `remaining()` what is left of it.

    Args:
        num_items: items per epoch (the dataset's length).
        shuffle: shuffle each epoch (else dataset order).
        seed: the seed; with the epoch it fixes the order.
        mode: `permutation` (full shuffle), `shard_block` (shuffled shards, then a
            seeded shuffle within windows: for streaming), or `mixture` (see
            `ferroload.mix`).
        shard_runs: `(starts, codes)`: the positions split into runs of one shard, as
            `Dataset.shard_runs()` gives them (`shard_block` mode).
        shard_of: the shard of every item (`shard_block` mode; instead of `shard_runs`).
        shuffle_buffer: items per shuffle window (`shard_block` mode).
        lanes: `shard_block` mode: the pieces of disjoint shards the order is dealt out
            in (`ShardBlockOrder`); rank `r` reads lane `r mod lanes` when the world
            size divides it. Default: the world size (each rank its own shards); `1`
            gives one order for every world size, in which every rank reads from every
            shard of a window. A state restored by `load_state_dict` brings its own.
        mixture_sizes: items in each source of a mixture (`mixture` mode).
        mixture_weights: the sources' probabilities (`mixture` mode).
        buckets: size-bucketed batches (`BucketPlan`, from `bucket_by=`): the order is
            regrouped (`BucketOrder`) so that each run of `batch_size × world_size`
            positions holds items of one bucket, in spans of `shuffle_buffer` items of
            the usual order; a state resumes only with the same grouping. With
            `drop_last`, the items that fill no whole group of their bucket are left out
            of the epoch (`epoch_items`), so every batch is full and of one bucket.
        drop_last: drop the tail that does not fill every rank equally (else pad it by
            wrapping around).
        rank: this process's rank (default: torch.distributed, else `RANK`, else 0).
        world_size: the number of ranks (default: torch.distributed, else
            `WORLD_SIZE`, else 1).

    Examples:
        >>> s = Sampler(10, seed=1, rank=0, world_size=2)
        >>> len(s), sorted(list(s) + list(Sampler(10, seed=1, rank=1, world_size=2)))
        (5, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        >>> t = Sampler(10, seed=1)
        >>> first, second = list(t), list(t)      # a finished pass moves to the next epoch
        >>> t.epoch, sorted(first) == sorted(second), first != second
        (1, True, True)
    """

    def __init__(
        self,
        num_items: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        mode: Mode = "permutation",
        shard_runs: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        shard_of: npt.NDArray[np.integer[Any]] | None = None,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        lanes: int | None = None,
        mixture_sizes: list[int] | None = None,
        mixture_weights: npt.NDArray[np.float64] | None = None,
        buckets: BucketPlan | None = None,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        check_int("num_items", num_items, low=0)
        check_seed(seed)
        check_bool("shuffle", shuffle)
        check_bool("drop_last", drop_last)
        check_int("shuffle_buffer", shuffle_buffer, low=1, high=MAX_SHUFFLE_BUFFER)
        if mode not in ("permutation", "shard_block", "sequential", "mixture"):
            raise LoaderOptionError(f"unknown sampler mode {mode!r}", option="mode", value=mode)
        if shard_runs is None and shard_of is not None and len(shard_of) == num_items:
            shard_runs = runs_of(shard_of)
        if mode == "shard_block" and shard_runs is None:
            raise LoaderOptionError(
                "shard_block mode needs shard_runs (Dataset.shard_runs()) or shard_of with "
                "one shard per item",
                option="shard_runs",
            )
        check_lanes(lanes)
        if mode == "mixture" and (mixture_sizes is None or mixture_weights is None):
            raise LoaderOptionError(
                "mixture mode needs mixture_sizes and mixture_weights", option="mixture_sizes"
            )
        if buckets is not None and (mode == "mixture" or len(buckets.ids) != num_items):
            raise LoaderOptionError(
                "bucketed batches need one bucket per item, and no mixture", option="buckets"
            )
        self.num_items = num_items
        self.shuffle = shuffle
        self.seed = seed
        self.mode: Mode = mode if shuffle or mode == "mixture" else "sequential"
        self.shuffle_buffer = shuffle_buffer
        self.drop_last = drop_last
        self._shard_runs = shard_runs
        self._mixture = (mixture_sizes, mixture_weights)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self._lanes_given = lanes is not None
        self.lanes = lanes if lanes is not None else self.world_size
        self.buckets = buckets
        self.epoch = 0
        self.consumed = 0
        # load_state_dict since the last pass began: the next pass starts where it says
        self._resume = False
        # the last pass ran to the end of its epoch (and set_epoch was not called since)
        self._finished = False
        self._cache: tuple[tuple[int, int], EpochOrder] | None = None

    # ------------------------------------------------------------------ the order

    def order(self, epoch: int | None = None) -> EpochOrder:
        """The on-demand order of `epoch` (default: the current one), for all ranks."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is not None and self._cache[0] == (epoch, self.seed):
            return self._cache[1]
        n, seed = self.num_items, self.seed
        order: EpochOrder
        if self.mode == "permutation":
            order = PermutationOrder(n, seed, epoch)
        elif self.mode == "shard_block":
            assert self._shard_runs is not None
            starts, codes = self._shard_runs
            order = ShardBlockOrder(
                starts, codes, n, seed, epoch, self.shuffle_buffer, lanes=self.lanes
            )
        elif self.mode == "mixture":
            sizes, weights = self._mixture
            assert sizes is not None and weights is not None
            order = MixtureOrder(sizes, weights, n, seed, epoch, self.shuffle)
        else:
            order = SequentialOrder(n)
        if self.buckets is not None:
            order = BucketOrder(
                order, self.buckets.ids, self.bucket_group, self.shuffle_buffer, seed, epoch,
                shuffle=self.shuffle, length=self.epoch_items,
            )  # fmt: skip
        self._cache = ((epoch, self.seed), order)
        return order

    @property
    def bucket_group(self) -> int:
        """Items of one bucket in a row of the bucketed order: a batch on every rank
        (`batch_size × world_size`); 0 without buckets."""
        return 0 if self.buckets is None else self.buckets.batch_size * self.world_size

    @property
    def epoch_items(self) -> int:
        """Items of the epoch's global order: `num_items`, less, with bucketed batches
        and `drop_last`, each bucket's items that fill no whole group."""
        if self.buckets is None or not self.drop_last:
            return self.num_items
        return self.num_items - int((self.buckets.sizes % self.bucket_group).sum())

    def _bucket_state(self) -> dict[str, Any] | None:
        if self.buckets is None:
            return None
        return self.buckets.describe(self.bucket_group, self.shuffle_buffer)

    def global_order(self, epoch: int | None = None) -> Order:
        """Every item id of `epoch` (default: the current one), in order, for all ranks
        (materialised: O(items); for inspection and tests, never used by the loader)."""
        return self.order(epoch).materialize()

    def view(self) -> RankItems:
        """This rank's items for the rest of the epoch (from the current position),
        computed on demand."""
        return RankItems(
            self.order(), min(self.consumed, self.epoch_items), self.rank, self.world_size,
            self.drop_last,
        )  # fmt: skip

    def items(self, start: int, stop: int) -> Order:
        """Item ids `start..stop` of this rank's rest of the epoch."""
        return self.view().items(start, stop)

    def batch(self, k: int, batch_size: int) -> Order:
        """Item ids of this rank's batch `k` (of `batch_size`) of the rest of the epoch."""
        return self.view().batch(k, batch_size)

    def indices(self) -> Order:
        """This rank's item ids for the rest of the epoch (materialised: O(items / ranks);
        `batch` and `items` compute a part)."""
        view = self.view()
        return view.items(0, len(view))

    def __iter__(self) -> Iterator[int]:
        """A pass: this rank's item ids (see the pass rules above); each item drawn
        advances the position."""
        self.begin_pass()
        return self._drain(self.view())

    def _drain(self, view: RankItems) -> Iterator[int]:
        epoch = self.epoch
        for j in range(0, len(view), _ITER_CHUNK):
            for item in view.items(j, j + _ITER_CHUNK).tolist():
                if self.epoch != epoch:  # set_epoch / load_state_dict during the pass
                    return
                self.advance(1)
                yield item
        if self.epoch == epoch:
            self.end_pass()

    def __len__(self) -> int:
        """Items of a whole epoch on this rank (torch's convention); see `remaining()`."""
        n, w = self.epoch_items, self.world_size
        return n // w if self.drop_last else -(-n // w)

    def remaining(self, consumed: int | None = None) -> int:
        """Items this rank still has in the current epoch (after `consumed` items of the
        epoch's global order: default, the current position)."""
        n, w = self.epoch_items, self.world_size
        rest = n - min(self.consumed if consumed is None else consumed, n)
        return rest // w if self.drop_last else -(-rest // w)

    # ------------------------------------------------------------------ progress

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` from its start, for the next pass.

        Setting the current epoch again keeps a position restored by `load_state_dict`
        (Lightning calls `set_epoch` after restoring a checkpoint), and it cancels the
        move to the next epoch that a finished pass would otherwise make.
        """
        check_epoch(epoch)
        self._finished = False
        if epoch != self.epoch:
            self._move(epoch, 0)
            self._resume = False

    def begin_pass(self, batch_size: int | None = None) -> None:
        """Start a pass: at the restored position after `load_state_dict`, else at the
        start of the next epoch after a finished pass, else at the start of this epoch.

        A restored position at the very end of its epoch starts the next epoch (see
        `at_epoch_end`).
        """
        if self._resume and self.at_epoch_end(batch_size):
            self._move(self.epoch + 1, 0)
        elif self._resume:
            pass
        elif self._finished:
            self._move(self.epoch + 1, 0)
        else:
            self.consumed = 0
        self._resume = self._finished = False

    def at_epoch_end(self, batch_size: int | None = None) -> bool:
        """Whether the position is at the very end of its epoch (a restored one starts the
        next epoch): no item left on this rank, or, for a loader of `batch_size` with
        `drop_last`, no whole batch (only the items `drop_last` drops)."""
        left = self.remaining()
        if batch_size is not None and self.drop_last and self.consumed and left < batch_size:
            return True
        return left == 0 and self.num_items > 0

    def end_pass(self) -> None:
        """Record that a pass delivered the rest of its epoch: the next one moves on."""
        self._finished = True

    def advance(self, items_per_rank: int) -> None:
        """Record that every rank used `items_per_rank` more items of its share."""
        self.consumed = min(self.epoch_items, self.consumed + items_per_rank * self.world_size)

    def _move(self, epoch: int, consumed: int) -> None:
        """Every change of epoch goes through here (subclasses hear of it)."""
        self.epoch = epoch
        self.consumed = consumed

    @property
    def exhausted(self) -> bool:
        """True when this epoch has no item left for this rank."""
        return self.remaining() == 0

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: seed, epoch and items of the global order consumed."""
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "num_items": self.num_items,
            "mode": self.mode,
            **({"lanes": self.lanes} if self.mode == "shard_block" else {}),
            **({"buckets": self._bucket_state()} if self.buckets is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`, also under another world size or batch size:
        the next pass starts at its position.

        The state is checked whole first (`_state.check_sampler_state`): a key missing
        or unknown, a value of another type or out of range (`0 <= consumed <=` the
        epoch's items), is refused and nothing changes. A `shard_block` state brings its
        lanes (a state saved before lanes existed: one lane), so its order goes on
        unchanged whatever the world size now.

        Raises:
            LoaderStateError: (a `ValueError`) for a state that is not a sampler state,
                one of another dataset (item count) or order, or of other `lanes` than
                this sampler was given explicitly, naming the key and its value.
        """
        self.restore(check_sampler_state(state, self))

    def restore(self, position: SamplerPosition) -> None:
        """Continue from a checked state's position (`load_state_dict` checks it)."""
        if position.lanes is not None:
            self.set_lanes(position.lanes)
        self.seed = position.seed
        self._cache = None
        self._move(position.epoch, position.consumed)
        self._resume, self._finished = True, False

    def set_lanes(self, lanes: int) -> None:
        """Go on in a restored streaming state's `lanes` (checked by `_state`); the
        epoch's order is built again."""
        self.lanes, self._cache = lanes, None

    def __repr__(self) -> str:
        return (
            f"Sampler({self.num_items} items, mode={self.mode!r}, seed={self.seed}, "
            f"epoch={self.epoch}, consumed={self.consumed}, rank={self.rank}/{self.world_size}"
            + (f", lanes={self.lanes})" if self.mode == "shard_block" else ")")
        )
