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

import copy
import operator
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from ferroload_core import available_cpus
from ferroload_format import Dataset
from ferroload_loader._augment import BatchTransform, Layout, Normalize
from ferroload_loader._batch import (
    IndexWindow,
    build_batch,
    finish_batch,
    item_seeds,
    prepare_batch,
    window_options,
)
from ferroload_loader._fields import ColumnSpec, Crop, Field, OnError, build_fields
from ferroload_loader._loader import check_state, make_sampler, to_torch
from ferroload_loader._order import DEFAULT_SHUFFLE_BUFFER
from ferroload_loader._sampler import RankItems, Sampler
from ferroload_loader._source import Mixture, ResolvedSource, resolve_source

if TYPE_CHECKING:
    from ferroload_format import Manifest
    from ferroload_store import Store

__all__ = ["FerroBatch", "FerroIterableDataset", "FerroTorchDataset"]

_INT64 = (-(1 << 63), 1 << 63)


# ---------------------------------------------------------------------- portable source


@dataclass(frozen=True)
class _DatasetRef:
    """What reopens a dataset (or view) in another process: same version, same rows."""

    store: Store
    manifest: Manifest
    rows: npt.NDArray[np.int64] | None
    verify_checksums: bool

    @classmethod
    def of(cls, ds: Dataset) -> _DatasetRef:
        return cls(ds.store, ds.manifest, ds._rows, ds._verify)

    def open(self) -> Dataset:
        # a fresh Store: no file descriptors, locks or object-store clients from the parent
        return Dataset(
            copy.copy(self.store),
            self.manifest,
            rows=self.rows,
            verify_checksums=self.verify_checksums,
        )


@dataclass(frozen=True)
class _SourceRef:
    """A `ResolvedSource` in picklable form (`where=` already applied: rows are kept)."""

    datasets: tuple[_DatasetRef, ...]
    weights: tuple[float, ...] | None
    num_samples: int

    @classmethod
    def of(cls, source: ResolvedSource) -> _SourceRef:
        mixture = source.mixture
        return cls(
            tuple(_DatasetRef.of(d) for d in source.datasets),
            None if mixture is None else tuple(mixture.weights.tolist()),
            source.num_items,
        )

    def open(self) -> ResolvedSource:
        datasets = [d.open() for d in self.datasets]
        if self.weights is None:
            return resolve_source(datasets[0])
        return resolve_source(Mixture(datasets, list(self.weights), num_samples=self.num_samples))


class _SharedInts:
    """A few int64s in shared memory: set in the main process, read by DataLoader workers,
    persistent ones included (forked or spawned: torch shares the storage)."""

    def __init__(self, *values: int) -> None:
        t = torch.tensor(values, dtype=torch.int64)
        self._t = t.share_memory_()  # type: ignore[no-untyped-call]

    def set(self, *values: int) -> None:
        self._t[: len(values)] = torch.tensor(values, dtype=torch.int64)

    def get(self) -> list[int]:
        return [int(v) for v in self._t.tolist()]


#: DataLoader workers an iterable dataset keeps pass records for.
MAX_WORKERS = 256


