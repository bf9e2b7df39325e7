"""The loader spellings of ferroload-rs 0.1.1 (`ferroload.loader`, `ferroload_loader` and
`ferroload.Sampler` there), on this project's format, codec and sampler.

What each 0.1.1 name does here:

- `FerroTorchDataset(ds, images=, videos=, arrays=, raw=, meta=, columns=, resize=,
  video_resize=, num_frames=, out=)` works as it did: one dict per sample, without
  `sample_id`, with `<m>` and `<m>_present` per modality, images as uint8 HWC numpy
  arrays resized to 0.1.1's default `(224, 224)`, raw payloads as `bytes`, `.npy`
  payloads as arrays, absent payloads as None, `out="numpy"` by default. It reads with
  `ferroload_format.Dataset` and decodes with `ferroload_codec`, whose pixels may differ
  by a few levels from 0.1.1's decoder; it warns, naming 0.2's
  `ferroload_loader.torch.FerroTorchDataset` (torch tensors, `sample_id`, no default
  resize). A name the dataset lacks is a `ColumnNotFoundError` (0.1.1 gave None).
- `FerroIterableDataset` yields samples, as in 0.1.1 (0.2's yields whole batches), in
  this project's streaming order (shards shuffled, then windows of `shuffle_buffer`
  items), not 0.1.1's; it warns.
- `FerroSampler`, and `Sampler(total, world_size, rank, num_workers, worker_id, seed,
  shuffle, shuffle_block)` with `.indices(epoch, resume_from)`: 0.1.1's disjoint,
  deterministic, resumable shares of a `(world_size x num_workers)` grid, over this
  project's permutation of each (seed, epoch), which is not 0.1.1's: they warn.
  `Sampler` is a subclass of `ferroload_loader.Sampler`: its keyword form is 0.2's,
  unchanged and silent.
- `batched`, `numpy_collate`, `PrefetchLoader`, `subset_dataset` work as they did, and
  warn.
- `make_loader(root, 64, columns=..., raw=..., prefetch=2, ...)` (a batch size given by
  position, an argument 0.2 does not have, or no `batch_size`) builds 0.1.1's
  `FerroLoader` (numpy batches by default, without `sample_id`), and warns; every other
  call is `ferroload_loader.make_loader`'s, unchanged.
"""

from __future__ import annotations

import importlib
import inspect
import io
import operator
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

import ferroload_loader
from ferroload.compat import deprecated
from ferroload_codec import ImageDecoder, decode_video
from ferroload_format import ColumnNotFoundError, Dataset
from ferroload_loader import LoaderOptionError

if TYPE_CHECKING:
    from ferroload_loader._order import EpochOrder

__all__ = [
    "FerroIterableDataset",
    "FerroLoader",
    "FerroSampler",
    "FerroTorchDataset",
    "PrefetchLoader",
    "Sampler",
    "batched",
    "make_loader",
    "numpy_collate",
    "sample_dataset",
    "subset_dataset",
]

Out = Literal["numpy", "torch", "jax"]
Size = tuple[int, int]
#: `resize` of 0.1.1: one `(height, width)` for every decoded column, None (native size),
#: or a size (or None) per column.
Resize = Size | Sequence[int] | Mapping[str, Size | Sequence[int] | None] | None
Sample = dict[str, Any]

#: What the 0.1.1 loaders' defaults are, said in every warning about them.
_DEFAULTS_011 = (
    "it keeps 0.1.1's samples: numpy unless out='torch', where 0.2 gives torch tensors; "
    "images resized to (224, 224) unless resize= says otherwise, where 0.2 asks for "
    "resize=; no sample_id; raw payloads as bytes, None where absent; pixels decoded by "
    "ferroload_codec, which may differ by a few levels from 0.1.1's decoder"
)
#: What the 0.1.1 orders became, said in every warning about them.
_ORDER_011 = (
    "the order of a (seed, epoch) is not 0.1.1's: another permutation, so a 0.1.1 resume "
    "position does not carry over; shuffle_block is ignored"
)


# --------------------------------------------------------------------------- sources


