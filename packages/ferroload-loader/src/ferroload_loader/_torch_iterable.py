"""`FerroIterableDataset` and `FerroBatch`: whole batches for `DataLoader` workers.

Public as `ferroload_loader.torch.FerroIterableDataset` and
`ferroload_loader.torch.FerroBatch` (their `__module__`, so pickles and docs name that
path). The pass records the workers share live in `_torch_shared`, the per-process
source and fields in `_torch_process`.
"""

from __future__ import annotations

import copy
import logging
import os
import secrets
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Unpack

import torch
import torch.utils.data

from ferroload_loader._augment import BatchTransform
from ferroload_loader._batch import (
    IndexWindow,
    finish_batch,
    prepare_batch,
    window_options,
)
from ferroload_loader._checks import MAX_WORKERS, check_epoch
from ferroload_loader._fields import OnError, item_seeds
from ferroload_loader._loader import to_torch
from ferroload_loader._options import LoaderKeywords, LoaderOptions, make_sampler, take_options
from ferroload_loader._prefetch import BatchItems
from ferroload_loader._sampler import RankItems
from ferroload_loader._state import check_loader_state
from ferroload_loader._torch_process import TORCH_REFUSED, PerProcess
from ferroload_loader._torch_shared import (
    Passes,
    SharedRing,
    forget_rings,
    pack,
    resume_tag,
)

logger = logging.getLogger(__name__)

#: How long a restored DataLoader worker whose share of the epoch is done waits for the
#: worker that builds the epoch's last batch to say whether it delivered it.
SETTLE_TIMEOUT_S = 60


