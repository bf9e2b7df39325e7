"""What a batch holds, column by column, and how each column is read and decoded."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_not
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_codec import (
    AudioDecoder,
    DecodeError,
    ImageDecoder,
    decode_video,
    image_info,
    preload,
)
from ferroload_codec._pool import DecodePool
from ferroload_codec._reader import read_ahead
from ferroload_format import (
    ColumnNotFoundError,
    Dataset,
    ModalityArrays,
    arrow_array,
    numpy_column,
)
from ferroload_loader._augment import Layout, Normalize, RandomResizedCrop, image_options
from ferroload_loader._buffers import BatchBuffers
from ferroload_loader._source import ResolvedSource

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip", "warn"]
Crop = Literal["center", "pad", "random", "shortest_edge"] | RandomResizedCrop | None
ColumnSpec = Sequence[str] | Mapping[str, Mapping[str, Any]]


@dataclass
class Share:
    """One dataset's items of a batch, with what the index holds for them.

    Attributes:
        d: the dataset (an index into `ResolvedSource.datasets`).
        slots: the items' places in the batch (distinct and increasing).
        pos: their positions in the dataset.
        columns: `sample_id` and the metadata columns the batch reads, at `pos`.
        locations: the payload locations of each modality the batch decodes, at `pos`.
    """

    d: int
    slots: npt.NDArray[np.int64]
    pos: npt.NDArray[np.int64]
    columns: dict[str, pa.Array]
    locations: dict[str, ModalityArrays]

    def slice(self, lo: int, hi: int, first_slot: int) -> Share:
        """Items `lo:hi` of this share, their slots counted from `first_slot` (zero-copy)."""
        return Share(
            self.d,
            self.slots[lo:hi] - first_slot,
            self.pos[lo:hi],
            {k: v.slice(lo, hi - lo) for k, v in self.columns.items()},
            {
                k: ModalityArrays(
                    present=a.present[lo:hi],
                    shard=a.shard[lo:hi],
                    offset=a.offset[lo:hi],
                    length=a.length[lo:hi],
                    checksum=a.checksum[lo:hi],
                )
                for k, a in self.locations.items()
            },
        )


def read_index(
    source: ResolvedSource, fields: Sequence[Field], items: npt.NDArray[np.int64]
) -> list[Share]:
    """What the index holds for `items` (ids, the metadata columns of `fields`, the payload
    locations of its decoded modalities), per dataset: only the row groups holding them
    are read."""
    metas = [f.name for f in fields if isinstance(f, MetaField)]
    mods = [f.name for f in fields if isinstance(f, _DecodedField)]
    shares = []
    for d, slots, pos in source.split(items):
        ds = source.datasets[d]
        columns = {n: ds.column(n, pos) for n in ("sample_id", *metas)}
        locations = {n: ds.locate(n, pos) for n in mods}
        shares.append(Share(d, slots, pos, columns, locations))
    return shares


def whole_share(shares: Sequence[Share], n: int) -> bool:
    """Whether `shares` is one share holding all `n` items of a batch in batch order
    (its slots `0..n-1`: one dataset), so that its arrays are the batch's as they are."""
    if len(shares) != 1:
        return False
    slots = shares[0].slots
    # a share's slots are distinct and increasing (`Share`): n of them from 0 to n - 1
    # are 0..n-1 (two element reads, not an array comparison: this runs twice a batch)
    return len(slots) == n and (n == 0 or (int(slots[0]) == 0 and int(slots[-1]) == n - 1))


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


@dataclass
class BatchState:
    """A batch being built: its items, their ids, which of them failed and why.

    The items' seeds (`item_seeds` of `seed_epoch` and the items) are computed the first
    time `seeds` is read: most batches (no random choices, no transform) never need them.
    """

    items: npt.NDArray[np.int64]
    sample_ids: list[str]
    seed_epoch: tuple[int, int]
    ok: npt.NDArray[np.bool_]
    shares: list[Share] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)
    payloads: dict[str, list[Any]] = field(default_factory=dict)
    meanwhile: Callable[[], None] | None = None
    _seeds: list[int] | None = field(default=None, repr=False)

    @property
    def seeds(self) -> list[int]:
        """One seed per item for its random choices (`item_seeds`)."""
        if self._seeds is None:
            self._seeds = item_seeds(*self.seed_epoch, self.items)
        return self._seeds

    def take_meanwhile(self) -> Callable[[], None] | None:
        """The work to overlap with this batch's decoding (given to one decoder only)."""
        work, self.meanwhile = self.meanwhile, None
        return work

    def fail(self, slots: npt.NDArray[np.int64], errors: Sequence[DecodeError]) -> None:
        self.ok[slots] = False
        self.errors.extend(errors)


