"""`LoaderOptions`: the options of a loader, one frozen dataclass for every entry point.

`make_loader`, the torch adapters (`FerroTorchDataset`, `FerroIterableDataset`) and
`FerroDataModule` take these options, as keywords or as one `options=LoaderOptions(...)`;
each takes them through `take_options` and builds its fields and sampler from
them (`field_options`, `make_sampler`), so an option means the same everywhere.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import numpy as np

from ferroload_loader._augment import Layout, Normalize
from ferroload_loader._buckets import Buckets, check_buckets, make_plan
from ferroload_loader._checks import (
    MAX_SHUFFLE_BUFFER,
    check_bool,
    check_int,
    check_lanes,
    check_rank,
    check_resize,
    check_seed,
)
from ferroload_loader._errors import LoaderOptionError
from ferroload_loader._fields import ColumnSpec, Crop, OnError
from ferroload_loader._order import DEFAULT_SHUFFLE_BUFFER
from ferroload_loader._sampler import Sampler
from ferroload_loader._source import ResolvedSource
from ferroload_store import BlockCache

DEFAULT_PREFETCH_BYTES = 512 << 20
DEFAULT_READAHEAD_BYTES = 256 << 20
Out = Literal["torch", "numpy"]


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """The options of a loader: what a batch holds, the order, and how it is built.

    `make_loader`, `FerroIterableDataset`, `FerroTorchDataset` and `FerroDataModule`
    take these options either as keyword arguments (`make_loader(ds, batch_size=64,
    seed=1)`) or as one object (`make_loader(ds, options=LoaderOptions(batch_size=64,
    seed=1))`), not both. One object can thus configure several entry points; derive
    variants with `dataclasses.replace(options, seed=2)`. Invalid values are refused
    when the object is made, with the error each entry point gives for its keyword.

    An entry point refuses an option it cannot honour when it differs from its default,
    saying where it goes instead: the torch adapters always yield tensors (`out`), get
    `pin_memory` and prefetching from `DataLoader`, and neither read ahead nor take a
    block cache (`readahead_bytes`, `cache`); `FerroTorchDataset` yields samples (no
    `batch_size` or `transform`; its sampler options are the defaults of
    `ds.sampler()`); `FerroDataModule` takes `rank` and `world_size` from the trainer.

    Args:
        batch_size: samples per batch on this rank (required by `make_loader`,
            `FerroIterableDataset` and `FerroDataModule`).
        images: image modalities to decode (names, or name -> `ImageDecoder` options).
        audio: audio modalities (name -> `AudioDecoder` options; `length` is required).
        video: video modalities (name -> `decode_video` options; `num_frames`, `size`).
        meta: metadata columns: numbers as arrays/tensors, the rest as lists.
        resize: output `(height, width)` (or an int) of images and video frames, of at
            most `ferroload_codec.DEFAULT_MAX_PIXELS` pixels (or a field's larger
            `max_pixels`). It and the other image options are refused by a loader that
            decodes no image or video field: name them with `images=` (or `video=`).
        crop: `None` stretches to `resize`; `"center"` scales the shorter side and crops
            the centre; `"pad"` scales the longer side and pads; `"random"` (or a
            `RandomResizedCrop(scale=, ratio=)`) cuts a box of random area and aspect
            ratio out of each image and resizes it, as torchvision's `RandomResizedCrop`
            (images only).
        hflip: probability of flipping each image left-right (default 0: never).
        layout: of image batches: `"NHWC"` (default) or `"NCHW"` (a sample's image is
            then CHW).
        dtype: of image batches: `uint8` (default), `float32`, `float16` or `bfloat16`
            (needs `out="torch"`), as a name, a numpy or a torch dtype; floats are scaled
            to [0, 1].
        normalize: `(mean, std)`, per channel on the [0, 1] scale: images become
            `(x / 255 - mean) / std`, as torchvision's `Normalize` computes it (float32
            unless `dtype` says otherwise; refused with uint8).
        transform: `fn(batch) -> batch`, run on each finished batch in the thread (or
            DataLoader worker) that built it, after the conversion to tensors with
            `out="torch"`; given a parameter named `rng`, it gets a
            `numpy.random.Generator` seeded from the seed, the epoch and the batch's
            items. It must return the batch (a dict that keeps `sample_id`); its
            exceptions reach the loop with a note naming it.
        out: `"torch"` (tensors; needs the torch extra) or `"numpy"`.
        shuffle: a new permutation every epoch (else dataset order).
        seed: an int in `[0, 2**63)`; with the epoch, it fixes the order and every
            per-sample random choice (crop box, flip, audio crop, video clip).
        drop_last: drop the last, incomplete batch (on every rank); else ranks are padded
            to the same length by wrapping around.
        where: a SQL WHERE clause over the index (see `Dataset.subset`).
        threads: decode threads (default: the CPUs available, and one more for video,
            whose decoding holds the GIL between packets; inside DataLoader workers, the
            CPUs shared out among them).
        prefetch_bytes: bytes of built batches held ahead of the consumer.
        readahead_bytes: for remote datasets, bytes of cache blocks fetched ahead of the
            batch builder in the epoch's known order (0 turns read-ahead off).
        streaming: read shard by shard: shards in a shuffled order, then a seeded shuffle
            within windows of `shuffle_buffer` items of that stream.
        shuffle_buffer: items per streaming shuffle window (default 65,536; the first
            windows are smaller: 128 items, doubling; at most `MAX_SHUFFLE_BUFFER`);
            with `bucket_by`, also the span of the epoch's order within which batches
            are grouped by bucket.
        lanes: streaming: the order is dealt out in this many pieces of disjoint shards
            (default: the world size, so that each rank reads shards of its own; 1: the
            same order whatever the world size; at most `MAX_WORLD_SIZE`). A resumed
            state keeps its own.
        bucket_by: size-bucketed batches: an index column, or an arithmetic expression
            over index columns (`"width*height"`, `"width/height"`: names, numbers,
            `+ - * /`, parentheses); every batch then holds items of one bucket (see
            docs/loader.md, "Size-bucketed batches"). Needs `buckets`.
        buckets: with `bucket_by`: the boundaries (increasing numbers; bucket `i` holds
            `boundaries[i-1] <= value < boundaries[i]`), or a count of buckets (at most 65,536) with
            quantile boundaries computed from the values.
        pin_memory: page-lock tensors for faster copies to a GPU (when CUDA is present).
        on_error: per-sample decode failures: `raise`, or leave the sample out of its
            batch (`skip`), also logging it (`warn`); counted in `loader.stats`.
        rank: this process's rank (default: torch.distributed, else `RANK`, else 0).
        world_size: the number of ranks (default: torch.distributed, else
            `WORLD_SIZE`, else 1), at most `MAX_WORLD_SIZE`.
        storage_options: for URIs, as in `Dataset.open`.
        cache: for URIs of object stores, the block cache of payload reads, as in
            `Dataset.open` (`"default"`, a `ferroload_store.BlockCache`, or None).

    Raises:
        LoaderOptionError: (a `ValueError`) naming the option and its value, for an
            integer option that is not an `int` (`True`, `2.0`, `"8"`) or is out of its
            range (`batch_size`, `threads`, `prefetch_bytes`, `readahead_bytes`,
            `seed` in `[0, 2**63)`, `rank`, `world_size` and `lanes` up to
            `MAX_WORLD_SIZE`, `shuffle_buffer` up to `MAX_SHUFFLE_BUFFER`), a flag that
            is not a `bool` (`shuffle`, `drop_last`, `streaming`, `pin_memory`), a
            `resize` (or a field's own `size`) that is not a positive size or has more
            pixels than the fields' `max_pixels` (default
            `ferroload_codec.DEFAULT_MAX_PIXELS`), or an `out` or `on_error` it does not
            know.
        ValueError: for `bucket_by` or `buckets` out of range (the other options, and
            the columns `bucket_by` reads, are checked against the dataset when a
            loader is built).

    Examples:
        >>> import dataclasses
        >>> from ferroload_format import Writer
        >>> from ferroload_loader import make_loader
        >>> with Writer("memory://docs/loader-options", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i % 3})
        >>> options = LoaderOptions(batch_size=4, meta=["label"], out="numpy", seed=0)
        >>> dl = make_loader("memory://docs/loader-options", options=options)
        >>> [len(b["sample_id"]) for b in dl]
        [4, 4, 2]
        >>> bigger = dataclasses.replace(options, batch_size=5)
        >>> len(make_loader("memory://docs/loader-options", options=bigger))
        2
        >>> LoaderOptions(batch_size=0)
        Traceback (most recent call last):
        ferroload_loader.LoaderOptionError: batch_size must be a positive int, got 0
        >>> LoaderOptions(shuffle="False")
        Traceback (most recent call last):
        ferroload_loader.LoaderOptionError: shuffle must be True or False, got 'False' (a str)
    """

    batch_size: int | None = None
    images: ColumnSpec = ()
    audio: ColumnSpec = ()
    video: ColumnSpec = ()
    meta: Sequence[str] = ()
    resize: int | tuple[int, int] | None = None
    crop: Crop = None
    hflip: float = 0.0
    layout: Layout = "NHWC"
    dtype: Any = None
    normalize: Normalize | None = None
    transform: Callable[..., Any] | None = None
    out: Out = "torch"
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = False
    where: str | None = None
    threads: int | None = None
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES
    readahead_bytes: int = DEFAULT_READAHEAD_BYTES
    streaming: bool = False
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    lanes: int | None = None
    bucket_by: str | None = None
    buckets: Buckets | None = None
    pin_memory: bool = False
    on_error: OnError = "raise"
    rank: int | None = None
    world_size: int | None = None
    storage_options: Mapping[str, Any] | None = None
    cache: BlockCache | Literal["default"] | None = "default"

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults, by name (what a repr shows)."""
        return {
            name: value
            for name, default in _DEFAULTS.items()
            if _differs(value := getattr(self, name), default)
        }

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.changed().items())
        return f"LoaderOptions({shown})"

    def __post_init__(self) -> None:
        # the one check of every option that needs no dataset; whatever the mode (only
        # streaming deals lanes, only streaming and buckets use shuffle_buffer)
        if self.batch_size is not None:
            check_batch_size(self.batch_size)
        for flag in ("shuffle", "drop_last", "streaming", "pin_memory"):
            check_bool(flag, getattr(self, flag))
        check_seed(self.seed)
        check_int("threads", self.threads, low=1, none=True)
        check_int("shuffle_buffer", self.shuffle_buffer, low=1, high=MAX_SHUFFLE_BUFFER)
        check_lanes(self.lanes)
        check_rank(self.rank, self.world_size)
        check_resize(self.resize, self.images, self.video)
        check_build_options(self.out, self.on_error, self.prefetch_bytes, self.readahead_bytes)
        check_buckets(self.bucket_by, self.buckets)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LoaderOptions)}


