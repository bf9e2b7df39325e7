"""Loader states, checked whole when they are loaded: the one place that reads them.

A state comes back from a checkpoint, which may have been edited by hand or written
elsewhere. Every `load_state_dict` (`FerroLoader`, `Sampler` — also through torchdata's
`StatefulDataLoader` — and `FerroIterableDataset`, in the main process or in a
DataLoader worker) reads it through `check_loader_state` / `check_sampler_state`, which
refuse, before anything changes, a missing or unknown key, a value of another type
(`'16'`, `1.5`, `True` are not counts) or out of its range, and the state of another
dataset, order or worker, with a `LoaderStateError` naming the key and the value. What
they return is what the loader resumes from.

A loader's state: `{"sampler": <sampler state>, "batch_size": B}`, and, for the state of
one of `k > 1` DataLoader workers of a `FerroIterableDataset`, `worker`, `num_workers`
and `batches` (that worker's batches of the pass that began at the sampler's position),
and `first` where the pass's first batch is not worker 0's (a pass a resume began at the
start of the next epoch: DataLoader goes on with the worker after the last one it took
a batch from).
A sampler's state: `version`, `seed`, `epoch`, `consumed` (items of the epoch's global
order used, `0 ≤ consumed ≤` the epoch's items), `num_items`, `mode`, and `lanes`
(streaming) or `buckets` (bucketed batches) where its order has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ferroload_loader._checks import (
    INT64_MAX,
    MAX_EPOCH,
    MAX_SEED,
    MAX_WORKERS,
    MAX_WORLD_SIZE,
    int_expected,
    shown,
)
from ferroload_loader._errors import LoaderStateError


class Sampler(Protocol):
    """What a state is checked against: a `_sampler.Sampler`'s items, order, lanes and
    bucketing (a protocol, so that `_sampler`, which checks its states here, is not
    imported back)."""

    @property
    def mode(self) -> str: ...

    @property
    def num_items(self) -> int: ...

    @property
    def lanes(self) -> int: ...

    @property
    def _lanes_given(self) -> bool: ...

    @property
    def epoch_items(self) -> int: ...

    def _bucket_state(self) -> dict[str, Any] | None: ...

    def remaining(self, consumed: int | None = None) -> int: ...


#: The version of a sampler's state. 3: the Feistel bijections work on the next power of
#: two (2: the next even power of two; 1: the materialised orders before them): an older
#: state counted items of another order.
STATE_VERSION = 3
_SAMPLER_KEYS = frozenset({"version", "seed", "epoch", "consumed", "num_items", "mode"})
_LOADER_KEYS = frozenset({"sampler", "batch_size"})
_WORKER_KEYS = frozenset({"worker", "num_workers", "batches"})
_WORKER_OPTIONAL = frozenset({"first"})


@dataclass(frozen=True)
class SamplerPosition:
    """Where a checked sampler state resumes: its seed, epoch, items consumed, and the
    lanes of a streaming order (None for other orders)."""

    seed: int
    epoch: int
    consumed: int
    lanes: int | None


@dataclass(frozen=True)
class LoaderPosition:
    """A checked loader state: the sampler's position, the batch size that saved it,
    and for one DataLoader worker's state its number, the worker count, the batches
    it yielded and the worker that builds the pass's first batch (else 0, 1, 0, 0)."""

    sampler: SamplerPosition
    batch_size: int
    worker: int
    num_workers: int
    batches: int
    first: int = 0


def _number(state: Mapping[str, Any], key: str, path: str, low: int, high: int, why: str) -> int:
    """`state[key]`, which must be an int in `[low, high]` (`why`: what `high` is)."""
    value = state[key]
    want = int_expected(value, low, high, why=why)
    if want is not None:
        raise LoaderStateError(
            f"this loader state's {path}{key} must be {want}, got {shown(value)}",
            key=path + key,
            value=value,
        )
    return int(value)