def _payloads(batch: BatchState, source: ResolvedSource, name: str) -> list[Any]:
    """Each item's payload of modality `name` (zero-copy views; None where absent), read
    at the locations the batch's shares hold."""
    n = len(batch.items)
    if whole_share(batch.shares, n):  # one dataset: its views in batch order already
        s = batch.shares[0]
        ds = source.datasets[s.d]
        views = ds.read(s.pos, name, copy=False, locations=s.locations.get(name))
        if len(views) != n:
            raise ValueError(f"{len(views)} payloads read for {n} items")
        return list(views)
    out: list[Any] = [None] * n
    for s in batch.shares:
        ds = source.datasets[s.d]
        views = ds.read(s.pos, name, copy=False, locations=s.locations.get(name))
        for k, data in zip(s.slots.tolist(), views, strict=True):
            out[k] = data
    return out


class Field(abc.ABC):
    """One column of a batch."""

    name: str

    def check(self, ds: Dataset) -> None:
        """Raise `ColumnNotFoundError` unless `ds` has what this field reads."""
        if self.name not in {m.name for m in ds.modalities}:
            kind = "metadata column" if self.name in ds.metadata_columns else "column"
            raise ColumnNotFoundError(
                f"{ds.uri} has no modality {self.name!r} to decode"
                + (f" ({self.name!r} is a {kind}; pass it in meta=)" if kind != "column" else ""),
                uri=ds.uri,
                column=self.name,
            )

    def item_bytes(self) -> int:
        """Bytes of one item's decoded output (for the prefetch budget)."""
        return 0

    @abc.abstractmethod
    def prepare(self, batch: BatchState, source: ResolvedSource) -> None:
        """The reading half: fetch what this column needs (the loader overlaps it with
        the previous batch's decoding)."""

    @abc.abstractmethod
    def fill(self, batch: BatchState) -> None:
        """The decoding half: turn what `prepare` fetched into `batch.columns` entries."""

    def finish(self, columns: dict[str, Any]) -> None:
        """Last touches to the finished batch's columns (failed items already left out);
        none by default."""
        return


class _DecodedField(Field):
    """A modality decoded into one fixed-shape array per item, with a presence mask."""

    shape: tuple[int, ...]
    dtype: Any = np.uint8
    with_mask: bool = False
    #: Its decoder reads each payload whole (an audio crop reads a part: `ByteReader`
    #: reads ahead of each of its reads instead).
    reads_whole = True
    _buffers: BatchBuffers | None = None

    def item_bytes(self) -> int:
        return int(np.prod(self.shape)) * int(np.dtype(self.dtype).itemsize)

    @property
    def buffers(self) -> BatchBuffers:
        """The batch arrays this field reuses once the consumer lets go of them."""
        if self._buffers is None:
            self._buffers = BatchBuffers()
        return self._buffers

    def prepare(self, batch: BatchState, source: ResolvedSource) -> None:
        payloads = batch.payloads[self.name] = _payloads(batch, source, self.name)
        if self.reads_whole:  # large payloads of local shards read ahead, beside decoding
            sizes = (s.locations.get(self.name) for s in batch.shares)
            largest = max((int(a.length.max(initial=0)) for a in sizes if a is not None), default=0)
            read_ahead(payloads, largest=largest)

    def fill(self, batch: BatchState) -> None:
        payloads = batch.payloads.pop(self.name)
        n = len(payloads)
        out = self.buffers.empty((n, *self.shape), self.dtype)
        # identity tests in C (`None in payloads` would compare each memoryview with
        # None, ~0.2 us an item; a generator costs twice this)
        present = np.fromiter(map(is_not, payloads, repeat(None)), dtype=np.bool_, count=n)
        idx = np.flatnonzero(present)
        if len(idx) == n:
            self.decode(payloads, out, batch, np.arange(n))
        else:
            part = np.empty((len(idx), *self.shape), dtype=self.dtype)
            self.decode([payloads[i] for i in idx], part, batch, idx)
            out[idx] = part
            out[~present] = 0
        batch.columns[self.name] = out
        if self.with_mask:
            batch.columns[f"{self.name}_present"] = present

    @abc.abstractmethod
    def decode(
        self, payloads: list[Any], out: Any, batch: BatchState, slots: npt.NDArray[np.int64]
    ) -> None:
        """Decode `payloads` (items `slots` of the batch) into `out`; record failures."""


