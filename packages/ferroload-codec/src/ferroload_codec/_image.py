"""`ImageDecoder` (its options, the decode path chosen per image, batches) and `image_info`.

The per-format paths are in `_image_paths`, the lean batch paths for images already at
the output size in `_png_fast` and `_jpeg_fast`, the one-call functions `decode_image`
and `decode_images` in `_image_funcs`. The backends (`jpeg`, `webp_fallback`) are looked
up in this module, where tests swap them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from ferroload_codec._augment import (
    FLIP_DRAW,
    Layout,
    OutputFormat,
    check_crop,
    check_hflip,
    check_seeds,
    draws,
    flip_inplace,
)
from ferroload_codec._backends import imagecodecs, jpeg, warn_slow_path, webp_fallback
from ferroload_codec._errors import DecodeError
from ferroload_codec._image_paths import SPNG_CHANNELS, ImagePaths, jpeg_header, pil_open
from ferroload_codec._jpeg_fast import same_size_jpeg
from ferroload_codec._pixels import CHANNELS, ImageMode, scratch
from ferroload_codec._png_fast import same_size_png
from ferroload_codec._pool import DecodePool
from ferroload_codec._resize import (
    IMAGE_RESIZE_MODES,
    INTERPOLATIONS,
    ImageResize,
    Interpolation,
    check_max_pixels,
    check_size,
)
from ferroload_codec._sniff import (
    Buffer,
    as_buffer,
    first_is,
    png_header,
    png_strip_inflated,
    sniff,
    webp_size,
)
from ferroload_core import JPEG_MAGIC, PNG_MAGIC

logger = logging.getLogger(__name__)

#: Pillow's own decompression-bomb limit: about a quarter gigabyte of RGB pixels.
DEFAULT_MAX_PIXELS = 89_478_485
OnError = Literal["raise", "skip", "warn"]


class ImageInfo(NamedTuple):
    """What an image's header says."""

    format: str
    width: int
    height: int


class DecodedBatch(NamedTuple):
    """The result of `ImageDecoder.decode_batch`.

    Attributes:
        images: NHWC (or NCHW) array of the decoder's dtype; images that failed (with
            `on_error` "skip"/"warn") are 0.
        ok: bool per image, False where decoding failed.
        errors: the `DecodeError` of each failed image, in index order.
    """

    images: npt.NDArray[Any]
    ok: npt.NDArray[np.bool_]
    errors: tuple[DecodeError, ...]


def image_info(data: Buffer, *, sample_id: str | None = None) -> ImageInfo:
    """Format and size from an image's header, without decoding its pixels.

    Raises:
        DecodeError: for empty or damaged input; `UnsupportedFormatError` for an unknown format.
    """
    buf = as_buffer(data, sample_id)
    fmt = sniff(buf)
    if fmt == "png" and (hdr := png_header(buf)) is not None:
        return ImageInfo("png", hdr[0], hdr[1])
    if fmt == "webp" and (size := webp_size(buf)) is not None:
        return ImageInfo("webp", *size)
    tj = jpeg()
    if fmt == "jpeg" and tj is not None:
        w, h, _ = jpeg_header(tj, bytes(buf), sample_id)
        return ImageInfo("jpeg", w, h)
    im = pil_open(buf, sample_id, fmt)
    return ImageInfo((im.format or fmt or "unknown").lower(), im.size[0], im.size[1])