def _keys(state: Any, required: frozenset[str], optional: frozenset[str], path: str) -> None:
    """Refuse a state that is not a mapping, lacks a required key or has another."""
    what = "a sampler state" if path else "a loader state"
    if not isinstance(state, Mapping):
        raise LoaderStateError(
            f"this loader state's {path or 'state'} must be a dict ({what}), got "
            f"{shown(state)}; pass what state_dict() returned",
            key=path.rstrip(".") or None,
            value=state,
        )
    missing = sorted(required - set(state))
    if missing:
        raise LoaderStateError(
            f"this loader state has no {path}{missing[0]} (not {what} of this loader: its "
            f"keys are {sorted(map(str, state))}); pass what state_dict() returned",
            key=path + missing[0],
        )
    unknown = sorted(map(str, set(state) - required - optional))
    if unknown:
        value = state.get(unknown[0])
        raise LoaderStateError(
            f"this loader state has an unknown key {path}{unknown[0]} (= {shown(value)}; "
            f"{what} of this loader has {sorted(required | optional)}); pass what "
            "state_dict() returned",
            key=path + unknown[0],
            value=value,
        )


def check_sampler_state(state: Any, sampler: Sampler, *, path: str = "") -> SamplerPosition:
    """The position `state` (a `Sampler.state_dict()`) resumes `sampler` at.

    Raises:
        LoaderStateError: for a state that is not a sampler state of this sampler's
            items and order, naming the key and its value.
    """
    old = state.get("version") if isinstance(state, Mapping) else None
    if type(old) is int and old in (1, 2):
        raise LoaderStateError(
            f"this sampler state ({path}version {old}) was saved by an older "
            "ferroload whose epoch orders differ from this one's: resuming it would repeat "
            "some items and skip others. Start the epoch again (set_epoch), or resume with "
            "the ferroload that saved it",
            key=path + "version",
            value=state["version"],
        )
    _keys(state, _SAMPLER_KEYS, frozenset({"lanes", "buckets"}), path)
    version = state["version"]
    if type(version) is not int or version != STATE_VERSION:
        raise LoaderStateError(
            f"unknown sampler state version: {path}version is {shown(version)} (this "
            f"ferroload writes version {STATE_VERSION})",
            key=path + "version",
            value=version,
        )
    num_items, mode = state["num_items"], state["mode"]
    if type(num_items) is not int or num_items != sampler.num_items or mode != sampler.mode:
        order = repr(mode) if isinstance(mode, str) and len(mode) < 40 else shown(mode)
        key = "mode" if type(num_items) is int and num_items == sampler.num_items else "num_items"
        raise LoaderStateError(
            f"this loader state's {path}{key} is not this sampler's: the state is for "
            f"{shown(num_items)} items in {order} order; this sampler has "
            f"{sampler.num_items} items in {sampler.mode!r} order",
            key=path + key,
            value=state[key],
        )
    _check_buckets(state.get("buckets"), sampler, path)
    lanes = None
    if sampler.mode != "shard_block" and "lanes" in state:
        raise LoaderStateError(
            f"this loader state has {path}lanes={shown(state['lanes'])}, which only a "
            f"streaming ('shard_block') order has; this sampler's order is {sampler.mode!r}",
            key=path + "lanes",
            value=state["lanes"],
        )
    if sampler.mode == "shard_block":
        # a state saved before lanes existed: one lane
        lanes = _number(state, "lanes", path, 1, MAX_WORLD_SIZE, "") if "lanes" in state else 1
        if sampler._lanes_given and lanes != sampler.lanes:
            raise LoaderStateError(
                f"this state's streaming order is dealt out in {path}lanes={lanes}; this "
                f"sampler was given lanes={sampler.lanes}. Leave lanes unset to resume it",
                key=path + "lanes",
                value=lanes,
            )
    seed = _number(state, "seed", path, 0, MAX_SEED, "")
    epoch = _number(state, "epoch", path, 0, MAX_EPOCH, "")
    items = sampler.epoch_items
    consumed = _number(state, "consumed", path, 0, items, "the items of its epoch")
    return SamplerPosition(seed, epoch, consumed, lanes)