class ImageField(_DecodedField):
    """An image modality decoded to NHWC (or NCHW) of the decoder's dtype, with the
    random choices of each item drawn from its seed; with `torch_dtype="bfloat16"` the
    decoder writes bfloat16 bit patterns (uint16), which the finished batch views as a
    bfloat16 tensor."""

    def __init__(self, name: str, decoder: ImageDecoder, torch_dtype: str | None = None) -> None:
        self.name = name
        self.decoder = decoder
        assert decoder.output_shape is not None
        self.shape = decoder.output_shape
        self.dtype = decoder.dtype
        self.torch_dtype = torch_dtype

    def item_bytes(self) -> int:
        return int(np.prod(self.shape)) * int(self.dtype.itemsize)

    def decode(
        self, payloads: list[Any], out: Any, batch: BatchState, slots: npt.NDArray[np.int64]
    ) -> None:
        # `slots` are distinct and increasing: as many as the batch's items is all of them
        if len(slots) == len(batch.sample_ids):
            ids = batch.sample_ids
            seeds = batch.seeds if self.decoder.needs_seeds else None
        else:
            rows = slots.tolist()
            ids = [batch.sample_ids[i] for i in rows]
            seeds = [batch.seeds[i] for i in rows] if self.decoder.needs_seeds else None
        res = self.decoder.decode_batch(
            payloads, out=out, sample_ids=ids, on_error="skip", meanwhile=batch.take_meanwhile(),
            seeds=seeds,
        )  # fmt: skip
        if res.errors:
            batch.fail(slots[~res.ok], res.errors)

    def finish(self, columns: dict[str, Any]) -> None:
        if self.torch_dtype == "bfloat16":
            import torch

            columns[self.name] = torch.from_numpy(columns[self.name]).view(torch.bfloat16)