class _Passes:
    """Where the passes of a `FerroIterableDataset` start, shared by all its processes.

    The main process writes the head (seed, epoch, position, resume token) in
    `set_epoch` and `load_state_dict`, between passes. Each DataLoader worker `w` (the
    main process is worker 0 of 1) writes only its own two slots: the resume token it
    has used, and the epoch of the last pass it began with whether it finished it
    (`2·epoch + 1`, `+1` when finished; 0 for none since the head was last set). So a
    pass's start is a pure function of this table, and every worker of a pass finds
    the same one without locks. The process id of whoever began the last pass tells
    the main process whether it knows the position itself.
    """

    SEED, EPOCH, CONSUMED, TOKEN, RUNNER, HEAD = 0, 1, 2, 3, 4, 5

    def __init__(self, seed: int) -> None:
        self._t = torch.zeros(self.HEAD + 2 * MAX_WORKERS, dtype=torch.int64)
        self._t[self.SEED] = seed
        self._t.share_memory_()  # type: ignore[no-untyped-call]

    def head(self) -> tuple[int, int, int, int]:
        seed, epoch, consumed, token = self._t[: self.RUNNER].tolist()
        return int(seed), int(epoch), int(consumed), int(token)

    @property
    def runner(self) -> int:
        """The process id that began the last pass since the head was set (0: none)."""
        return int(self._t[self.RUNNER])

    def set_head(self, seed: int, epoch: int, consumed: int, *, resume: bool) -> None:
        """A new position; `resume` makes the next pass of every worker start there."""
        token = self.head()[3]
        self._t[: self.HEAD] = torch.tensor([seed, epoch, consumed, token + resume, 0])
        if not resume:  # a pending resume is cancelled too
            self._t[self.HEAD : self.HEAD + MAX_WORKERS] = token
        self.clear_records()

    def clear_records(self) -> None:
        """Forget the workers' passes: the next pass starts the head's epoch."""
        self._t[self.HEAD + MAX_WORKERS :] = 0

    def seen(self, worker: int) -> int:
        return int(self._t[self.HEAD + worker])

    def see(self, worker: int, token: int) -> None:
        self._t[self.HEAD + worker] = token

    def record(self, worker: int, epoch: int, *, finished: bool) -> None:
        self._t[self.HEAD + MAX_WORKERS + worker] = 2 * epoch + 1 + finished
        if not finished:
            self._t[self.RUNNER] = os.getpid()

    def passes(self, workers: int) -> list[tuple[int, bool]]:
        """(epoch, finished) of the last pass of each worker that began one."""
        slots = self._t[self.HEAD + MAX_WORKERS : self.HEAD + MAX_WORKERS + workers].tolist()
        return [((v - 1) // 2, (v - 1) % 2 == 1) for v in slots if v > 0]


def _check_seed(seed: int) -> int:
    if not isinstance(seed, int) or not _INT64[0] <= seed < _INT64[1]:
        raise ValueError(f"seed must be an int that fits in 64 bits, got {seed!r}")
    return seed


class FerroBatch(dict[str, Any]):
    """A whole batch from `FerroIterableDataset` (a dict of column -> tensor or list).

    `default_collate` refuses it: a `DataLoader` with its default `batch_size=1` (or any
    batch size) would wrap every batch in another one.
    """


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


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip", "warn"):
        raise ValueError(f"on_error must be raise, skip or warn, got {on_error!r}")


def _spec(
    images: ColumnSpec,
    audio: ColumnSpec,
    video: ColumnSpec,
    meta: Sequence[str],
    resize: int | tuple[int, int] | None,
    crop: Crop,
    image_output: Mapping[str, Any],
) -> dict[str, Any]:
    """The field options of `build_fields`, as plain (picklable) containers.

    `image_output` holds the augmentation and output options of images (`hflip`,
    `layout`, `dtype`, `normalize`), which `build_fields` checks.
    """

    def plain(spec: ColumnSpec) -> ColumnSpec:
        if isinstance(spec, str):  # build_fields says why not
            return spec
        if isinstance(spec, Mapping):
            return {k: dict(v or {}) for k, v in spec.items()}
        return tuple(spec)

    return {
        "images": plain(images), "audio": plain(audio), "video": plain(video),
        "meta": meta if isinstance(meta, str) else tuple(meta), "resize": resize, "crop": crop,
        **image_output,
    }  # fmt: skip


def _worker_threads(threads: int | None) -> int | None:
    """Decode threads for this process: `threads`, else the CPUs shared out among the
    DataLoader workers (inside one), else None (the loader default: every CPU)."""
    if threads is not None:
        return threads
    info = torch.utils.data.get_worker_info()
    if info is None:
        return None
    return max(1, available_cpus() // max(1, info.num_workers))


class _PerProcess:
    """The source and fields of a dataset, built once per process.

    The main process builds them in `__init__` (to check the options and know the
    length); a pickled copy drops them, and a forked copy notices the new process id;
    either rebuilds them on first use from the picklable `_ref` and `_spec`.
    """

    _state: tuple[ResolvedSource, list[Field]] | None
    _pid: int | None

    def _init_source(
        self,
        source: Any,
        *,
        where: str | None,
        storage_options: Mapping[str, Any] | None,
        threads: int | None,
        spec: dict[str, Any],
    ) -> ResolvedSource:
        resolved = resolve_source(source, where=where, storage_options=storage_options)
        fields = build_fields(resolved, threads=threads, **spec)
        self._ref = _SourceRef.of(resolved)
        self._spec = spec
        self._threads = threads
        self._state = (resolved, fields)
        self._pid = os.getpid()
        return resolved

    def _runtime(self) -> tuple[ResolvedSource, list[Field]]:
        if self._state is None or self._pid != os.getpid():
            resolved = self._ref.open()
            fields = build_fields(resolved, threads=_worker_threads(self._threads), **self._spec)
            self._state = (resolved, fields)
            self._pid = os.getpid()
        return self._state

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"] = None
        state["_pid"] = None
        return state


# ---------------------------------------------------------------------- map-style


class FerroTorchDataset(_PerProcess, torch.utils.data.Dataset[dict[str, Any]]):
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

    Args:
        source: a dataset URI, a `Dataset` (or subset view), or `mix(...)`.
        images: image modalities to decode (names, or name -> `ImageDecoder` options).
        audio: audio modalities (name -> `AudioDecoder` options; `length` is required).
        video: video modalities (name -> `decode_video` options; `num_frames`, `size`).
        meta: metadata columns.
        resize: output `(height, width)` (or an int) of images and video frames.
        crop: `None` stretches, `"center"` crops, `"pad"` pads, `"random"` or a
            `RandomResizedCrop` crops at random (see `make_loader`).
        hflip: the probability of a horizontal flip of each image.
        layout: `"NHWC"` (default) or `"NCHW"` (a sample's image is then CHW).
        dtype: images as uint8 (default), float32, float16 or bfloat16 (floats in
            [0, 1], or normalised).
        normalize: `(mean, std)` per channel on the [0, 1] scale.
        where: a SQL WHERE clause over the index (see `Dataset.subset`).
        threads: decode threads per process (default: the CPUs, shared out among the
            DataLoader workers).
        on_error: `raise`, or leave failed samples out of their batch (`skip`, `warn`:
            also logged, from the worker that decoded them). `ds[i]` of a failed sample
            raises whatever `on_error` is: it has nothing to return.
        seed: seeds per-sample random choices (image crops and flips, audio crops, video
            clips) with the epoch, as `make_loader(seed=...)` does; `ds.sampler()` uses
            it for the order too. A per-batch `transform` belongs in DataLoader's
            `collate_fn` here (or use `FerroIterableDataset(transform=...)`).
        storage_options: for URIs, as in `Dataset.open`.

    Raises:
        ColumnNotFoundError: for a field the dataset lacks.
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
        images: ColumnSpec = (),
        audio: ColumnSpec = (),
        video: ColumnSpec = (),
        meta: Sequence[str] = (),
        resize: int | tuple[int, int] | None = None,
        crop: Crop = None,
        hflip: float = 0.0,
        layout: Layout = "NHWC",
        dtype: Any = None,
        normalize: Normalize | None = None,
        where: str | None = None,
        threads: int | None = None,
        on_error: OnError = "raise",
        seed: int = 0,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        _check_on_error(on_error)
        output = {"hflip": hflip, "layout": layout, "dtype": dtype, "normalize": normalize}
        spec = _spec(images, audio, video, meta, resize, crop, output)
        resolved = self._init_source(
            source, where=where, storage_options=storage_options, threads=threads, spec=spec
        )
        self.on_error: OnError = on_error
        self._num_items = int(sum(len(d) for d in resolved.datasets))
        self._seed_epoch = _SharedInts(_check_seed(seed), 0)

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
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self._seed_epoch.set(self.seed, epoch)

    def sampler(
        self,
        *,
        shuffle: bool = True,
        streaming: bool = False,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> Sampler:
        """The `Sampler` `make_loader` would use with these options, for `DataLoader`.

        It orders items by this dataset's `seed` (as `make_loader(seed=...)` does), and
        its `set_epoch` also calls this dataset's `set_epoch`. Pass `drop_last=True` to
        the DataLoader too, to drop a last incomplete batch as `make_loader` does.

        Its options (`shuffle`, `streaming`, `shuffle_buffer`, `drop_last`, `rank`,
        `world_size`) are those of `make_loader`.
        """
        resolved, _ = self._runtime()
        base = make_sampler(
            resolved, shuffle=shuffle, seed=self.seed,
            streaming=streaming, shuffle_buffer=shuffle_buffer, drop_last=drop_last,
            rank=rank, world_size=world_size,
        )  # fmt: skip
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

    def __init__(self, base: Sampler, seed_epoch: _SharedInts) -> None:
        # adopts the state of a configured sampler (no second validation of its options)
        self.__dict__.update(base.__dict__)
        self._dataset_epoch = seed_epoch

    def _move(self, epoch: int, consumed: int) -> None:
        super()._move(epoch, consumed)
        self._dataset_epoch.set(self.seed, epoch)


# ---------------------------------------------------------------------- iterable


class FerroIterableDataset(_PerProcess, torch.utils.data.IterableDataset[dict[str, Any]]):
    """Whole batches for `DataLoader(ds, batch_size=None, num_workers=k)`.

    It yields the batches `make_loader(..., out="torch")` yields, in the same order,
    whatever `k`: worker `w` of `k` builds only batches `w, w+k, w+2k, …` of this rank's
    epoch, and DataLoader takes them from the workers round-robin. Use `batch_size=None`
    in the DataLoader: the dataset batches (a batch is a `FerroBatch`, which
    `default_collate` refuses, so a DataLoader left at its default `batch_size=1` fails
    loudly instead of nesting batches). DataLoader's own `pin_memory` and
    `prefetch_factor` replace `make_loader`'s `pin_memory` and `prefetch_bytes`.

    **Passes and epochs** follow torch's conventions, as for `make_loader`: every
    `iter(dataloader)` starts at the beginning of the current epoch; a pass that ran to
    the end moves the next one to the next epoch by itself; `ds.set_epoch(epoch)` wins
    (call it in the main process; the position lives in shared memory, so it reaches the
    workers, persistent ones too). `len(ds)` is a whole epoch's batches on this rank.

    **Resume.** With torchdata's `StatefulDataLoader`, `dl.state_dict()` after any batch
    and `load_state_dict` on a new loader continue exactly after that batch, for any
    `num_workers` (the same count on resume): each worker reports its own position.
    Without workers, `ds.state_dict()` is `make_loader`'s state (either can load the
    other's) and `ds.load_state_dict(state)` makes the next pass continue after it, also
    under another batch size or world size.

    The options `images`, `audio`, `video`, `meta`, `resize`, `crop`, `hflip`,
    `layout`, `dtype`, `normalize`, `transform` (run in the worker that built the
    batch), `where`, `streaming`, `shuffle_buffer`, `on_error` and `storage_options` are
    those of `make_loader`. Decode threads per DataLoader worker default to the CPUs divided by
    `k`. Per-sample
    failures follow `on_error` as in `make_loader` (with `warn`, logged by the worker).

    Args:
        source: a dataset URI, a `Dataset` (or subset view), or `mix(...)`.
        batch_size: samples per batch on this rank.
        shuffle: a new permutation every epoch (else dataset order).
        seed: with the epoch, fixes the order.
        drop_last: drop the last, incomplete batch; else ranks are padded by wrapping.
        threads: decode threads per process (default: the CPUs, shared out among the
            DataLoader workers).
        rank: this process's rank (default: torch.distributed, else `RANK`, else 0).
        world_size: the number of ranks (default: torch.distributed, else
            `WORLD_SIZE`, else 1).

    Raises:
        ColumnNotFoundError: for a field the dataset lacks.
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

    def __init__(
        self,
        source: Any,
        *,
        batch_size: int,
        images: ColumnSpec = (),
        audio: ColumnSpec = (),
        video: ColumnSpec = (),
        meta: Sequence[str] = (),
        resize: int | tuple[int, int] | None = None,
        crop: Crop = None,
        hflip: float = 0.0,
        layout: Layout = "NHWC",
        dtype: Any = None,
        normalize: Normalize | None = None,
        transform: Callable[..., Any] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        where: str | None = None,
        threads: int | None = None,
        streaming: bool = False,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        on_error: OnError = "raise",
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        _check_on_error(on_error)
        _check_seed(seed)
        output = {"hflip": hflip, "layout": layout, "dtype": dtype, "normalize": normalize}
        spec = _spec(images, audio, video, meta, resize, crop, output)
        self.transform = None if transform is None else BatchTransform(transform)
        resolved = self._init_source(
            source, where=where, storage_options=storage_options, threads=threads, spec=spec
        )
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.on_error: OnError = on_error
        self._sampler = make_sampler(
            resolved, shuffle=shuffle, seed=seed, streaming=streaming,
            shuffle_buffer=shuffle_buffer, drop_last=drop_last, rank=rank,
            world_size=world_size,
        )  # fmt: skip
        self._passes = _Passes(seed)
        # a position restored inside a DataLoader worker (torchdata restores every
        # worker's own): (seed, epoch, consumed, batches to skip, worker, workers)
        self._local: tuple[int, int, int, int, int, int] | None = None
        # this process's pass: (seed, epoch, consumed at its start, batches yielded)
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

    def _plan(self, worker: int, workers: int, *, begin: bool) -> tuple[int, int, int, int]:
        """`(seed, epoch, consumed, batches to skip)` where this worker's next pass
        starts (see `Sampler` for the rules); with `begin`, start it."""
        if self._local is not None:
            seed, epoch, consumed, skip, w, k = self._local
            if k > 1 and (w, k) != (worker, workers):
                raise ValueError(
                    f"this state is DataLoader worker {w} of {k}'s position; it cannot "
                    f"resume worker {worker} of {workers}"
                )
            if begin:
                self._local = None
                self._passes.record(worker, epoch, finished=False)
            return seed, epoch, consumed, skip
        p = self._passes
        seed, epoch, consumed, token = p.head()
        if p.seen(worker) != token:  # the first pass after load_state_dict
            if consumed >= self._sampler.num_items and self._sampler.num_items:
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
        return seed, epoch, consumed, 0

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
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
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
        `StatefulDataLoader` to checkpoint a `DataLoader` with workers.

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
        if self._pass is not None and mine and self._passes.runner != 0:
            seed, epoch, consumed, batches = self._pass
        elif mine:
            seed, epoch, consumed, batches = self._plan(worker, workers, begin=False)
        else:  # DataLoader workers ran the last pass: known only once they finished it
            passes = self._passes.passes(MAX_WORKERS)
            if not passes or not all(f and e == passes[0][0] for e, f in passes):
                raise RuntimeError(
                    "this dataset's pass runs in DataLoader workers, which alone know how "
                    "far it got: checkpoint with torchdata's StatefulDataLoader "
                    "(dl.state_dict() gathers every worker's position)"
                )
            seed, epoch, consumed, batches = self._passes.head()[0], passes[0][0], 0, 0
            consumed = self._sampler.num_items  # the end of that epoch
        sampler = copy.copy(self._sampler)
        sampler.seed, sampler.epoch, sampler.consumed = seed, epoch, consumed
        if workers == 1:
            count, view = self._order(seed, epoch, consumed)
            items = len(view) if not self.drop_last else count * self.batch_size
            sampler.advance(min(batches * self.batch_size, items))
            return {"sampler": sampler.state_dict(), "batch_size": self.batch_size}
        return {
            "sampler": sampler.state_dict(), "batch_size": self.batch_size,
            "worker": worker, "num_workers": workers, "batches": batches,
        }  # fmt: skip

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after a `state_dict()` (of this class or of `make_loader`): the next
        pass starts there.

        In the main process the batch size and world size may differ from the run that
        saved it. Inside a DataLoader worker (torchdata's `StatefulDataLoader` restores
        each worker's own state) the worker count must be the same.

        Raises:
            ValueError: when the state belongs to another dataset or order, or is one
                worker's state loaded outside a DataLoader worker.
        """
        in_worker = torch.utils.data.get_worker_info() is not None
        workers = check_state(state, worker_states=in_worker)
        check = copy.copy(self._sampler)
        check.load_state_dict(dict(state["sampler"]))  # validates: same items and order
        seed, epoch, consumed = _check_seed(check.seed), check.epoch, check.consumed
        if in_worker:
            batches = int(state.get("batches", 0)) if workers > 1 else 0
            self._local = (seed, epoch, consumed, batches, int(state.get("worker", 0)), workers)
        else:
            self._passes.set_head(seed, epoch, consumed, resume=True)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass: this worker's batches of the epoch, from the position the pass rules
        give (see `Sampler`)."""
        worker, workers = self._worker()
        source, fields = self._runtime()
        seed, epoch, consumed, skip = self._plan(worker, workers, begin=True)
        count, view = self._order(seed, epoch, consumed)
        self._pass = [seed, epoch, consumed, skip]
        b = self.batch_size
        mine = range(worker + skip * workers, count, workers)  # this worker's batches

        def batch_of(i: int) -> npt.NDArray[np.int64]:
            return view.batch(mine[i], b)

        # the index entries of this worker's upcoming batches, read together
        most, growth = window_options(self._sampler.mode)
        window = IndexWindow(source, fields, batch_of, len(mine), max_items=most, growth=growth)
        for i in range(len(mine)):
            chunk = batch_of(i)
            state = prepare_batch(
                source, fields, chunk, seed=seed, epoch=epoch, window=window, index=i
            )
            batch, _ = finish_batch(state, fields, on_error=self.on_error)
            out = to_torch(batch, pin=False)
            if self.transform is not None:
                out = self.transform(out, item_seeds(seed, epoch, chunk))
            self._pass[3] += 1
            yield FerroBatch(out)
        self._passes.record(worker, epoch, finished=True)

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
