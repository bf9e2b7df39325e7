"""Building one batch: ids, coalesced reads, parallel decoding, failures, collation."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_loader._fields import BatchState, Field, OnError
from ferroload_loader._source import ResolvedSource

logger = logging.getLogger(__name__)

_MASK64 = (1 << 64) - 1


def item_seeds(seed: int, epoch: int, items: npt.NDArray[np.int64]) -> list[int]:
    """A seed per item for its random choices (image crops and flips, audio crops, video
    clips, a transform's generator): a pure function of (seed, epoch, item), so an item
    gets the same crop whoever decodes it."""
    x = (np.asarray(items, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & _MASK64)) ^ (
        np.uint64((epoch * 0xBF58476D1CE4E5B9) & _MASK64)
    )
    # splitmix64 finaliser
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return [int(v) for v in x.tolist()]


def prepare_batch(
    source: ResolvedSource,
    fields: Sequence[Field],
    items: npt.NDArray[np.int64],
    *,
    seed: int,
    epoch: int,
) -> BatchState:
    """The reading half of a batch: ids, seeds, payload views and metadata columns."""
    sample_ids: list[str] = [""] * len(items)
    for d, slots, pos in source.split(items):
        ids = source.datasets[d].column("sample_id", pos).to_pylist()
        for k, sid in zip(slots.tolist(), ids, strict=True):
            sample_ids[k] = sid
    batch = BatchState(
        items=items,
        sample_ids=sample_ids,
        seeds=item_seeds(seed, epoch, items),
        ok=np.ones(len(items), dtype=np.bool_),
    )
    for f in fields:
        f.prepare(batch, source)
    return batch


def finish_batch(
    batch: BatchState,
    fields: Sequence[Field],
    *,
    on_error: OnError,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """The decoding half: decode into the batch arrays, then leave failed items out.

    `meanwhile` runs in this thread while the decode pool's other threads work on the
    first decoded column (or after the columns, when none uses the pool); it must not
    raise.

    Returns:
        The batch (column name -> array or list; `sample_id` always) and the errors of the
        items left out (with `on_error` "skip" or "warn").

    Raises:
        DecodeError: the first failure, with `on_error="raise"`.
    """
    batch.meanwhile = meanwhile
    for f in fields:
        f.fill(batch)
    leftover = batch.take_meanwhile()
    if leftover is not None:
        leftover()
    columns: dict[str, Any] = {"sample_id": batch.sample_ids, **batch.columns}
    errors: list[Any] = []
    if not batch.ok.all():
        if on_error == "raise":
            raise batch.errors[0]
        keep = np.flatnonzero(batch.ok)
        if on_error == "warn":
            for err in batch.errors:
                logger.warning("left a sample out of its batch: %s", err)
        columns = {k: _take(v, keep) for k, v in columns.items()}
        errors = list(batch.errors)
    for f in fields:
        f.finish(columns)
    return columns, errors


def build_batch(
    source: ResolvedSource,
    fields: Sequence[Field],
    items: npt.NDArray[np.int64],
    *,
    seed: int,
    epoch: int,
    on_error: OnError,
) -> tuple[dict[str, Any], list[Any]]:
    """Read and decode the items of one batch (`prepare_batch`, then `finish_batch`)."""
    state = prepare_batch(source, fields, items, seed=seed, epoch=epoch)
    return finish_batch(state, fields, on_error=on_error)


def _take(values: Any, keep: npt.NDArray[np.int64]) -> Any:
    if isinstance(values, np.ndarray):
        return values[keep]
    return [values[i] for i in keep.tolist()]