def _differs(value: Any, default: Any) -> bool:
    """Whether an option's value is other than its default: anything but `None` where
    that is the default (numpy takes `dtype == None` for float64), else by `!=`, a value
    that cannot say (an array) counting as other."""
    if default is None or value is default:
        return value is not default
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # `np.array([...]) != ()`: no single truth value
        return True


def take_options(
    caller: str,
    options: LoaderOptions | None,
    keywords: Mapping[str, Any],
    *,
    refused: Mapping[str, str] | None = None,
    needs_batch_size: bool = True,
) -> LoaderOptions:
    """The options entry point `caller` was given: `options`, or its keyword arguments.

    Raises:
        TypeError: for both `options` and keywords, an unknown keyword, a keyword in
            `refused` (option -> what to do instead), or no batch size when needed.
        ValueError: for `options` with a `refused` option set, or an invalid value.
    """
    refused = refused or {}
    if options is not None:
        if keywords:
            names = ", ".join(f"{k}=" for k in keywords)
            raise TypeError(
                f"{caller}() takes options=LoaderOptions(...) or keyword options, not "
                f"both (got options= and {names}); change a copy with "
                "dataclasses.replace(options, ...)"
            )
        if not isinstance(options, LoaderOptions):
            raise TypeError(
                f"{caller}(options=...) takes a LoaderOptions, got {type(options).__name__}"
            )
        for name, instead in refused.items():
            if _differs(getattr(options, name), _DEFAULTS[name]):
                raise ValueError(
                    f"{caller} does not take {name} (its options have "
                    f"{name}={getattr(options, name)!r}): {instead}"
                )
        taken = options
    else:
        for name in keywords:
            if name not in _DEFAULTS:
                raise TypeError(
                    f"{caller}() got an unexpected keyword argument {name!r}{_instead(name)}"
                )
            if name in refused:
                raise TypeError(f"{caller}() does not take {name}=: {refused[name]}")
        taken = LoaderOptions(**keywords)
    if needs_batch_size and taken.batch_size is None:
        raise TypeError(
            f"{caller}() missing 1 required keyword-only argument: 'batch_size'"
            if options is None
            else f"{caller}() needs a batch size: LoaderOptions(batch_size=...)"
        )
    return taken