def _open(source: Any, cache_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """The dataset a 0.1.1 call names: a `ferroload_format.Dataset` (or view) as it is,
    or a local path or URI, opened (with a block cache in `cache_dir` when given)."""
    if isinstance(source, Dataset):
        return source
    if isinstance(source, str | os.PathLike):
        if cache_dir is None:
            return Dataset.open(source)
        from ferroload_store import BlockCache

        return Dataset.open(source, cache=BlockCache.default(cache_dir))
    raise TypeError(f"expected a ferroload Dataset, a path or a URI, got {type(source).__name__}")


def _indices(indices: Iterable[Any]) -> npt.NDArray[np.int64]:
    return np.asarray([operator.index(i) for i in indices], dtype=np.int64)


# --------------------------------------------------------------------------- samples


def _size(value: Any, what: str) -> Size | None:
    """A checked `(height, width)` (or None)."""
    if value is None:
        return None
    try:
        h, w = (operator.index(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be (height, width) with both > 0, got {value!r}") from None
    if h <= 0 or w <= 0:
        raise ValueError(f"{what} must be (height, width) with both > 0, got {value!r}")
    return (h, w)


def _resolve_columns(ds: Dataset, columns: Sequence[str]) -> tuple[list[str], ...]:
    """0.1.1's `columns=`: each name bucketed by what the dataset says it is: an image or
    video modality is decoded, an `npy` one loaded as an array, any other modality
    passed as bytes, and a name that is no modality is a metadata column."""
    hints = {m.name: m.codec_hint for m in ds.modalities}
    images: list[str] = []
    videos: list[str] = []
    arrays: list[str] = []
    raw: list[str] = []
    meta: list[str] = []
    for c in columns:
        hint = hints.get(c, "<meta>")
        {"<meta>": meta, "image": images, "video": videos, "npy": arrays}.get(hint, raw).append(c)
    return images, videos, arrays, raw, meta


def _meta_values(arr: pa.Array) -> Sequence[Any]:
    """A metadata column's values as 0.1.1 gave them: numbers and flags as numpy scalars,
    anything else (strings, nulls) as Python values."""
    t = arr.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if numeric and arr.null_count == 0:
        return cast(Sequence[Any], arr.to_numpy(zero_copy_only=False))
    return cast(Sequence[Any], arr.to_pylist())


def _load_npy(payload: Any) -> npt.NDArray[Any] | None:
    if payload is None:
        return None
    return cast("npt.NDArray[Any]", np.load(io.BytesIO(payload), allow_pickle=False))


def _convert(sample: Sample, out: Out) -> Sample:
    """The sample's arrays as torch tensors or jax arrays (scalars and the rest as they
    are)."""
    if out == "torch":
        import torch

        return {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in sample.items()
        }
    jnp = importlib.import_module("jax.numpy")  # an optional dependency (no stubs needed)
    return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in sample.items()}


class FerroTorchDataset:
    """ferroload-rs 0.1.1's per-sample dataset (deprecated; see `ferroload.compat`).

    `ds[i]` (and `__getitems__(indices)`, which `torch.utils.data.DataLoader` calls with a
    batch's indices) is one dict per sample, in this key order: each image modality
    (uint8 HWC array, resized), each video (uint8 THWC), each `.npy` array, each raw
    payload (`bytes`), each with `<name>_present`; then each metadata value (numbers as
    numpy scalars). A sample that lacks a modality has None there and
    `<name>_present=False`. There is no `sample_id`. Pass it to a `DataLoader` (its
    `collate_fn` batches) or to `PrefetchLoader`.

    0.2's map-style dataset is `ferroload_loader.torch.FerroTorchDataset(source,
    images=..., meta=..., resize=(h, w))`: torch tensors, with `sample_id`, and no
    default resize.

    Args:
        fds: a `ferroload.Dataset` (or view), a local path or a URI.
        images: image modalities to decode (resized to `resize`).
        videos: video modalities to decode to `num_frames` frames (resized to
            `video_resize`, by default `resize`; `video_resize=False` keeps their size),
            chosen uniformly over the clip by `ferroload_codec.decode_video`.
        raw: modalities to return as `bytes`.
        meta: metadata columns.
        arrays: `.npy` modalities, loaded as arrays.
        columns: names of any kind, bucketed by the dataset's modalities (image and
            video ones decode, `npy` ones load, other modalities are raw bytes, other
            names metadata), added to the lists above.
        resize: `(height, width)` of every decoded column, None for their own size, or
            a dict of column -> `(height, width)` or None.
        video_resize: see `videos`.
        num_frames: frames per video.
        out: `numpy` (default), `torch` or `jax`.

    Raises:
        ColumnNotFoundError: for a modality or metadata column the dataset lacks (0.1.1
            returned None for it).
        ValueError: for an `out` or size it does not take.
    """

    def __init__(
        self,
        fds: Any,
        images: Sequence[str] | None = None,
        videos: Sequence[str] | None = None,
        raw: Sequence[str] | None = None,
        meta: Sequence[str] | None = None,
        arrays: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        resize: Resize = (224, 224),
        video_resize: Size | Sequence[int] | Literal[False] | None = None,
        num_frames: int = 16,
        out: str = "numpy",
        **unexpected: Any,
    ) -> None:
        if unexpected:
            name = next(iter(unexpected))
            raise TypeError(
                f"FerroTorchDataset() got an unexpected keyword argument {name!r}: this is "
                "ferroload-rs 0.1.1's dataset; 0.2's, with audio=, video=, crop= and the "
                "other options of make_loader, is ferroload_loader.torch.FerroTorchDataset"
            )
        deprecated(
            "FerroTorchDataset(ds, images=..., raw=..., resize=...)",
            "ferroload_loader.torch.FerroTorchDataset(source, images=..., meta=..., "
            "resize=(h, w)), or make_loader(source, batch_size=..., out='numpy')",
            why=_DEFAULTS_011,
        )
        self._setup(
            fds, images, videos, raw, meta, arrays, columns, resize, video_resize, num_frames,
            out,
        )  # fmt: skip

    def _setup(
        self,
        fds: Any,
        images: Sequence[str] | None = None,
        videos: Sequence[str] | None = None,
        raw: Sequence[str] | None = None,
        meta: Sequence[str] | None = None,
        arrays: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        resize: Resize = (224, 224),
        video_resize: Size | Sequence[int] | Literal[False] | None = None,
        num_frames: int = 16,
        out: str = "numpy",
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if out not in ("numpy", "torch", "jax"):
            raise ValueError("out must be 'numpy', 'torch', or 'jax'")
        ds = _open(fds, cache_dir)
        self.fds = ds
        self.images = list(images or [])
        self.videos = list(videos or [])
        self.arrays = list(arrays or [])
        self.raw = list(raw or [])
        self.meta = list(meta or [])
        if columns:
            ci, cv, ca, cr, cm = _resolve_columns(ds, columns)
            self.images += ci
            self.videos += cv
            self.arrays += ca
            self.raw += cr
            self.meta += cm
        self.resize = resize
        if isinstance(resize, Mapping):
            self._sizes = {k: _size(v, f"resize[{k!r}]") for k, v in resize.items()}
            self._size: Size | None = None
        else:
            self._sizes = {}
            self._size = _size(resize, "resize")
        self.video_resize: Size | None
        if video_resize is False:
            self.video_resize = None
        elif isinstance(resize, Mapping) or video_resize is not None:
            self.video_resize = _size(video_resize or None, "video_resize")
        else:
            self.video_resize = self._size
        self.num_frames = operator.index(num_frames)
        if self.num_frames < 1:
            raise ValueError(f"num_frames must be > 0, got {num_frames!r}")
        self.out = cast(Out, out)
        modalities = {m.name for m in ds.modalities}
        for name in (*self.images, *self.videos, *self.arrays, *self.raw):
            if name not in modalities:
                raise ColumnNotFoundError(
                    f"{ds.uri} has no modality {name!r}; it has "
                    f"{', '.join(sorted(modalities)) or 'none'} (ferroload-rs 0.1.1 "
                    "returned None for it)",
                    uri=ds.uri,
                    column=name,
                )
        for name in self.meta:
            if name not in ds.metadata_columns:
                raise ColumnNotFoundError(
                    f"{ds.uri} has no metadata column {name!r}; it has "
                    f"{', '.join(ds.metadata_columns) or 'none'} (ferroload-rs 0.1.1 "
                    "returned None for it)",
                    uri=ds.uri,
                    column=name,
                )
        self._decoders: dict[Size | None, ImageDecoder] = {}

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers build their own decoders (thread pools do not pickle)
        return {**self.__dict__, "_decoders": {}}

    def _image_size(self, name: str) -> Size | None:
        return self._sizes.get(name) if isinstance(self.resize, Mapping) else self._size

    def _video_size(self, name: str) -> Size | None:
        if isinstance(self.resize, Mapping) and name in self._sizes:
            return self._sizes[name]
        return self.video_resize

    def _decoder(self, size: Size | None) -> ImageDecoder:
        dec = self._decoders.get(size)
        if dec is None:
            dec = self._decoders[size] = ImageDecoder(size)
        return dec

    def _decode_images(self, name: str, idx: npt.NDArray[np.int64]) -> list[Any]:
        payloads = self.fds.read(idx, name, copy=False)
        found = [k for k, p in enumerate(payloads) if p is not None]
        out: list[Any] = [None] * len(payloads)
        if not found:
            return out
        size = self._image_size(name)
        dec = self._decoder(size)
        if size is None:  # each at its own size
            for k in found:
                out[k] = dec.decode(cast(Any, payloads[k]))
            return out
        decoded = dec.decode_batch([cast(Any, payloads[k]) for k in found]).images
        for j, k in enumerate(found):
            out[k] = decoded[j]
        return out

    def _decode_videos(self, name: str, idx: npt.NDArray[np.int64]) -> list[Any]:
        size = self._video_size(name)
        return [
            None if p is None else decode_video(p, num_frames=self.num_frames, size=size)
            for p in self.fds.read(idx, name, copy=False)
        ]

    def __len__(self) -> int:
        """Samples in the dataset."""
        return len(self.fds)

    def __getitem__(self, i: int) -> Sample:
        """The sample at position `i` (negative counts from the end)."""
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Iterable[int]) -> list[Sample]:
        """The samples at `indices`, read together: one dict each, in the order given."""
        idx = _indices(indices)
        if not len(idx):
            return []
        ds = self.fds
        cols: dict[str, Sequence[Any]] = {}
        for name in self.images:
            cols[name] = self._decode_images(name, idx)
        for name in self.videos:
            cols[name] = self._decode_videos(name, idx)
        for name in self.arrays:
            cols[name] = [_load_npy(p) for p in ds.read(idx, name, copy=False)]
        for name in self.raw:
            cols[name] = ds.read(idx, name)
        metas = {name: _meta_values(ds.column(name, idx)) for name in self.meta}
        modalities = [*self.images, *self.videos, *self.arrays, *self.raw]
        samples: list[Sample] = []
        for k in range(len(idx)):
            s: Sample = {}
            for name in modalities:
                value = cols[name][k]
                s[name] = value
                s[f"{name}_present"] = value is not None
            for name, values in metas.items():
                s[name] = values[k]
            samples.append(s if self.out == "numpy" else _convert(s, self.out))
        return samples

    def __repr__(self) -> str:
        names = [*self.images, *self.videos, *self.arrays, *self.raw, *self.meta]
        return f"FerroTorchDataset({len(self)} samples, columns={names}, out={self.out!r})"


def sample_dataset(fds: Any, **config: Any) -> FerroTorchDataset:
    """A 0.1.1 `FerroTorchDataset` made without a warning, for compat code that warns
    itself (0.1.1's `Dataset.torch()`, `.numpy()`, `.jax()` views take its keyword
    arguments and `out=`)."""
    tds = FerroTorchDataset.__new__(FerroTorchDataset)
    tds._setup(fds, **config)
    return tds


class _IndexRemap:
    """`subset_dataset` without torch: `indices` of `base`, batched reads kept."""

    def __init__(self, base: Any, indices: list[int]) -> None:
        self.base = base
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.base[self.indices[i]]

    def __getitems__(self, idx: Iterable[int]) -> Any:
        return self.base.__getitems__([self.indices[k] for k in idx])


def subset_dataset(tds: Any, indices: Iterable[int]) -> Any:
    """ferroload-rs 0.1.1's restriction of a dataset to `indices` (deprecated): a
    `torch.utils.data.Subset` when torch is installed, else a small wrapper; both keep
    the batched `__getitems__`."""
    deprecated(
        "subset_dataset(tds, indices)",
        "a view of the dataset, ds.take(indices) or ds.subset(where), given to the loader "
        "(or torch.utils.data.Subset)",
    )
    picked = [int(i) for i in indices]
    try:
        from torch.utils.data import Subset
    except ImportError:
        return _IndexRemap(tds, picked)
    return Subset(tds, picked)


# --------------------------------------------------------------------------- order


class Sampler(ferroload_loader.Sampler):
    """`ferroload_loader.Sampler`, which also takes ferroload-rs 0.1.1's form.

    Called as 0.2's `Sampler(num_items, *, shuffle=, seed=, rank=, world_size=, ...)`,
    it is `ferroload_loader.Sampler`, unchanged and without a warning. Called as 0.1.1's
    `Sampler(total, world_size=1, rank=0, num_workers=1, worker_id=0, seed=0,
    shuffle=True, shuffle_block=1024)` (more than one argument by position, or one of
    `total=`, `num_workers=`, `worker_id=`, `shuffle_block=`), it warns and is the
    sampler of cell `rank * num_workers + worker_id` of a `world_size x num_workers`
    grid, whose `indices(epoch, resume_from)` is 0.1.1's: that cell's item ids of the
    epoch (positions `cell, cell + cells, ...` of the epoch's global order: shares
    disjoint and together complete, unequal by one at most, never padded), from its
    `resume_from`-th on, as a list. The global order is this project's permutation of
    `(seed, epoch)` (`shuffle_block` is ignored), not 0.1.1's, so a 0.1.1 resume
    position does not carry over.

    `indices(epoch, resume_from)` works on a sampler of either form (it warns on one of
    0.2's form, where `indices()` without arguments is 0.2's).
    """

    _rs011 = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) <= 1 and not _RS011_ONLY & kwargs.keys():
            super().__init__(*args, **kwargs)
            return
        try:
            bound = _RS011_SIGNATURE.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"Sampler(): {exc}; ferroload-rs 0.1.1's form is Sampler(total, world_size, "
                "rank, num_workers, worker_id, seed, shuffle, shuffle_block), 0.2's "
                "Sampler(num_items, *, shuffle=, seed=, rank=, world_size=, ...)"
            ) from None
        bound.apply_defaults()
        deprecated(
            "Sampler(total, world_size, rank, num_workers, worker_id, seed, shuffle, "
            "shuffle_block) with indices(epoch, resume_from)",
            "Sampler(num_items, rank=..., world_size=..., seed=..., shuffle=...): iterate "
            "it, or take sampler.batch(k, batch_size); set_epoch(epoch) and "
            "state_dict()/load_state_dict() resume (DataLoader workers are split by the "
            "loader)",
            stacklevel=3,
            why=_ORDER_011,
        )
        self._grid(**bound.arguments)

    def _grid(
        self,
        total: int,
        world_size: int = 1,
        rank: int = 0,
        num_workers: int = 1,
        worker_id: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_block: int = 1024,
    ) -> None:
        """0.1.1's form: cell `rank * num_workers + worker_id` of the grid (0 ranks or
        workers count as 1, as in 0.1.1)."""
        world = operator.index(world_size) or 1
        workers = operator.index(num_workers) or 1
        operator.index(shuffle_block)
        for what, value, bound in (
            ("rank", rank, world),
            ("worker_id", worker_id, workers),
        ):
            if operator.index(value) < 0 or value >= bound:
                limit = "world_size" if what == "rank" else "num_workers"
                raise LoaderOptionError(
                    f"{what} must be < {limit} (and >= 0), got {what}={value!r} of {bound}",
                    option=what,
                    value=value,
                )
        super().__init__(
            total, shuffle=shuffle, seed=seed, rank=rank * workers + worker_id,
            world_size=world * workers,
        )  # fmt: skip
        self._rs011 = True

    @classmethod
    def _quiet(cls, total: int, **grid: Any) -> Sampler:
        """A sampler of 0.1.1's form, made without a warning (for `FerroSampler`)."""
        s = cls.__new__(cls)
        s._grid(total, **grid)
        return s

    def indices(self, *args: Any, **kwargs: Any) -> Any:
        """0.2: this rank's item ids for the rest of the epoch (an array). 0.1.1's
        `indices(epoch=0, resume_from=0)` (with an argument, or on a sampler made in
        0.1.1's form): this cell's item ids of `epoch` from its `resume_from`-th on, a
        list (see the class).

        Raises:
            LoaderOptionError: for a negative or non-int epoch or resume_from.
        """
        if not args and not kwargs and not self._rs011:
            return super().indices()
        try:
            bound = _RS011_INDICES.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"Sampler.indices(): {exc}") from None
        if not self._rs011:
            deprecated(
                "Sampler.indices(epoch, resume_from)",
                "sampler.set_epoch(epoch), then iterate the sampler or take "
                "sampler.batch(k, batch_size)",
                why="it gives 0.1.1's unpadded shares of the epoch, where 0.2 pads ranks to "
                "equal shares; " + _ORDER_011,
            )
        bound.apply_defaults()
        return self.cell_items(**bound.arguments).tolist()

    def cell_items(self, epoch: int = 0, resume_from: int = 0) -> npt.NDArray[np.int64]:
        """This rank's (0.1.1: grid cell's) item ids of `epoch`, 0.1.1's way: positions
        `rank, rank + world_size, ...` of the epoch's global order (no padding), from
        the `resume_from`-th on."""
        for what, value in (("epoch", epoch), ("resume_from", resume_from)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
                raise LoaderOptionError(
                    f"{what} must be an int in [0, 2**63), got {value!r}", option=what, value=value
                )
        return _cell(self.order(epoch), self.rank + resume_from * self.world_size, self.world_size)


def _rs011_sampler(
    total: int,
    world_size: int = 1,
    rank: int = 0,
    num_workers: int = 1,
    worker_id: int = 0,
    seed: int = 0,
    shuffle: bool = True,
    shuffle_block: int = 1024,
) -> None:
    """0.1.1's `Sampler` signature (for binding arguments)."""


def _rs011_indices(epoch: int = 0, resume_from: int = 0) -> None:
    """0.1.1's `Sampler.indices` signature (for binding arguments)."""


_RS011_SIGNATURE = inspect.signature(_rs011_sampler)
_RS011_INDICES = inspect.signature(_rs011_indices)
#: Keywords only 0.1.1's `Sampler` takes.
_RS011_ONLY = frozenset({"total", "num_workers", "worker_id", "shuffle_block"})


def _cell(
    order: EpochOrder, first: int, step: int, stop: int | None = None
) -> npt.NDArray[np.int64]:
    """Item ids at positions `first, first + step, ...` (below `stop`, or the order's
    end) of an epoch's order."""
    end = len(order) if stop is None else min(stop, len(order))
    return order.at(np.arange(first, end, step, dtype=np.int64))


class FerroSampler:
    """ferroload-rs 0.1.1's DDP sampler (deprecated): rank `rank`'s share of each epoch,
    for `DataLoader(sampler=...)`; `set_epoch(e)` chooses the epoch, `len()` is the
    share. Shares are 0.1.1's (disjoint, complete, unequal by one at most); the order is
    this project's permutation of `(seed, epoch)`, not 0.1.1's (`shuffle_block` is
    ignored). 0.2's is `ferroload_loader.Sampler(num_items, rank=, world_size=, seed=,
    shuffle=)`, whose ranks get equal shares (the tail padded) and which resumes
    mid-epoch (`state_dict`)."""

    def __init__(
        self,
        total: int,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_block: int = 1024,
    ) -> None:
        deprecated(
            "FerroSampler(total, world_size=..., rank=..., seed=...)",
            "Sampler(num_items, rank=..., world_size=..., seed=..., shuffle=...), or "
            "FerroTorchDataset(...).sampler() of ferroload_loader.torch",
            why="ranks get 0.1.1's unpadded shares, where 0.2 pads them to equal ones; "
            + _ORDER_011,
        )
        self._setup(total, world_size, rank, seed, shuffle, shuffle_block)

    def _setup(
        self,
        total: int,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_block: int = 1024,
    ) -> None:
        self.sampler = Sampler._quiet(
            total, world_size=world_size, rank=rank, seed=seed, shuffle=shuffle,
            shuffle_block=shuffle_block,
        )  # fmt: skip
        self.total = self.sampler.num_items
        self.world_size = self.sampler.world_size
        self.rank = self.sampler.rank
        self.seed = seed
        self.shuffle = shuffle
        self.shuffle_block = shuffle_block
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` (0.1.1 and torch's `DistributedSampler` convention:
        call it before each epoch)."""
        self.epoch = operator.index(epoch)

    def __iter__(self) -> Iterator[int]:
        """This rank's item ids of the current epoch."""
        return iter(self.sampler.cell_items(self.epoch).tolist())

    def __len__(self) -> int:
        """Items in this rank's share."""
        return len(range(self.rank, self.total, self.world_size))


# --------------------------------------------------------------------------- batches


def _batched(
    indices: Iterable[Any], batch_size: int, drop_last: bool = False
) -> Iterator[list[int]]:
    batch: list[int] = []
    for i in indices:
        batch.append(int(i))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


def batched(
    indices: Iterable[Any], batch_size: int, drop_last: bool = False
) -> Iterator[list[int]]:
    """ferroload-rs 0.1.1's chunking of indices (a sampler) into lists of `batch_size`
    (deprecated), the last one shorter unless `drop_last`."""
    deprecated(
        "batched(sampler, batch_size)",
        "make_loader(source, batch_size=...), or Sampler.batch(k, batch_size)",
    )
    return _batched(indices, batch_size, drop_last)


_SCALARS = (int, float, bool, np.integer, np.floating, np.bool_)


def _numpy_collate(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in samples[0]:
        vals = [s[k] for s in samples]
        v0 = vals[0]
        if isinstance(v0, np.ndarray):
            out[k] = np.stack(vals)
        elif isinstance(v0, _SCALARS):
            out[k] = np.array(vals)
        elif hasattr(v0, "__array__") and not isinstance(v0, str | bytes):
            out[k] = np.stack([np.asarray(v) for v in vals])  # torch tensors, jax arrays
        else:
            out[k] = vals
    return out


def numpy_collate(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """ferroload-rs 0.1.1's collate (deprecated): arrays stacked, numbers and flags in
    an array, anything else (strings, bytes, None) in a list. Tensors of other libraries
    (the samples of `ferroload_loader.torch.FerroTorchDataset`) are stacked into numpy
    arrays too."""
    deprecated(
        "numpy_collate(samples)",
        "make_loader(source, batch_size=..., out='numpy'), whose batches come collated",
    )
    return _numpy_collate(samples)


_DONE = object()


def _background(items: Iterator[Any], depth: int) -> Iterator[Any]:
    """`items` made on a daemon thread, up to `depth` ahead; the thread stops when the
    consumer does (a `break` included)."""
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, int(depth)))
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(("ok", item)):
                    return
        except BaseException as exc:  # surfaced to the consumer
            put(("err", exc))
        else:
            put(("done", _DONE))

    threading.Thread(target=work, daemon=True, name="ferroload-rs011-prefetch").start()
    try:
        while True:
            tag, payload = q.get()
            if tag == "done":
                return
            if tag == "err":
                raise payload
            yield payload
    finally:
        stop.set()


class PrefetchLoader:
    """ferroload-rs 0.1.1's background prefetch (deprecated): for each list of indices of
    `batches`, `collate_fn(dataset.__getitems__(indices))`, made on a thread up to `depth`
    batches ahead. One pass per object, as in 0.1.1 (`batches` is consumed). 0.2's
    `make_loader` prefetches within a byte budget (`prefetch_bytes`) and resumes."""

    def __init__(
        self,
        dataset: Any,
        batches: Iterable[Sequence[int]],
        collate_fn: Callable[[list[Any]], Any] | None = None,
        depth: int = 2,
    ) -> None:
        deprecated(
            "PrefetchLoader(dataset, batches, collate_fn=..., depth=...)",
            "make_loader(source, batch_size=..., prefetch_bytes=...)",
        )
        self._setup(dataset, batches, collate_fn, depth)

    def _setup(
        self,
        dataset: Any,
        batches: Iterable[Sequence[int]],
        collate_fn: Callable[[list[Any]], Any] | None = None,
        depth: int = 2,
    ) -> None:
        self.dataset = dataset
        self.batches = batches
        self.collate_fn: Callable[[list[Any]], Any] = collate_fn or (lambda x: x)
        self.depth = max(1, int(depth))

    def _produce(self) -> Iterator[Any]:
        get_many = getattr(self.dataset, "__getitems__", None)
        for idxs in self.batches:
            idx = list(idxs)
            samples = get_many(idx) if get_many else [self.dataset[i] for i in idx]
            yield self.collate_fn(samples)

    def __iter__(self) -> Iterator[Any]:
        """The collated batches, in the order of `batches`."""
        return _background(self._produce(), self.depth)


# --------------------------------------------------------------------------- streaming


def _register_iterable() -> None:
    """Make `FerroIterableDataset` a `torch.utils.data.IterableDataset` (which
    `DataLoader` checks), when torch is installed, without importing torch with this
    module (0.1.1 subclassed it when torch was there)."""
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        return
    IterableDataset.register(FerroIterableDataset)


class FerroIterableDataset:
    """ferroload-rs 0.1.1's streaming dataset (deprecated): yields SAMPLES (0.1.1's dicts,
    as `FerroTorchDataset` makes them), read and decoded `block_size` at a time. 0.2's
    `ferroload_loader.torch.FerroIterableDataset` yields whole batches.

    The order is this project's streaming order (`Sampler(mode="shard_block")`: shards
    in a seeded order, then windows of `shuffle_buffer` items each permuted), or the
    dataset's with `shuffle=False`, not 0.1.1's block shuffle; rank `rank` takes
    positions `rank, rank + world_size, ...` of it (0.1.1's unpadded shares), and a
    `DataLoader` worker every `num_workers`-th block of its rank's. `set_epoch(e)`
    chooses the epoch; `len()` is the rank's share.
    """

    def __init__(
        self,
        fds: Any,
        *,
        columns: Sequence[str] | None = None,
        images: Sequence[str] | None = None,
        videos: Sequence[str] | None = None,
        raw: Sequence[str] | None = None,
        meta: Sequence[str] | None = None,
        arrays: Sequence[str] | None = None,
        resize: Resize = (224, 224),
        video_resize: Size | Sequence[int] | Literal[False] | None = None,
        num_frames: int = 16,
        out: str = "numpy",
        shuffle: bool = True,
        shuffle_buffer: int = 8192,
        block_size: int = 1024,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
    ) -> None:
        deprecated(
            "FerroIterableDataset(ds, ...), which yields samples,",
            "ferroload_loader.torch.FerroIterableDataset(source, batch_size=..., "
            "streaming=True), which yields whole batches (DataLoader(ds, batch_size=None)), "
            "or make_loader(source, batch_size=..., streaming=True)",
            why="this one still yields 0.1.1's samples, in 0.2's streaming order (0.1.1's "
            "order is not kept); " + _DEFAULTS_011,
        )
        self._setup(
            fds, columns=columns, images=images, videos=videos, raw=raw, meta=meta,
            arrays=arrays, resize=resize, video_resize=video_resize, num_frames=num_frames,
            out=out, shuffle=shuffle, shuffle_buffer=shuffle_buffer, block_size=block_size,
            world_size=world_size, rank=rank, seed=seed,
        )  # fmt: skip

    def _setup(
        self,
        fds: Any,
        *,
        shuffle: bool = True,
        shuffle_buffer: int = 8192,
        block_size: int = 1024,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
        register: bool = True,
        **config: Any,
    ) -> None:
        if register:  # not for FerroLoader's own use: no torch import there
            _register_iterable()
        self.tds = sample_dataset(fds, **config)
        self.fds = self.tds.fds
        self.block_size = max(1, int(block_size))
        self.shuffle = shuffle
        self.shuffle_buffer = max(1, int(shuffle_buffer))
        world = operator.index(world_size) or 1
        self.sampler = ferroload_loader.Sampler(
            len(self.fds), shuffle=shuffle, seed=seed, rank=rank, world_size=world,
            mode="shard_block", shard_runs=self.fds.shard_runs(),
            shuffle_buffer=self.shuffle_buffer,
        )  # fmt: skip
        self.world_size = self.sampler.world_size
        self.rank = self.sampler.rank
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` for the next passes."""
        self.epoch = operator.index(epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its DataLoader workers together)."""
        return len(range(self.rank, len(self.fds), self.world_size))

    def __iter__(self) -> Iterator[Sample]:
        """This rank's (and DataLoader worker's) samples of the current epoch."""
        worker, workers = 0, 1
        tud = sys.modules.get("torch.utils.data")
        info = tud.get_worker_info() if tud is not None else None
        if info is not None:
            worker, workers = info.id, info.num_workers
        order = self.sampler.order(self.epoch)
        n, w, b = len(self.fds), self.world_size, self.block_size
        share = len(range(self.rank, n, w))
        for start in range(worker * b, share, workers * b):
            first = self.rank + start * w
            items = _cell(order, first, w, stop=first + b * w)
            yield from self.tds.__getitems__(items.tolist())


# --------------------------------------------------------------------------- loader


class FerroLoader:
    """ferroload-rs 0.1.1's one-call loader (deprecated): `FerroLoader(root, batch_size,
    columns=..., ...)` iterates collated batches of 0.1.1's samples (numpy by default,
    without `sample_id`), made on a background thread `prefetch` batches ahead.

    `streaming=False`: `FerroTorchDataset` read in `FerroSampler`'s order;
    `streaming=True`: `FerroIterableDataset`'s samples in batches. `set_epoch(e)`
    chooses the epoch; `len()` is this rank's batches. 0.2's loader is
    `make_loader(source, batch_size=..., ...)` (`ferroload_loader.FerroLoader`).
    """

    def __init__(self, root: Any, batch_size: int = 32, **options: Any) -> None:
        deprecated(
            "FerroLoader(root, batch_size, ...)",
            "make_loader(source, batch_size=..., images=..., video=..., meta=..., "
            "resize=(h, w), out='numpy', prefetch_bytes=..., cache=BlockCache(...))",
            why=_DEFAULTS_011 + "; " + _ORDER_011,
        )
        self._setup(root, batch_size, **options)

    def _setup(
        self,
        root: Any,
        batch_size: int = 32,
        *,
        columns: Sequence[str] | None = None,
        images: Sequence[str] | None = None,
        videos: Sequence[str] | None = None,
        raw: Sequence[str] | None = None,
        meta: Sequence[str] | None = None,
        arrays: Sequence[str] | None = None,
        resize: Resize = (224, 224),
        video_resize: Size | Sequence[int] | Literal[False] | None = None,
        num_frames: int = 16,
        out: str = "numpy",
        shuffle: bool = True,
        world_size: int = 1,
        rank: int = 0,
        seed: int = 0,
        prefetch: int = 2,
        drop_last: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        streaming: bool = False,
        shuffle_buffer: int = 8192,
        block_size: int = 1024,
    ) -> None:
        self.ds = _open(root, cache_dir)
        self.batch_size = operator.index(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be > 0, got {batch_size!r}")
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.streaming = bool(streaming)
        config: dict[str, Any] = {
            "columns": columns, "images": images, "videos": videos, "raw": raw, "meta": meta,
            "arrays": arrays, "resize": resize, "video_resize": video_resize,
            "num_frames": num_frames, "out": out,
        }  # fmt: skip
        self.iter_ds: FerroIterableDataset | None = None
        self.tds: FerroTorchDataset | None = None
        self.sampler: FerroSampler | None = None
        if self.streaming:
            it = self.iter_ds = FerroIterableDataset.__new__(FerroIterableDataset)
            it._setup(
                self.ds, shuffle=shuffle, shuffle_buffer=shuffle_buffer, block_size=block_size,
                world_size=world_size, rank=rank, seed=seed, register=False, **config,
            )  # fmt: skip
        else:
            self.tds = sample_dataset(self.ds, **config)
            sampler = self.sampler = FerroSampler.__new__(FerroSampler)
            sampler._setup(
                len(self.ds), world_size=world_size, rank=rank, seed=seed, shuffle=shuffle
            )
        if collate_fn is None:
            if out == "torch":
                from torch.utils.data import default_collate

                collate_fn = default_collate
            else:
                collate_fn = _numpy_collate
        self.collate_fn: Callable[[list[Any]], Any] = collate_fn

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` for the next passes."""
        target = self.iter_ds if self.iter_ds is not None else self.sampler
        assert target is not None
        target.set_epoch(epoch)

    def __len__(self) -> int:
        """This rank's batches per epoch."""
        target = self.iter_ds if self.iter_ds is not None else self.sampler
        n = len(cast(Any, target))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        """A pass over the current epoch: collated batches."""
        if self.iter_ds is not None:
            return _background(self._streaming_batches(self.iter_ds), self.prefetch)
        assert self.sampler is not None
        loader = PrefetchLoader.__new__(PrefetchLoader)
        loader._setup(
            self.tds, _batched(self.sampler, self.batch_size, self.drop_last),
            collate_fn=self.collate_fn, depth=self.prefetch,
        )  # fmt: skip
        return iter(loader)

    def _streaming_batches(self, it: FerroIterableDataset) -> Iterator[Any]:
        batch: list[Sample] = []
        for sample in it:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)


#: Arguments only 0.1.1's `make_loader` / `FerroLoader` take.
_RS011_LOADER_ONLY = frozenset(
    {
        "columns", "videos", "raw", "arrays", "video_resize", "num_frames", "prefetch",
        "collate_fn", "cache_dir", "block_size",
    }
)  # fmt: skip
_RS011_LOADER = frozenset(inspect.signature(FerroLoader._setup).parameters) - {"self", "root"}


def _is_rs011_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether a `make_loader` call is 0.1.1's: one 0.2 cannot take (a batch size by
    position, an argument only 0.1.1 has, `out="jax"`, a `resize` per column, or no
    batch size at all)."""
    if "options" in kwargs:
        return False
    return (
        len(args) > 1
        or bool(_RS011_LOADER_ONLY & kwargs.keys())
        or "batch_size" not in kwargs
        or kwargs.get("out") == "jax"
        or isinstance(kwargs.get("resize"), Mapping)
    )


def make_loader(*args: Any, **kwargs: Any) -> ferroload_loader.FerroLoader | FerroLoader:
    """`ferroload_loader.make_loader`, which also takes ferroload-rs 0.1.1's calls.

    A 0.2 call (`make_loader(source, batch_size=..., ...)` or `options=...`) is
    `ferroload_loader.make_loader`'s, unchanged and without a warning. A call only 0.1.1
    took (`make_loader(root, 64, ...)`, `columns=`, `videos=`, `raw=`, `arrays=`,
    `video_resize=`, `num_frames=`, `prefetch=`, `collate_fn=`, `cache_dir=`,
    `block_size=`, `out="jax"`, a `resize` dict, or no batch size) warns and returns
    0.1.1's `FerroLoader`: numpy batches by default, without `sample_id`, images resized
    to (224, 224) by default.

    Raises:
        TypeError: for a call that mixes 0.1.1's arguments with 0.2's only.
    """
    if not _is_rs011_call(args, kwargs):
        return ferroload_loader.make_loader(*args, **kwargs)
    return _loader_011(args, kwargs)


def _loader_011(args: tuple[Any, ...], kwargs: dict[str, Any]) -> FerroLoader:
    """0.1.1's `FerroLoader` for a call in 0.1.1's form (with its FutureWarning).

    Raises:
        TypeError: for a call that mixes 0.1.1's arguments with 0.2's only.
    """
    extra = sorted(kwargs.keys() - _RS011_LOADER)
    if extra or len(args) > 2 or not args:
        why = (
            f"0.2's {', '.join(f'{k}=' for k in extra)} with 0.1.1's arguments"
            if extra
            else f"{len(args)} arguments by position"
        )
        raise TypeError(
            f"make_loader() got {why}: 0.2's call is make_loader(source, batch_size=..., "
            "images=..., video=..., meta=..., resize=(h, w), ...); ferroload-rs 0.1.1's "
            "was make_loader(root, batch_size, columns=..., raw=..., prefetch=..., ...)"
        )
    deprecated(
        "make_loader(root, batch_size, columns=..., raw=..., prefetch=..., ...)",
        "make_loader(source, batch_size=..., images=..., video=..., meta=..., "
        "resize=(h, w), out='numpy', prefetch_bytes=..., cache=BlockCache(...))",
        why=_DEFAULTS_011 + "; " + _ORDER_011,
    )
    loader = FerroLoader.__new__(FerroLoader)
    loader._setup(*args, **kwargs)
    return loader


class _AnyFerroLoader(type):
    """Metaclass of `ferroload.FerroLoader`: any loader `make_loader` returns is one."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, ferroload_loader.FerroLoader | FerroLoader)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, ferroload_loader.FerroLoader | FerroLoader)


class AnyFerroLoader(metaclass=_AnyFerroLoader):
    """`ferroload.FerroLoader`: the class of the loaders `make_loader` returns
    (`isinstance(dl, ferroload.FerroLoader)` holds for them). A call that
    `ferroload_loader.FerroLoader` takes is its; any other is 0.1.1's
    `FerroLoader(root, batch_size, images=..., columns=...)`, which works with a
    FutureWarning."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        try:  # a call 0.2's class takes is 0.2's
            inspect.signature(ferroload_loader.FerroLoader).bind(*args, **kwargs)
        except TypeError:
            return _loader_011(args, kwargs)
        return ferroload_loader.FerroLoader(*args, **kwargs)


AnyFerroLoader.__name__ = AnyFerroLoader.__qualname__ = "FerroLoader"


#: Arguments only 0.1.1's per-sample datasets took: a call with one is 0.1.1's.
_ADAPTER_ONLY_011 = frozenset(
    {"out", "raw", "arrays", "videos", "columns", "video_resize", "num_frames"}
)


class _AdapterMeta(type):
    """Metaclass of `ferroload.loader.FerroTorchDataset` / `FerroIterableDataset`:
    instances of 0.2's class (`ferroload_loader.torch`) and of 0.1.1's are instances."""

    _compat: type

    def _real(cls) -> type:
        real: type = getattr(importlib.import_module("ferroload_loader.torch"), cls.__name__)
        return real

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._real() | cls._compat)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._real() | cls._compat)


def _adapter(name: str, compat: type) -> type:
    """The class `ferroload.loader.<name>` hands out: calling it is calling 0.2's
    `ferroload_loader.torch.<name>`, or 0.1.1's (with its FutureWarning) when the call
    has an argument only 0.1.1 took (`out=`, `raw=`, `arrays=`, `videos=`, `columns=`, …)."""

    def make(cls: type, *args: Any, **kwargs: Any) -> Any:
        if _ADAPTER_ONLY_011 & kwargs.keys():
            return compat(*args, **kwargs)
        return cls._real()(*args, **kwargs)  # type: ignore[attr-defined]

    return _AdapterMeta(name, (), {"__new__": make, "_compat": compat, "__doc__": _adapter.__doc__})


TorchDataset = _adapter("FerroTorchDataset", FerroTorchDataset)
IterableDataset = _adapter("FerroIterableDataset", FerroIterableDataset)
