"""Adapters for `torch.utils.data`: a map-style and an iterable dataset.

Importing this module imports torch (the `torch` extra); `ferroload_loader` itself never
does. `make_loader` needs no worker processes; these adapters are for code built around
`torch.utils.data.DataLoader`:

- `FerroTorchDataset`: map-style, one decoded sample per index; with DataLoader's
  auto-batching it reads and decodes a whole batch at once (`__getitems__`). Use it with
  a `Sampler` (`ds.sampler()`) for the deterministic ferroload order.
- `FerroIterableDataset`: whole batches, the same sequence as `make_loader` whatever the
  number of DataLoader workers (`DataLoader(ds, batch_size=None, num_workers=k)`).

Both pickle without their heavy state (open datasets, decoders, thread pools), which
every process builds for itself on first use, so they work with forked and spawned
workers alike. The dataset version is pinned: workers read the version the main process
opened, even if a newer one is committed meanwhile. `memory://` datasets live in one
process, so spawned workers cannot read them (forked ones can).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

try:
    import torch
    import torch.utils.data
except ImportError as exc:  # exercised without torch (tests/test_torch_missing.py)
    raise ImportError(
        f"ferroload_loader.torch needs torch ({exc}): pip install 'ferroload-loader[torch]' "
        "(or pip install torch)"
    ) from exc

from ferroload_loader._batch import build_batch
from ferroload_loader._checks import check_epoch
from ferroload_loader._fields import OnError
from ferroload_loader._options import (
    LoaderKeywords,
    LoaderOptions,
    SamplerKeywords,
    make_sampler,
    take_options,
)
from ferroload_loader._sampler import Sampler
from ferroload_loader._torch_iterable import FerroBatch, FerroIterableDataset
from ferroload_loader._torch_process import TORCH_REFUSED, PerProcess
from ferroload_loader._torch_shared import SharedInts

__all__ = ["FerroBatch", "FerroIterableDataset", "FerroTorchDataset"]

#: Options the map-style dataset refuses, and what to do instead.
_MAP_REFUSED = {
    **TORCH_REFUSED,
    "batch_size": "it yields single samples: DataLoader(batch_size=...) batches them",
    "transform": "a per-batch transform belongs in DataLoader's collate_fn here (or use "
    "FerroIterableDataset(transform=...))",
    "bucket_by": "it yields single samples, which DataLoader batches: bucketed batches come "
    "from FerroIterableDataset(bucket_by=...) or make_loader(bucket_by=...)",
    "buckets": "it yields single samples, which DataLoader batches: bucketed batches come "
    "from FerroIterableDataset(buckets=...) or make_loader(buckets=...)",
}


class FerroTorchDataset(PerProcess, torch.utils.data.Dataset[dict[str, Any]]):
    """A map-style torch dataset of decoded samples.

    `ds[i]` is one sample: a dict with `sample_id` (str), each image as a uint8 HWC
    tensor, each audio / video field as a tensor, numeric metadata as 0-d tensors and
    other metadata as Python values (a `<name>_present` bool tensor for modalities some
    samples lack). With DataLoader's auto-batching (`batch_size=B`), torch calls
    `__getitems__` with the indices of a batch: they are read with coalesced requests
    and decoded together on the thread pool, and `default_collate` then stacks the
    samples into the batch `make_loader(..., out="torch")` would give.

    The order is the sampler's: `ds.sampler(...)` returns the `Sampler` that
    `make_loader` would use for the same options (any `Sampler(len(ds), ...)` works too
    for a single dataset), so `DataLoader(ds, batch_size=B, sampler=ds.sampler())` with
    `seed=s` yields the same batches as `make_loader(..., batch_size=B, seed=s)`, whatever
    `num_workers`. The sampler follows torch's pass conventions (each `iter` starts the
    current epoch; a finished pass moves to the next epoch; `set_epoch` wins) and passes
    every epoch on to the dataset (see `set_epoch`). It advances as DataLoader draws
    from it, so torchdata's `StatefulDataLoader` resumes exactly after the last batch
    delivered, with or without workers.

    Decode threads per DataLoader worker default to the CPUs divided by `num_workers`.

    It takes the options of `make_loader` (see `LoaderOptions`), as keywords or as
    `options=LoaderOptions(...)`: what a sample holds (`images`, `meta`, `resize`,
    `crop`, ...), `where`, `threads` (per process; default: the CPUs, shared out among
    the DataLoader workers), `on_error` (`ds[i]` of a failed sample raises whatever
    `on_error` is: it has nothing to return) and `seed`, which seeds per-sample random
    choices (image crops and flips, audio crops, video clips) with the epoch, as
    `make_loader(seed=...)` does. The order options (`shuffle`, `seed`, `streaming`,
    `shuffle_buffer`, `lanes`, `drop_last`, `rank`, `world_size`) are those of
    `ds.sampler()`, which may override them. It refuses `batch_size` (DataLoader
    batches), `transform` (it belongs in DataLoader's `collate_fn` here, or use
    `FerroIterableDataset(transform=...)`), `out`, `pin_memory`, `prefetch_bytes`,
    `readahead_bytes` and `cache`.

    Args:
        source: a dataset URI, a `Dataset` (or subset view), or `mix(...)`.
        options: every option at once, as a `LoaderOptions` (then no keyword options).
        **keywords: the options of `LoaderOptions`: what a sample holds, `where`,
            `threads`, `on_error`, `seed`, and the defaults of `sampler()`.

    Raises:
        ColumnNotFoundError: for a field the dataset lacks.
        TypeError: for `batch_size`, `transform` or another option it does not take
            (see above), or both `options` and keywords.
        ValueError: for invalid options.

    Examples:
        >>> from ferroload_format import Writer
        >>> from torch.utils.data import DataLoader
        >>> with Writer("memory://docs/torch-map", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i})
        >>> ds = FerroTorchDataset("memory://docs/torch-map", meta=["label"])
        >>> len(ds), ds[3]["label"], ds[3]["sample_id"]
        (10, tensor(3), 's3')
        >>> sampler = ds.sampler()
        >>> dl = DataLoader(ds, batch_size=4, sampler=sampler)
        >>> sampler.set_epoch(0)
        >>> [b["label"].shape[0] for b in dl]
        [4, 4, 2]
    """

    def __init__(
        self,
        source: Any,
        *,
        options: LoaderOptions | None = None,
        **keywords: Unpack[LoaderKeywords],
    ) -> None:
        o = take_options(
            "FerroTorchDataset", options, keywords, refused=_MAP_REFUSED, needs_batch_size=False
        )
        resolved = self._init_source(source, o)
        self.on_error: OnError = o.on_error
        self._num_items = int(sum(len(d) for d in resolved.datasets))
        self._seed_epoch = SharedInts(o.seed, 0)
        # the defaults of `sampler()` (what reopens the source is kept apart)
        self._options = dataclasses.replace(o, storage_options=None)

    @property
    def seed(self) -> int:
        """The seed of per-sample random choices."""
        return self._seed_epoch.get()[0]

    @property
    def epoch(self) -> int:
        """The epoch of per-sample random choices."""
        return self._seed_epoch.get()[1]

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for per-sample random choices (audio crops, video clips).

        The sampler from `ds.sampler()` calls this from its own `set_epoch`. The epoch
        lives in shared memory, so DataLoader workers see it, persistent ones too.
        """
        check_epoch(epoch)
        self._seed_epoch.set(self.seed, epoch)

    def sampler(self, **overrides: Unpack[SamplerKeywords]) -> Sampler:
        """The `Sampler` `make_loader` would use with this dataset's options, for
        `DataLoader`.

        It orders items by this dataset's `seed` (as `make_loader(seed=...)` does), and
        its `set_epoch` also calls this dataset's `set_epoch`. Pass `drop_last=True` to
        the DataLoader too, to drop a last incomplete batch as `make_loader` does.

        Args:
            **overrides: order options of `LoaderOptions` that replace the dataset's for
                this sampler: `shuffle`, `streaming`, `shuffle_buffer`, `lanes`,
                `drop_last`, `rank`, `world_size`.

        Raises:
            TypeError: for another keyword.
        """
        for name in overrides:
            if name not in SamplerKeywords.__annotations__:
                raise TypeError(f"sampler() got an unexpected keyword argument {name!r}")
        resolved, _ = self._runtime()
        base = make_sampler(resolved, dataclasses.replace(self._options, **overrides))
        self._seed_epoch.set(self.seed, base.epoch)
        return _LinkedSampler(base, self._seed_epoch)

    def __len__(self) -> int:
        """Items in the dataset (all datasets of a mixture: the ids `__getitem__` takes)."""
        return self._num_items

    def _items(self, indices: Sequence[int]) -> npt.NDArray[np.int64]:
        items = np.asarray([operator.index(i) for i in indices], dtype=np.int64)
        n = self._num_items
        bad = (items < -n) | (items >= n)
        if bad.any():
            raise IndexError(
                f"index {int(items[bad][0])} is out of range for {n} samples of "
                f"{', '.join(d.uri for d in self._runtime()[0].datasets)}"
            )
        return np.where(items < 0, items + n, items)

    def _decode(self, items: npt.NDArray[np.int64], on_error: OnError) -> list[dict[str, Any]]:
        source, fields = self._runtime()
        seed, epoch = self._seed_epoch.get()
        batch, errors = build_batch(
            source, fields, items, seed=seed, epoch=epoch, on_error=on_error
        )
        n = len(batch["sample_id"])
        if n == 0 and errors:
            err = errors[0]
            err.add_note(
                f"every sample of this batch ({len(items)}) failed to decode; a map-style "
                "batch cannot be empty"
            )
            raise err
        columns = {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()
        }
        return [{k: v[j] for k, v in columns.items()} for j in range(n)]

    def __getitem__(self, index: int) -> dict[str, Any]:
        """One decoded sample (raises on a decode failure whatever `on_error` is)."""
        return self._decode(self._items([index]), "raise")[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The decoded samples of one batch, decoded together (failed ones left out
        with `on_error` "skip"/"warn"); DataLoader calls it when auto-batching."""
        return self._decode(self._items(indices), self.on_error)

    def __repr__(self) -> str:
        names = [f.name for f in self._runtime()[1]]
        return f"FerroTorchDataset({self._num_items} samples, columns={names})"


class _LinkedSampler(Sampler):
    """A `Sampler` that passes every change of epoch (`set_epoch`, a finished pass,
    `load_state_dict`) on to its dataset (per-sample random choices)."""

    def __init__(self, base: Sampler, seed_epoch: SharedInts) -> None:
        # adopts the state of a configured sampler (no second validation of its options)
        self.__dict__.update(base.__dict__)
        self._dataset_epoch = seed_epoch

    def _move(self, epoch: int, consumed: int) -> None:
        super()._move(epoch, consumed)
        self._dataset_epoch.set(self.seed, epoch)