class PaddedImageField(_DecodedField):
    """An image modality with `crop="shortest_edge"`: each image keeps its aspect ratio,
    its shorter side scaled to `size` (the longer one rounded to whole pixels), and the
    batch is as large as its largest image, padded with zeros at the bottom and right;
    `<name>_size` holds each image's `(height, width)` (int32; `(0, 0)` for none). Each
    image is decoded straight into its place by a decoder of its own output size."""

    #: Decoders kept per output size (beyond this, the cache starts again).
    CACHE = 4096
    #: The longest side an image may have after the resize, in multiples of `size`: the
    #: whole batch is padded to its largest image, so one long, thin image (a header
    #: saying 65535x1) would make every image of the batch gigabytes; such an image is a
    #: `DecodeError` (`on_error` decides), as torchvision's `Resize(max_size=)` bounds it.
    MAX_ASPECT = 16

    def __init__(
        self, name: str, size: int, options: Mapping[str, Any], pool: DecodePool,
        torch_dtype: str | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.size = size
        self.options = {**options, "resize": "exact"}
        self.pool = pool
        self.torch_dtype = torch_dtype
        probe = ImageDecoder(size, threads=1, **self.options)
        self.decoder = probe  # its repr names the options (the output size varies)
        self.channels, self.dtype, self.chw = probe.channels, probe.dtype, probe.layout == "CHW"
        self.shape = (size, 2 * size, self.channels)  # for the budget: an aspect ratio of 2
        self._decoders: dict[tuple[int, int], ImageDecoder] = {}

    def target(self, width: int, height: int) -> tuple[int, int]:
        """The `(height, width)` an image of this size is resized to."""
        s = self.size
        if height <= width:
            return s, max(1, round(width * s / height))
        return max(1, round(height * s / width)), s

    def _decoder(self, hw: tuple[int, int]) -> ImageDecoder:
        dec = self._decoders.get(hw)
        if dec is None:
            if len(self._decoders) >= self.CACHE:
                self._decoders.clear()
            dec = self._decoders[hw] = ImageDecoder(hw, threads=1, **self.options)
        return dec

    def fill(self, batch: BatchState) -> None:
        payloads = batch.payloads.pop(self.name)
        n = len(payloads)
        sizes = np.zeros((n, 2), dtype=np.int32)
        errors: list[DecodeError | None] = [None] * n
        for i, p in enumerate(payloads):
            if p is not None:
                try:
                    info = image_info(p, sample_id=batch.sample_ids[i])
                    hw = self.target(info.width, info.height)
                    if max(hw) > self.MAX_ASPECT * self.size:
                        raise DecodeError(
                            f"a {info.width}x{info.height} image resized to shorter side "
                            f"{self.size} would be {hw[1]}x{hw[0]}: more than "
                            f"{self.MAX_ASPECT}x its shorter side (crop='shortest_edge' pads "
                            f"the whole batch to its largest image)",
                            sample_id=batch.sample_ids[i],
                        )
                except DecodeError as exc:
                    errors[i] = exc
                    continue
                sizes[i] = hw
        h, w = (int(v) for v in sizes.max(axis=0)) if n else (0, 0)
        shape = (n, self.channels, h, w) if self.chw else (n, h, w, self.channels)
        out = np.zeros(shape, dtype=self.dtype)
        needs_seeds = self.decoder.needs_seeds
        seeds = batch.seeds if needs_seeds else None

        def one(i: int) -> None:
            hi, wi = sizes[i].tolist()
            if not hi or errors[i] is not None:
                return
            view = out[i, :, :hi, :wi] if self.chw else out[i, :hi, :wi]
            try:
                self._decoder((hi, wi)).decode(
                    payloads[i], out=view, sample_id=batch.sample_ids[i],
                    seed=None if seeds is None else seeds[i],
                )  # fmt: skip
            except DecodeError as exc:
                errors[i] = exc
                view[...] = 0

        self.pool.run(n, one, meanwhile=batch.take_meanwhile())
        failed = [i for i, e in enumerate(errors) if e is not None]
        if failed:
            batch.fail(np.asarray(failed, dtype=np.int64), [e for e in errors if e is not None])
            sizes[failed] = 0
        batch.columns[self.name] = out
        batch.columns[f"{self.name}_size"] = sizes
        if self.with_mask:
            present = np.fromiter(map(is_not, payloads, repeat(None)), dtype=np.bool_, count=n)
            batch.columns[f"{self.name}_present"] = present

    def decode(
        self, payloads: list[Any], out: Any, batch: BatchState, slots: npt.NDArray[np.int64]
    ) -> None:  # fill() decodes each image at its own size
        raise NotImplementedError

    def finish(self, columns: dict[str, Any]) -> None:
        if self.torch_dtype == "bfloat16":
            import torch

            columns[self.name] = torch.from_numpy(columns[self.name]).view(torch.bfloat16)


class AudioField(_DecodedField):
    """An audio modality decoded to (N, channels, length)."""

    reads_whole = False  # a crop reads a part of its clip

    def __init__(self, name: str, decoder: AudioDecoder, channels: int) -> None:
        self.name = name
        self.decoder = decoder
        assert decoder.length is not None
        self.shape = (channels, decoder.length)
        self.dtype = np.dtype(decoder.dtype)

    def decode(
        self, payloads: list[Any], out: Any, batch: BatchState, slots: npt.NDArray[np.int64]
    ) -> None:
        ids = [batch.sample_ids[i] for i in slots.tolist()]
        seeds = [batch.seeds[i] for i in slots.tolist()]
        res = self.decoder.decode_batch(
            payloads, seeds=seeds, sample_ids=ids, out=out, on_error="skip"
        )
        if res.errors:
            batch.fail(slots[~res.ok], res.errors)


class VideoField(_DecodedField):
    """A video modality decoded to (N, frames, H, W, C), one video per pool thread."""

    def __init__(self, name: str, options: Mapping[str, Any], pool: DecodePool) -> None:
        self.name = name
        opts = dict(options)
        size = opts.get("size")
        frames = opts.get("num_frames", 8)
        if size is None or frames is None:
            raise ValueError(
                f"video field {name!r} needs a fixed shape: num_frames and size, e.g. "
                f"video={{{name!r}: {{'num_frames': 8, 'size': 112}}}}"
            )
        h, w = (size, size) if isinstance(size, int) else size
        channels = {"RGB": 3, "L": 1, "RGBA": 4}[opts.get("mode", "RGB")]
        self.shape = (int(frames), int(h), int(w), channels)
        self.options = opts
        self.pool = pool

    def decode(
        self, payloads: list[Any], out: Any, batch: BatchState, slots: npt.NDArray[np.int64]
    ) -> None:
        failed: list[tuple[int, DecodeError]] = []
        # Longest first (by payload size, which follows a clip's length): the threads
        # then finish the batch together instead of one decoding a long clip alone.
        order = sorted(range(len(payloads)), key=lambda i: -len(payloads[i]))

        def one(n: int) -> None:
            i = order[n]
            k = int(slots[i])
            try:
                got = decode_video(
                    payloads[i], seed=batch.seeds[k], sample_id=batch.sample_ids[k], out=out[i],
                    **self.options,
                )  # fmt: skip
                if len(got) < len(out[i]):  # a stride clip shorter than asked: pad
                    out[i, len(got) :] = 0
            except DecodeError as exc:
                failed.append((i, exc))
                out[i] = 0

        self.pool.run(len(payloads), one, meanwhile=batch.take_meanwhile())
        if failed:
            failed.sort(key=lambda t: t[0])
            batch.fail(slots[[i for i, _ in failed]], [e for _, e in failed])


class MetaField(Field):
    """A metadata column: numbers as an array, anything else as a list."""

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, ds: Dataset) -> None:
        if self.name not in ds.metadata_columns:
            raise ColumnNotFoundError(
                f"{ds.uri} has no metadata column {self.name!r}; it has "
                f"{', '.join(ds.metadata_columns) or 'none'}",
                uri=ds.uri,
                column=self.name,
            )

    def item_bytes(self) -> int:
        return 8

    def prepare(self, batch: BatchState, source: ResolvedSource) -> None:
        # read with the batch's shares: only the row groups holding its items
        batch.payloads[self.name] = [
            (s.slots, s.columns[self.name])
            if self.name in s.columns
            else (s.slots, source.datasets[s.d].column(self.name, s.pos))
            for s in batch.shares
        ]

    def fill(self, batch: BatchState) -> None:
        parts = batch.payloads.pop(self.name)
        if len(parts) == 1:
            batch.columns[self.name] = to_values(parts[0][1])
            return
        # a mixture: several datasets, one column in batch order
        arrays = [v for _, v in parts]
        merged = pa.concat_arrays([a.cast(arrays[0].type) for a in arrays])
        order = np.argsort(np.concatenate([slots for slots, _ in parts]))
        batch.columns[self.name] = to_values(merged.take(arrow_array(order)))