class ImageDecoder(ImagePaths):
    """Decodes images to arrays of one shape, singly or in batches, optionally with a
    seeded random resized crop and flip and a conversion to normalised floats.

    Everything happens in the decode threads, straight into the output: decode (with
    JPEG DCT-domain downscaling), crop, resize, flip, then the dtype/layout conversion.
    The random choices come from one seed per image (`decode(seed=)`,
    `decode_batch(seeds=)`): the same seeds give the same pixels, bit for bit, whatever
    the number of threads.

    Args:
        size: output `(height, width)`, or an int for a square; None keeps each image's size
            (batches then need images of one size).
        mode: `RGB` (default), `L` (grey, one channel) or `RGBA`.
        resize: `exact` (stretch), `shorter` (scale the shorter side, crop the centre),
            `longer` (scale the longer side, pad around) or `random` (torchvision's
            `RandomResizedCrop`: a box of a random area fraction in `crop_scale` and aspect
            ratio in `crop_ratio`, resized to `size`; needs seeds and a `size`).
        interpolation: `bilinear`, `bicubic`, `area` or `nearest`.
        exif: apply the EXIF orientation first.
        max_pixels: refuse images whose header declares more pixels (decompression bombs),
            and a `size` of more pixels.
        pad_value: fill value of the padding with `resize="longer"`.
        threads: decode threads for batches (default: the CPUs available).
        crop_scale: with `resize="random"`, the range of the box's area as a fraction of
            the image's (default `(0.08, 1.0)`).
        crop_ratio: with `resize="random"`, the range of the box's aspect ratio, width /
            height, drawn log-uniformly (default `(3/4, 4/3)`).
        hflip: probability of a horizontal flip (drawn from the seed; default 0: never).
        layout: `HWC` (default) or `CHW`.
        dtype: `uint8` (default), `float32`, `float16` or `bfloat16` (names or numpy
            dtypes; `torch.bfloat16` too); floats are scaled to [0, 1]. numpy has no
            bfloat16: those images are uint16 arrays of bfloat16 bit patterns (view them
            with `torch.from_numpy(a).view(torch.bfloat16)`), rounded to nearest even
            from the float32 value, as torch rounds.
        mean: per-channel means on the [0, 1] scale, subtracted (float dtypes only).
        std: per-channel standard deviations on the [0, 1] scale, divided by: the output is
            `(x / 255 - mean) / std`, exactly as torchvision's `ToDtype(scale=True)` then
            `Normalize` compute it in float32.

    Raises:
        ValueError: for an option out of range (a `size` over `max_pixels` too), or
            options that do not go together (`crop_scale` without `resize="random"`,
            `mean` with uint8, …).

    Examples:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "PNG")
        >>> dec = ImageDecoder((32, 32))
        >>> dec.decode(buf.getvalue()).shape
        (32, 32, 3)
        >>> dec.decode_batch([buf.getvalue()] * 4).images.shape
        (4, 32, 32, 3)
        >>> aug = ImageDecoder(24, resize="random", hflip=0.5, layout="CHW", dtype="float32",
        ...                    mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
        >>> batch = aug.decode_batch([buf.getvalue()] * 4, seeds=[0, 1, 2, 3]).images
        >>> batch.shape, batch.dtype.name
        ((4, 3, 24, 24), 'float32')
    """

    def __init__(
        self,
        size: int | tuple[int, int] | None = None,
        *,
        mode: ImageMode = "RGB",
        resize: ImageResize = "exact",
        interpolation: Interpolation = "bilinear",
        exif: bool = False,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        pad_value: int = 0,
        threads: int | None = None,
        crop_scale: tuple[float, float] | None = None,
        crop_ratio: tuple[float, float] | None = None,
        hflip: float = 0.0,
        layout: Layout = "HWC",
        dtype: Any = "uint8",
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
    ) -> None:
        check_max_pixels(max_pixels)
        dims = check_size(size, max_pixels)
        if mode not in CHANNELS:
            raise ValueError(f"mode must be one of {', '.join(CHANNELS)}, got {mode!r}")
        if resize not in IMAGE_RESIZE_MODES:
            raise ValueError(
                f"resize must be one of {', '.join(IMAGE_RESIZE_MODES)}, got {resize!r}"
            )
        if resize == "random" and dims is None:
            raise ValueError("resize='random' needs an output size (size=...)")
        if resize != "random" and (crop_scale is not None or crop_ratio is not None):
            raise ValueError("crop_scale and crop_ratio apply to resize='random' only")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}"
            )
        if not 0 <= pad_value <= 255:
            raise ValueError(f"pad_value must be in 0..255, got {pad_value!r}")
        self.crop_scale, self.crop_ratio = check_crop(crop_scale, crop_ratio)
        self.hflip = check_hflip(hflip)
        #: The output conversion (dtype, layout, normalisation).
        self.format = OutputFormat(CHANNELS[mode], dtype=dtype, layout=layout, mean=mean, std=std)
        self.size: tuple[int, int] | None = dims
        self.mode: ImageMode = mode
        self.channels = CHANNELS[mode]
        self.resize: ImageResize = resize
        self.interpolation: Interpolation = interpolation
        self.exif = exif
        self.max_pixels = max_pixels
        self.pad_value = pad_value
        self.pool = DecodePool(threads)

    @property
    def output_shape(self) -> tuple[int, int, int] | None:
        """`(height, width, channels)` of every output (`(channels, height, width)` with
        `layout="CHW"`), or None without a fixed size."""
        return None if self.size is None else self.format.shape(*self.size)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of every output array (uint16 for bfloat16's bit patterns)."""
        return self.format.dtype

    @property
    def dtype_name(self) -> str:
        """`uint8`, `float32`, `float16` or `bfloat16`."""
        return self.format.name

    @property
    def layout(self) -> Layout:
        """`HWC` or `CHW`."""
        return self.format.layout

    @property
    def needs_seeds(self) -> bool:
        """True when decoding draws random choices (`resize="random"` or `hflip` > 0)."""
        return self.resize == "random" or self.hflip > 0

    def __repr__(self) -> str:
        extra = ""
        if self.resize == "random":
            extra += f", crop_scale={self.crop_scale}, crop_ratio={self.crop_ratio}"
        if self.hflip:
            extra += f", hflip={self.hflip}"
        if self.format.converts:
            extra += f", layout={self.layout!r}, dtype={self.dtype_name!r}"
        if self.format.mean is not None or self.format.std is not None:
            extra += f", mean={self.format.mean}, std={self.format.std}"
        return (
            f"ImageDecoder(size={self.size}, mode={self.mode!r}, resize={self.resize!r}, "
            f"interpolation={self.interpolation!r}{extra}, threads={self.pool.threads})"
        )

    # ------------------------------------------------------------------ one image

    def decode(
        self,
        data: Buffer,
        *,
        out: npt.NDArray[Any] | None = None,
        sample_id: str | None = None,
        seed: int | None = None,
    ) -> npt.NDArray[Any]:
        """Decode one image.

        Args:
            data: the encoded bytes (JPEG, PNG, WebP, GIF, BMP, TIFF, …).
            out: write the result here (shape `output_shape`, the decoder's dtype, any
                strides).
            sample_id: named in errors.
            seed: the image's random choices (crop box, flip); required when
                `needs_seeds`. The same seed gives the same output as in `decode_batch`.

        Returns:
            The image, HWC (or CHW), of the decoder's dtype (`out` itself when given).

        Raises:
            ValueError: for an `out` of the wrong shape or dtype, or a missing seed.
            DecodeError: corrupt, truncated or empty input.
            UnsupportedFormatError: bytes of no known image format.
            ImageTooLargeError: more pixels than `max_pixels`.
        """
        if out is not None:
            want = self.output_shape
            if want is None:
                raise ValueError("out= needs a decoder with a fixed size")
            if out.shape != want or out.dtype != self.dtype:
                raise ValueError(
                    f"out must be {self.dtype} of shape {want}, got {out.dtype} {out.shape}"
                )
        u = None
        if self.needs_seeds:
            if seed is None:
                raise ValueError(self._seeds_needed("seed=", "decode"))
            u = draws(check_seeds([seed], 1))[0]
        return self._decode_one(as_buffer(data, sample_id), out, sample_id, u)

    def _seeds_needed(self, arg: str, method: str) -> str:
        what = " and ".join(
            w for w, on in (("resize='random'", self.resize == "random"),
                            (f"hflip={self.hflip}", self.hflip > 0)) if on
        )  # fmt: skip
        return (
            f"{what} draws random choices from a seed per image: pass {arg} to {method}() "
            "(the same seeds give the same output)"
        )

    def _decode_one(
        self,
        buf: Buffer,
        out: npt.NDArray[Any] | None,
        sid: str | None,
        u: list[float] | None,
    ) -> npt.NDArray[Any]:
        """Decode, crop, resize, flip and convert one image (into `out` when given)."""
        fmt = self.format
        if not fmt.converts:
            img = self._decode(buf, out, sid, u)
            if u is not None and u[FLIP_DRAW] < self.hflip:
                flip_inplace(img)
            return img
        # decoded into a per-thread uint8 array, then converted into the output
        tmp = None if self.size is None else scratch((*self.size, self.channels), "convert")
        img = self._decode(buf, tmp, sid, u)
        if u is not None and u[FLIP_DRAW] < self.hflip:
            flip_inplace(img)
        dst = out if out is not None else np.empty(fmt.shape(*img.shape[:2]), dtype=fmt.dtype)
        fmt.write(img, dst)
        return dst

    def _decode(
        self,
        buf: Buffer,
        out: npt.NDArray[np.uint8] | None,
        sid: str | None,
        u: list[float] | None = None,
    ) -> npt.NDArray[np.uint8]:
        fmt = sniff(buf)
        if fmt == "jpeg":
            tj = jpeg()
            if tj is not None:
                return self._jpeg(tj, buf, out, sid, u)
            warn_slow_path(
                "JPEG decoding", "libjpeg-turbo (the system's libturbojpeg, or simplejpeg)"
            )
        elif fmt == "png" and not self.exif:
            # With `exif`, Pillow reads the text chunks (an EXIF "raw profile" may sit in
            # one) under its own limits (`PngImagePlugin.MAX_TEXT_CHUNK`, 1 MiB a chunk).
            buf = png_strip_inflated(buf)
            hdr = png_header(buf)
            if hdr is not None and hdr[2] == 8 and hdr[3] in SPNG_CHANNELS:
                ic = imagecodecs()
                if ic is not None:
                    return self._png(ic, buf, hdr, out, sid, u)
                warn_slow_path("PNG decoding", "imagecodecs (libspng)")
        elif fmt == "webp" and (ic := webp_fallback()) is not None:
            return self._webp(ic, buf, out, sid, u)
        return self._pillow(buf, fmt, out, sid, u)

    # ------------------------------------------------------------------ batches

    def _holds_gil(self, items: Sequence[Buffer]) -> bool:
        """Whether decoding `items` on the general path would keep the GIL throughout:
        JPEGs small enough for libjpeg-turbo to decompress them with it held
        (`_turbo.Turbo.holds_gil`, at the output size). Such a batch decodes on one
        thread: a second one could only wait for the GIL, and handing it over costs more
        than it saves (20,000 32x32 JPEGs in batches of 256, 2 cores, one process: 466.6
        -> 446.4 ms; through a loader, whose consumer and index reads want the GIL too,
        568 -> 478 ms). A batch the lean JPEG path takes (`_jpeg_fast`: tiny JPEGs
        already at the output size, through simplejpeg, which releases the GIL) is not
        asked. Judged by the first item's signature and the largest item, a few us a
        batch; a batch it misjudges decodes the same pixels, on fewer or more threads.
        A batch of another format never loads the JPEG library (its import, ~8 ms, would
        delay a PNG loader's first batch)."""
        if self.size is None or not items or self.pool.threads <= 1:
            return False
        if not first_is(items, JPEG_MAGIC):
            return False
        tj = jpeg()
        if tj is None:
            return False
        pixels = self.size[0] * self.size[1]
        if not tj.holds_gil(pixels, 0):  # larger outputs: no look at the items
            return False
        try:
            largest = max(map(len, items))
        except TypeError:  # not all buffers: each item's own decode reports it
            return False
        return tj.holds_gil(pixels, largest)

    def decode_batch(
        self,
        items: Sequence[Buffer],
        *,
        out: npt.NDArray[Any] | None = None,
        sample_ids: Sequence[str] | None = None,
        on_error: OnError = "raise",
        meanwhile: Callable[[], None] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> DecodedBatch:
        """Decode many images into one NHWC (or NCHW) array on the thread pool.

        Args:
            items: encoded images.
            out: an array of the decoder's dtype and shape `(len(items), *output_shape)`
                to fill.
            sample_ids: names for errors, one per item.
            on_error: `raise` the first error (by index), or `skip` (zero-fill, report in
                the result) or `warn` (skip and log a warning per failed image).
            meanwhile: work for the calling thread to do while the pool's other threads
                start decoding (a loader reads its next batch there); it runs once.
            seeds: one int per item for its random choices (crop box, flip); required
                when `needs_seeds`. Item i's output depends on its bytes and `seeds[i]`
                only: the same whatever the batch, its order or the number of threads.

        Raises:
            ValueError: without a fixed `size`, for an `out` of the wrong shape or dtype,
                or without `seeds` when they are needed.
            DecodeError: with `on_error="raise"`, the error of the first failed image.
        """
        shape = self.output_shape
        if shape is None:
            raise ValueError("decode_batch needs a decoder with a fixed size (size=...)")
        if on_error not in ("raise", "skip", "warn"):
            raise ValueError(f"on_error must be raise, skip or warn, got {on_error!r}")
        n = len(items)
        if sample_ids is not None and len(sample_ids) != n:
            raise ValueError(f"{len(sample_ids)} sample_ids for {n} items")
        uniforms: list[list[float]] | None = None
        if self.needs_seeds:
            if seeds is None:
                raise ValueError(self._seeds_needed("seeds=", "decode_batch"))
            uniforms = draws(check_seeds(seeds, n))
        elif seeds is not None and len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} items")
        if out is None:
            out = np.empty((n, *shape), dtype=self.dtype)
        elif out.shape != (n, *shape) or out.dtype != self.dtype:
            raise ValueError(
                f"out must be {self.dtype} of shape {(n, *shape)}, got {out.dtype} {out.shape}"
            )
        errors: list[DecodeError | None] = [None] * n
        plain = uniforms is None and not self.format.converts
        decode = self._decode if plain else self._decode_one
        # the lean paths for images already at the output size, chosen by the batch's
        # first item: others would pay its header check per item for nothing (~0.45 us a
        # JPEG on the PNG path, 2% of a tiny one's decode)
        fast: Callable[[Any, npt.NDArray[Any]], bool] | None = None
        squeeze = False  # libspng writes a grey image into an (h, w) array
        lean_jpeg = False
        lean_png = None
        parts = None
        if plain and first_is(items, PNG_MAGIC):
            lean_png = same_size_png(
                self.size, self.channels, max_pixels=self.max_pixels, exif=self.exif
            )
            if lean_png is not None:
                fast = lean_png.one
                squeeze = self.channels == 1
                if out.flags.c_contiguous:
                    parts = lean_png.parts(n, self.pool.threads)
        elif plain and out.flags.c_contiguous and first_is(items, JPEG_MAGIC):
            fast = same_size_jpeg(
                items[0], self.size, self.channels, max_pixels=self.max_pixels, exif=self.exif
            )
            # tiny JPEGs on this path decode without the GIL: all the pool's threads
            lean_jpeg = fast is not None

        def one(i: int) -> None:
            item = items[i]
            if fast is not None and fast(item, out[i, ..., 0] if squeeze else out[i]):
                return
            sid = sample_ids[i] if sample_ids is not None else None
            try:
                decode(as_buffer(item, sid), out[i], sid, None if uniforms is None else uniforms[i])
            except DecodeError as exc:
                errors[i] = exc
                out[i] = 0

        if lean_png is not None and parts is not None:
            # tiny PNGs: parts of the batch on the stacked route, two GIL hand-overs a
            # part; the images it leaves go one by one
            png = lean_png

            def part(j: int) -> None:
                for i in png.stack(items, *parts[j], out):
                    one(i)

            self.pool.run(len(parts), part, meanwhile=meanwhile)
        else:
            one_thread = not lean_jpeg and self._holds_gil(items)
            self.pool.run(n, one, meanwhile=meanwhile, threads=1 if one_thread else None)
        failed = tuple(e for e in errors if e is not None)
        ok = np.fromiter((e is None for e in errors), dtype=np.bool_, count=n)
        if failed:
            if on_error == "raise":
                raise failed[0]
            if on_error == "warn":
                for e in failed:
                    logger.warning("skipped an image that failed to decode: %s", e)
        return DecodedBatch(out, ok, failed)

    def close(self) -> None:
        """Stop the decode threads."""
        self.pool.close()