class FerroBatch(dict[str, Any]):
    """A whole batch from `FerroIterableDataset` (a dict of column -> tensor or list).

    `default_collate` refuses it: a `DataLoader` with its default `batch_size=1` (or any
    batch size) would wrap every batch in another one.
    """

    __module__ = "ferroload_loader.torch"

    def __copy__(self) -> FerroBatch:
        return FerroBatch(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> FerroBatch:
        return FerroBatch(copy.deepcopy(dict(self), memo))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickling only (copies have their own methods: `pack` counts what it sends):
        # in a DataLoader worker, ring slots as their numbers, small tensors inline
        if torch.utils.data.get_worker_info() is None:
            return FerroBatch, (dict(self),)
        return FerroBatch, ({k: pack(v) for k, v in self.items()},)


def _refuse_collate(batch: Any, *, collate_fn_map: Any = None) -> Any:
    first = batch[0]
    n = len(first.get("sample_id", ()))
    raise TypeError(
        f"FerroIterableDataset yields whole batches (of {n} samples here), and DataLoader "
        f"was asked to batch {len(batch)} of them again: pass batch_size=None, as in "
        "DataLoader(ds, batch_size=None, num_workers=...); the dataset's own batch_size "
        "sets the batch"
    )


torch.utils.data._utils.collate.default_collate_fn_map[FerroBatch] = _refuse_collate


class FerroIterableDataset(PerProcess, torch.utils.data.IterableDataset[dict[str, Any]]):
    """Whole batches for `DataLoader(ds, batch_size=None, num_workers=k)`.

    It yields the batches `make_loader(..., out="torch")` yields, in the same order,
    whatever `k`: worker `w` of `k` builds only batches `w, w+k, w+2k, …` of this rank's
    epoch, and DataLoader takes them from the workers round-robin. Use `batch_size=None`
    in the DataLoader: the dataset batches (a batch is a `FerroBatch`, which
    `default_collate` refuses, so a DataLoader left at its default `batch_size=1` fails
    loudly instead of nesting batches).

    **Passes and epochs** follow torch's conventions, as for `make_loader`: every
    `iter(dataloader)` starts at the beginning of the current epoch; a pass that ran to
    the end moves the next one to the next epoch by itself; `ds.set_epoch(epoch)` wins
    (call it in the main process; the position lives in shared memory, so it reaches the
    workers, persistent ones too). `len(ds)` is a whole epoch's batches on this rank.

    **Resume.** With torchdata's `StatefulDataLoader`, `dl.state_dict()` after any batch
    and `load_state_dict` on a new loader continue exactly after that batch, for any
    `num_workers` (the same count on resume): each worker reports its own position. A
    state saved after an epoch's last batch, before the loop has seen the end of the
    pass, resumes with the next epoch from its start, with workers or without: the
    restored workers agree (through shared memory) that the epoch was consumed.
    Without workers, `ds.state_dict()` is `make_loader`'s state (either can load the
    other's) and `ds.load_state_dict(state)` makes the next pass continue after it, also
    under another batch size or world size.

    It takes the options of `make_loader` (see `LoaderOptions`), as keywords or as
    `options=LoaderOptions(...)`; `batch_size` is required. `transform` runs in the
    worker that built the batch, and per-sample failures follow `on_error` (with
    `warn`, logged by that worker). Decode `threads` per DataLoader worker default to
    the CPUs divided by `k`. It refuses `out` (it yields tensors), `pin_memory` and
    `prefetch_bytes` (DataLoader's own replace them), `readahead_bytes` and `cache`.

    Args:
        source: a dataset URI, a `Dataset` (or subset view), or `mix(...)`.
        options: every option at once, as a `LoaderOptions` (then no keyword options).
        **keywords: the options of `LoaderOptions` (`batch_size`, `images`, `meta`,
            `shuffle`, `seed`, `streaming`, `lanes`, `rank`, `world_size`, ...).

    Raises:
        ColumnNotFoundError: for a field the dataset lacks.
        TypeError: for an option it does not take, or both `options` and keywords.
        ValueError: for invalid options.

    Examples:
        >>> from ferroload_format import Writer
        >>> from torch.utils.data import DataLoader
        >>> with Writer("memory://docs/torch-iterable", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i})
        >>> ds = FerroIterableDataset("memory://docs/torch-iterable", batch_size=4,
        ...                           meta=["label"], seed=0)
        >>> dl = DataLoader(ds, batch_size=None)
        >>> it = iter(dl)
        >>> first = next(it)
        >>> len(ds), first["label"].shape
        (3, torch.Size([4]))
        >>> state = ds.state_dict()             # after the one batch received
        >>> resumed = FerroIterableDataset("memory://docs/torch-iterable", batch_size=4,
        ...                                meta=["label"], seed=0)
        >>> resumed.load_state_dict(state)
        >>> [b["sample_id"] for b in DataLoader(resumed, batch_size=None)] == [
        ...     b["sample_id"] for b in it]
        True
    """

    __module__ = "ferroload_loader.torch"

    def __init__(
        self,
        source: Any,
        *,
        options: LoaderOptions | None = None,
        **keywords: Unpack[LoaderKeywords],
    ) -> None:
        o = take_options("FerroIterableDataset", options, keywords, refused=TORCH_REFUSED)
        assert o.batch_size is not None  # take() requires it
        self.transform = None if o.transform is None else BatchTransform(o.transform)
        resolved = self._init_source(source, o)
        self.batch_size = o.batch_size
        self.drop_last = o.drop_last
        self.on_error: OnError = o.on_error
        self._sampler = make_sampler(resolved, o)
        self._passes = Passes(o.seed)
        # names this dataset's batch rings; the main process forgets them with it
        self._uid = secrets.token_hex(8)
        weakref.finalize(self, forget_rings, self._uid + ":")
        # a position restored inside a DataLoader worker (torchdata restores every
        # worker's own): (seed, epoch, consumed, batches to skip, first worker)
        self._local: tuple[int, int, int, int, int] | None = None
        # this process's pass: (seed, epoch, consumed at its start, batches yielded,
        # the worker that builds its first batch)
        self._pass: list[int] | None = None

    # ------------------------------------------------------------------ position

    def _order(self, seed: int, epoch: int, consumed: int) -> tuple[int, RankItems]:
        """This rank's batches of `epoch` from position `consumed` (whole batches only
        with `drop_last`): their count, and the rank's items computed on demand."""
        s = self._sampler
        if s.seed != seed:
            s.seed, s._cache = seed, None
        s.epoch, s.consumed = epoch, consumed
        view = s.view()
        b = self.batch_size
        count = len(view) // b if self.drop_last else -(-len(view) // b)
        return count, view

    def _at_end(self, seed: int, epoch: int, consumed: int) -> bool:
        """Whether a restored position is at the very end of its epoch (it then starts
        the next one): `Sampler.at_epoch_end`, `make_loader`'s rule."""
        self._order(seed, epoch, consumed)  # the sampler at that position
        return self._sampler.at_epoch_end(self.batch_size)

    def _plan(self, worker: int, workers: int, *, begin: bool) -> tuple[int, int, int, int, int]:
        """`(seed, epoch, consumed, batches to skip, first worker)` where this worker's
        next pass starts (see `Sampler` for the rules); with `begin`, start it. The
        pass's batch `j` is built by worker `(first + j) % workers`: `first` is 0 but in
        a pass that a resume began at the start of the next epoch (`_settle_epoch_end`)."""
        if self._local is not None:  # checked against this worker when it was loaded
            seed, epoch, consumed, skip, first = self._local
            if begin:
                self._local = None
                self._passes.record(worker, epoch, finished=False)
            return seed, epoch, consumed, skip, first
        p = self._passes
        seed, epoch, consumed, token = p.head()
        if p.seen(worker) != token:  # the first pass after load_state_dict
            if self._at_end(seed, epoch, consumed):
                epoch, consumed = epoch + 1, 0  # restored at the very end: the next epoch
        else:
            consumed = 0
            passes = p.passes(workers)
            if passes:
                epoch = max(e for e, _ in passes)
                if len(passes) == workers and all(f and e == epoch for e, f in passes):
                    epoch += 1
        if begin:
            p.see(worker, token)
            p.record(worker, epoch, finished=False)
        return seed, epoch, consumed, 0, 0

    @staticmethod
    def _worker() -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > MAX_WORKERS:
            raise ValueError(
                f"FerroIterableDataset supports at most {MAX_WORKERS} DataLoader workers, "
                f"got {info.num_workers}"
            )
        return (info.id, info.num_workers) if info is not None else (0, 1)

    @property
    def epoch(self) -> int:
        """The epoch of the current (or last) pass; a finished pass moves on only when the
        next one begins."""
        if self._pass is not None:
            return self._pass[1]
        passes = self._passes.passes(MAX_WORKERS)
        return max(e for e, _ in passes) if passes else self._passes.head()[1]

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._sampler.rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._sampler.world_size

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` from its start for the next pass (the current epoch
        again keeps a position restored by `load_state_dict`). Call it in the main
        process, between passes; it reaches the workers, persistent ones too."""
        check_epoch(epoch)
        p = self._passes
        seed, current, _, token = p.head()
        if epoch == current and p.seen(0) != token:  # keep a restored position
            p.clear_records()
        else:
            p.set_head(seed, epoch, 0, resume=False)

    def __len__(self) -> int:
        """Batches of a whole epoch on this rank (torch's convention; what DataLoader
        reports with `batch_size=None`)."""
        n = len(self._sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The position after the batches this process has yielded in its current pass.

        In the main process (no DataLoader workers) it is `make_loader`'s state (either
        can load the other's). Inside a DataLoader worker it is that worker's own
        position, which torchdata's `StatefulDataLoader` gathers from every worker after
        every batch and hands back to the same worker on resume: use
        `StatefulDataLoader` to checkpoint a `DataLoader` with workers. A worker's state
        has `first`, the worker that builds the pass's first batch, when that is not
        worker 0 (a pass that a resume began at the start of the next epoch).

        Raises:
            RuntimeError: in the main process while DataLoader workers are part-way
                through a pass (only the workers know how far they are).
        """
        worker, workers = self._worker()
        # in the main process: did it run the last pass itself, or nobody since the
        # position was set? (a worker knows its own pass)
        mine = torch.utils.data.get_worker_info() is not None or self._passes.runner in (
            0, os.getpid(),
        )  # fmt: skip
        first = 0
        if self._pass is not None and mine and self._passes.runner != 0:
            seed, epoch, consumed, batches, first = self._pass
        elif mine:
            seed, epoch, consumed, batches, first = self._plan(worker, workers, begin=False)
        else:  # DataLoader workers ran the last pass: known only once they finished it
            passes = self._passes.passes(MAX_WORKERS)
            if not passes or not all(f and e == passes[0][0] for e, f in passes):
                raise RuntimeError(
                    "this dataset's pass runs in DataLoader workers, which alone know how "
                    "far it got: checkpoint with torchdata's StatefulDataLoader "
                    "(dl.state_dict() gathers every worker's position)"
                )
            seed, epoch, consumed, batches = self._passes.head()[0], passes[0][0], 0, 0
            consumed = self._sampler.epoch_items  # the end of that epoch
        sampler = copy.copy(self._sampler)
        sampler.seed, sampler.epoch, sampler.consumed = seed, epoch, consumed
        if workers == 1:
            count, view = self._order(seed, epoch, consumed)
            items = len(view) if not self.drop_last else count * self.batch_size
            sampler.advance(min(batches * self.batch_size, items))
            return {"sampler": sampler.state_dict(), "batch_size": self.batch_size}
        state = {
            "sampler": sampler.state_dict(), "batch_size": self.batch_size,
            "worker": worker, "num_workers": workers, "batches": batches,
        }  # fmt: skip
        if first:
            state["first"] = first
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after a `state_dict()` (of this class or of `make_loader`): the next
        pass starts there.

        In the main process the batch size and world size may differ from the run that
        saved it. Inside a DataLoader worker (torchdata's `StatefulDataLoader` restores
        each worker's own state) the worker count and batch size must be the same, and a
        state saved after the epoch's last batch starts the next epoch once the workers
        agree that it was consumed (`_settle_epoch_end`). The
        state is checked whole before anything changes (`_state.check_loader_state`):
        inside a worker, `StatefulDataLoader` raises the error when its iterator starts,
        before any batch.

        Raises:
            LoaderStateError: (a `ValueError`) for a key missing or unknown, a value of
                another type or out of range, a state of another dataset or order, one
                worker's state loaded outside a DataLoader worker or by another worker,
                naming the key and its value.
        """
        worker = self._worker() if torch.utils.data.get_worker_info() is not None else None
        pos = check_loader_state(
            state, self._sampler, worker=worker, batch_size=self.batch_size,
            drop_last=self.drop_last,
        )  # fmt: skip
        at = pos.sampler
        if at.lanes is not None:  # a streaming state's order goes on in its own lanes
            self._sampler.set_lanes(at.lanes)
        if worker is not None:
            local = (at.seed, at.epoch, at.consumed, pos.batches, pos.first)
            self._local = self._settle_epoch_end(*worker, local)
        else:
            self._passes.set_head(at.seed, at.epoch, at.consumed, resume=True)

    def _settle_epoch_end(
        self, worker: int, workers: int, local: tuple[int, int, int, int, int]
    ) -> tuple[int, int, int, int, int]:
        """Where this worker's restored pass starts: `local`, or the start of the next
        epoch when the restored state was saved after the epoch's last batch.

        DataLoader delivers the workers' batches in order, so the epoch was consumed
        exactly when the worker that builds its last batch (the owner) has delivered
        it, and only the owner's own state tells. The owner decides alone and says so
        in shared memory, tagged with this resume (`resume_tag`: a word an earlier
        resume of this dataset left there does not count); any other worker whose share
        is done waits for that word (the workers restore side by side as they start, so
        the wait is short) and follows it; a worker that still has batches to build
        knows the epoch is not consumed. In the next epoch DataLoader goes on with the
        worker after the owner: that worker builds the first batch. Without the owner's
        word within `SETTLE_TIMEOUT_S` (an owner that restored no state), a worker warns
        and keeps its restored position: an empty pass, as before the workers agreed.
        """
        seed, epoch, consumed, skip, first = local
        if workers == 1:  # its state is the loader's: `_plan`'s rule for the main process
            return (seed, epoch + 1, 0, 0, 0) if self._at_end(seed, epoch, consumed) else local
        count, _ = self._order(seed, epoch, consumed)
        if not count:
            return local
        owner = (first + count - 1) % workers
        # this worker builds batches at, at + k, ... < count of the pass; done: all sent
        done = (worker - first) % workers + skip * workers >= count
        tag = resume_tag(worker)
        if tag is None:  # no tag to tell this resume's word from an older one
            return local
        consumed_all: bool | None = done
        if worker == owner:
            self._passes.publish_share(worker, tag, done=done)
        elif not done:
            return local
        else:
            consumed_all = self._passes.share_done(owner, tag)
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while consumed_all is None and time.monotonic() < deadline:
                time.sleep(0.005)
                consumed_all = self._passes.share_done(owner, tag)
            if consumed_all is None:
                logger.warning(
                    "DataLoader worker %d of %d: worker %d, which builds the last batch "
                    "of epoch %d, did not restore its state within %d s; this worker "
                    "resumes with an empty pass (out of step with that worker if it "
                    "had delivered the epoch's last batch)",
                    worker, workers, owner, epoch, SETTLE_TIMEOUT_S,
                )  # fmt: skip
                return local
        if not consumed_all:
            return local
        return seed, epoch + 1, 0, 0, (owner + 1) % workers

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass: this worker's batches of the epoch, from the position the pass rules
        give (see `Sampler`)."""
        worker, workers = self._worker()
        source, fields = self._runtime()
        if torch.utils.data.get_worker_info() is not None:
            self._use_rings(fields, worker)
        seed, epoch, consumed, skip, first = self._plan(worker, workers, begin=True)
        count, view = self._order(seed, epoch, consumed)
        self._pass = [seed, epoch, consumed, skip, first]
        at = (worker - first) % workers  # this worker's first batch of the pass
        mine = range(at + skip * workers, count, workers)  # this worker's batches
        # each computed once (for the index window ahead, kept until the batch is built)
        batch_of = BatchItems(view, self.batch_size, len(mine), first=mine.start, stride=workers)

        # the index entries of this worker's upcoming batches, read together
        most, growth = window_options(self._sampler.mode)
        window = IndexWindow(source, fields, batch_of, len(mine), max_items=most, growth=growth)
        for i in range(len(mine)):
            chunk = batch_of(i)
            state = prepare_batch(
                source, fields, chunk, seed=seed, epoch=epoch, window=window, index=i
            )
            batch_of.forget(i)
            batch, _ = finish_batch(state, fields, on_error=self.on_error)
            out = to_torch(batch, pin=False)
            if self.transform is not None:
                out = self.transform(out, item_seeds(seed, epoch, chunk))
            self._pass[3] += 1
            yield FerroBatch(out)
        self._passes.record(worker, epoch, finished=True)

    def _use_rings(self, fields: list[Any], worker: int) -> None:
        """Decode this worker's batches into shared memory (`SharedRing`), once."""
        for f in fields:
            if hasattr(f, "_buffers") and not isinstance(f._buffers, SharedRing):
                f._buffers = SharedRing(f"{self._uid}:{worker}:{f.name}")

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        sampler = copy.copy(self._sampler)
        sampler._cache = None  # the epoch's order: rebuilt on demand in each process
        state["_sampler"] = sampler
        state["_local"] = state["_pass"] = None  # a worker starts its own passes
        return state

    def __repr__(self) -> str:
        names = [f.name for f in self._runtime()[1]]
        return (
            f"FerroIterableDataset({len(self)} batches of {self.batch_size}, "
            f"columns={names}, {self._sampler!r})"
        )