def to_values(arr: pa.Array) -> Any:
    """A numeric column without nulls as a numpy array, anything else as a Python list."""
    t = arr.type
    if arr.null_count == 0 and (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    ):
        return numpy_column(arr, writable=True)
    if pa.types.is_floating(t):  # nulls become NaN
        return numpy_column(pc.fill_null(arr, float("nan")), writable=True)
    return arr.to_pylist()


def build_fields(
    source: ResolvedSource,
    *,
    images: ColumnSpec,
    audio: ColumnSpec,
    video: ColumnSpec,
    meta: Sequence[str],
    resize: int | tuple[int, int] | None,
    crop: Crop,
    threads: int | None,
    hflip: float = 0.0,
    layout: Layout = "NHWC",
    dtype: Any = None,
    normalize: Normalize | None = None,
    default_threads: int | None = None,
) -> list[Field]:
    """The fields a loader builds, checked against every dataset of the source.

    The image options (`crop`, `hflip`, `layout`, `dtype`, `normalize`; see
    `make_loader`) apply to every image field, under the field's own `ImageDecoder`
    options; video keeps uint8 NTHWC. Fields decode on `threads` threads, or by default
    on `default_threads` (None: every CPU), and video on one more.
    """
    if not isinstance(hflip, int | float) or isinstance(hflip, bool) or not 0 <= hflip <= 1:
        raise ValueError(f"hflip is the probability of a flip, a number in [0, 1]; got {hflip!r}")
    image_options(crop, hflip, layout, dtype, normalize, {})  # checked even without images
    pool = DecodePool(threads if threads is not None else default_threads)
    fields: list[Field] = []
    for name, opts in _named(images, "images"):
        kwargs, torch_dtype = image_options(crop, hflip, layout, dtype, normalize, opts)
        kwargs = {"size": resize, **kwargs}
        if crop == "shortest_edge":
            size = kwargs.pop("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(
                    f"crop='shortest_edge' scales each image's shorter side to resize=, an "
                    f"int; got resize={size!r}"
                )
            fields.append(PaddedImageField(name, size, kwargs, pool, torch_dtype))
            continue
        if kwargs["size"] is None:
            raise ValueError(
                f"image field {name!r} needs an output size: pass resize=(h, w) (batches hold "
                f"one shape), or images={{{name!r}: {{'size': (h, w)}}}}"
            )
        size = kwargs.pop("size")
        decoder = ImageDecoder(size, threads=pool.threads, **kwargs)
        fields.append(ImageField(name, decoder, torch_dtype))
    for name, opts in _named(audio, "audio"):
        kwargs = dict(opts)
        if kwargs.get("length") is None:
            raise ValueError(
                f"audio field {name!r} needs a fixed length (frames at the output rate), "
                f"e.g. audio={{{name!r}: {{'length': 16000, 'sample_rate': 16000, 'mono': True}}}}"
            )
        if not kwargs.get("mono") and kwargs.get("channels") is None:
            kwargs["mono"] = True
        channels = 1 if kwargs.get("mono") else int(kwargs["channels"])
        fields.append(AudioField(name, AudioDecoder(threads=pool.threads, **kwargs), channels))
    # PyAV holds the GIL between packets (demuxing, a call per packet and frame): with
    # as many threads as cores, a core waits for it ~20% of the time; one thread more
    # keeps them busy (1.77 against 1.62 of 2 cores, +6% clips/s in bench_video's set)
    video_pool = pool if threads is not None else DecodePool(pool.threads + 1)
    for name, opts in _named(video, "video"):
        mode = image_options(crop, 0.0, "NHWC", None, None, {})[0]["resize"]
        if mode == "random" and "resize" not in opts:
            raise ValueError(
                f"crop={crop!r} applies to images; give video field {name!r} a resize mode of "
                f"its own, e.g. video={{{name!r}: {{'resize': 'shorter', ...}}}}"
            )
        kwargs = {"size": resize, "resize": mode, **opts}
        fields.append(VideoField(name, kwargs, video_pool))
    if not any(isinstance(f, ImageField | PaddedImageField | VideoField) for f in fields):
        # no image decoded (audio at most): options that shape images would do nothing
        given = {
            "resize": resize,
            "crop": crop,
            "hflip": hflip or None,
            "dtype": dtype,
            "normalize": normalize,
            "layout": None if layout == "NHWC" else layout,
        }
        shaping = [f"{k}={v!r}" for k, v in given.items() if v is not None]
        if shaping:
            found = sorted(
                {m.name for ds in source.datasets for m in ds.modalities if m.codec_hint == "image"}
            )
            raise ValueError(
                f"{', '.join(shaping)} shape decoded images, but images= (and video=) name "
                f"none, so batches would hold no image: pass images={found or ['...']!r} "
                "(the modalities to decode)"
            )
    if isinstance(meta, str):
        raise TypeError("meta= takes a list of column names, not a str")
    fields.extend(MetaField(name) for name in meta)
    images_of = {f.name for f in fields if isinstance(f, ImageField | PaddedImageField)}
    for ds in source.datasets:
        for f in fields:
            f.check(ds)
            if isinstance(f, _DecodedField):
                # from the index's statistics, not a whole column
                f.with_mask = f.with_mask or not ds.all_present(f.name)
        for m in ds.modalities:  # their codecs' libraries load while the index is read
            if m.name in images_of:
                preload(m.ext)
    names = [f.name for f in fields]
    if len(set(names)) != len(names) or "sample_id" in names:
        raise ValueError(f"each column may appear once (sample_id is always included): {names}")
    return fields


def _named(spec: ColumnSpec, what: str) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(spec, str):
        raise TypeError(f"{what}= takes a list of names or a dict of name -> options, not a str")
    if isinstance(spec, Mapping):
        return [(str(k), dict(v or {})) for k, v in spec.items()]
    return [(str(k), {}) for k in spec]