#: What torch, Hugging Face or WebDataset users pass, and the option that does it here.
_HABITS = {
    "num_workers": "; the loader decodes on threads= in this process (no worker "
    "processes); with torch DataLoader workers, use FerroIterableDataset "
    "(ferroload.loader.torch)",
    "collate_fn": "; batches are built as dicts of arrays: change them with transform=",
    "transforms": "; use transform= (a function of the batch)",
    "columns": "; name what a batch holds with images=, audio=, video= and meta=",
    "sampler": "; the order is shuffle=, seed=, where= and rank= / world_size=",
}


def _instead(name: str) -> str:
    """`; did you mean …?` for an unknown option: a habit's way, or a close name."""
    if name in _HABITS:
        return _HABITS[name]
    close = difflib.get_close_matches(name, list(_DEFAULTS), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class SamplerKeywords(TypedDict, total=False):
    """The options of a `Sampler` among `LoaderOptions` (`FerroTorchDataset.sampler`)."""

    shuffle: bool
    streaming: bool
    shuffle_buffer: int
    drop_last: bool
    lanes: int | None
    rank: int | None
    world_size: int | None


class LoaderKeywords(SamplerKeywords, total=False):
    """`LoaderOptions` as keyword arguments, for type checkers (`**Unpack[...]`)."""

    batch_size: int
    images: ColumnSpec
    audio: ColumnSpec
    video: ColumnSpec
    meta: Sequence[str]
    resize: int | tuple[int, int] | None
    crop: Crop
    hflip: float
    layout: Layout
    dtype: Any
    normalize: Normalize | None
    transform: Callable[..., Any] | None
    out: Out
    seed: int
    where: str | None
    threads: int | None
    prefetch_bytes: int
    readahead_bytes: int
    pin_memory: bool
    on_error: OnError
    bucket_by: str | None
    buckets: Buckets | None
    storage_options: Mapping[str, Any] | None
    cache: BlockCache | Literal["default"] | None


def check_batch_size(batch_size: int, name: str = "batch_size") -> None:
    check_int(name, batch_size, low=1)


def check_build_options(out: str, on_error: str, prefetch_bytes: int, readahead_bytes: int) -> None:
    """Checks the options of building batches (also `FerroLoader`'s own arguments)."""
    if out not in ("torch", "numpy"):
        raise LoaderOptionError(
            f"out must be 'torch' or 'numpy', got {out!r}", option="out", value=out
        )
    if on_error not in ("raise", "skip", "warn"):
        raise LoaderOptionError(
            f"on_error must be raise, skip or warn, got {on_error!r}",
            option="on_error",
            value=on_error,
        )
    check_int("prefetch_bytes", prefetch_bytes, low=0)
    check_int("readahead_bytes", readahead_bytes, low=0)


def field_options(options: LoaderOptions) -> dict[str, Any]:
    """The options of `build_fields` (what a batch holds), but `threads`."""
    o = options
    return {
        "images": o.images, "audio": o.audio, "video": o.video, "meta": o.meta,
        "resize": o.resize, "crop": o.crop, "hflip": o.hflip, "layout": o.layout,
        "dtype": o.dtype, "normalize": o.normalize,
    }  # fmt: skip


def make_sampler(source: ResolvedSource, options: LoaderOptions) -> Sampler:
    """The sampler of `source` for `options` (`make_loader`'s, and the torch adapters')."""
    o = options
    common: dict[str, Any] = {
        "shuffle": o.shuffle, "seed": o.seed, "drop_last": o.drop_last, "rank": o.rank,
        "world_size": o.world_size,
    }  # fmt: skip
    plan = None
    if o.bucket_by is not None:
        if source.mixture is not None:
            raise ValueError("bucket_by= does not apply to mix(): mixtures draw items")
        if o.batch_size is None:
            raise ValueError("bucket_by= groups batches: it needs a batch_size")
        assert o.buckets is not None  # LoaderOptions checked it
        plan = make_plan(source.datasets, o.bucket_by, o.buckets, o.batch_size)
        common["buckets"] = plan
        common["shuffle_buffer"] = o.shuffle_buffer
    if source.mixture is not None:
        if o.streaming:
            raise ValueError("streaming=True does not apply to mix(): mixtures draw items")
        return Sampler(
            source.num_items, mode="mixture",
            mixture_sizes=[len(d) for d in source.datasets],
            mixture_weights=source.mixture.weights, **common,
        )  # fmt: skip
    if o.streaming:
        base = 0
        starts, codes = [], []
        for ds, offset in zip(source.datasets, source.offsets.tolist(), strict=True):
            s, c = ds.shard_runs()  # O(runs), not a shard per item
            starts.append(np.asarray(s, dtype=np.int64) + offset)
            codes.append(np.asarray(c, dtype=np.int64) + base)
            base += ds.num_shards
        runs = (
            (np.concatenate(starts), np.concatenate(codes))
            if starts
            else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        )
        return Sampler(
            source.num_items, mode="shard_block", shard_runs=runs,
            lanes=o.lanes, **{"shuffle_buffer": o.shuffle_buffer, **common},
        )  # fmt: skip
    return Sampler(source.num_items, mode="permutation", **common)