def _check_buckets(saved: Any, sampler: Sampler, path: str) -> None:
    """Refuse a state whose bucketing differs from this sampler's (its positions count
    items of another order)."""
    mine = sampler._bucket_state()
    if saved == mine:
        return
    key = path + "buckets"
    if mine is None or saved is None:
        raise LoaderStateError(
            "this state is of a "
            + ("bucketed" if saved is not None else "plain")
            + f" order (bucket_by=; {key}); this sampler's is "
            + ("bucketed" if mine is not None else "plain")
            + ": resume with the bucket_by= and buckets= of the run that saved it",
            key=key,
            value=saved,
        )
    group = saved.get("group") if isinstance(saved, Mapping) else None
    if group != mine["group"]:
        raise LoaderStateError(
            f"this state's bucketed order ({key}) groups {shown(group)} items a batch "
            f"(batch_size x world_size); this sampler groups {mine['group']}: resume "
            "bucketed batches with the same batch size on as many ranks",
            key=key,
            value=saved,
        )
    raise LoaderStateError(
        f"this state's bucketing ({key}: {shown(saved)}) differs from this sampler's ({mine}): "
        "resume with the bucket_by=, buckets= and shuffle_buffer= of the run that saved it",
        key=key,
        value=saved,
    )


def check_loader_state(
    state: Any,
    sampler: Sampler,
    *,
    worker: tuple[int, int] | None = None,
    batch_size: int | None = None,
    drop_last: bool = False,
) -> LoaderPosition:
    """The position a loader's `state_dict()` resumes at, checked whole.

    Args:
        state: the state.
        sampler: the loader's sampler (its items, order, bucketing and lanes).
        worker: `(worker, num_workers)` of the DataLoader worker loading it; None in the
            main process, which takes no single worker's state.
        batch_size: the loader's batch size: a worker's state must have been saved with
            it (its `batches` count batches of that size).
        drop_last: whether the loader drops a last incomplete batch (a worker's
            `batches` are at most its batches of the rest of the epoch).

    Raises:
        LoaderStateError: naming the key and value at fault.
    """
    has_worker = isinstance(state, Mapping) and bool(_WORKER_KEYS & set(state))
    _keys(
        state, _LOADER_KEYS | (_WORKER_KEYS if has_worker else frozenset()),
        _WORKER_OPTIONAL if has_worker else frozenset(), "",
    )  # fmt: skip
    sampled = check_sampler_state(state["sampler"], sampler, path="sampler.")
    size = _number(state, "batch_size", "", 1, INT64_MAX, "")
    if not has_worker:
        return LoaderPosition(sampled, size, 0, 1, 0)
    workers = _number(state, "num_workers", "", 2, MAX_WORKERS, "")
    index = _number(state, "worker", "", 0, workers - 1, "below num_workers")
    if worker is None:
        raise LoaderStateError(
            f"this state (worker={index}, num_workers={workers}) is DataLoader worker "
            f"{index} of {workers}'s position; restore it "
            "with StatefulDataLoader.load_state_dict, which hands every worker its own",
            key="worker",
            value=index,
        )
    if (index, workers) != worker:
        raise LoaderStateError(
            f"this state (worker={index}, num_workers={workers}) is DataLoader worker "
            f"{index} of {workers}'s position; it cannot resume worker {worker[0]} of "
            f"{worker[1]}",
            key="worker" if workers == worker[1] else "num_workers",
            value=index if workers == worker[1] else workers,
        )
    if batch_size is not None and size != batch_size:
        raise LoaderStateError(
            f"this DataLoader worker's state counts batches of batch_size={size}; this "
            f"dataset's are of {batch_size}: resume a worker's state with the batch size "
            "that saved it",
            key="batch_size",
            value=size,
        )
    items = sampler.remaining(sampled.consumed)
    per_rank = items // size if drop_last else -(-items // size)
    first = _number(state, "first", "", 0, workers - 1, "below num_workers") if (
        "first" in state
    ) else 0  # fmt: skip
    mine = len(range((index - first) % workers, per_rank, workers))
    batches = _number(
        state, "batches", "", 0, mine, f"worker {index}'s batches of the rest of its epoch"
    )
    return LoaderPosition(sampled, size, index, workers, batches, first)
