"""Image decoding into HWC (or CHW) arrays, one at a time or a batch on a thread pool."""

from __future__ import annotations

import io
import logging
import struct
import threading
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
    crop_box,
    draws,
    flip_inplace,
)
from ferroload_codec._backends import imagecodecs, jpeg, warn_slow_path, webp_fallback
from ferroload_codec._errors import DecodeError, ImageTooLargeError, UnsupportedFormatError
from ferroload_codec._pool import DecodePool
from ferroload_codec._resize import (
    INTERPOLATIONS,
    RESIZE_MODES,
    Geometry,
    Interpolation,
    ResizeMode,
    dct_scale,
    geometry,
    resize_into,
)
from ferroload_codec._sniff import (
    Buffer,
    as_buffer,
    jpeg_frame_size,
    jpeg_orientation,
    png_header,
    png_strip_inflated,
    sniff,
    webp_size,
)
from ferroload_codec._turbo import (
    COLORSPACE_CMYK,
    COLORSPACE_YCCK,
    PIXEL_FORMATS,
    JpegLib,
    TurboError,
    is_harmless,
)
from ferroload_core import PNG_MAGIC

logger = logging.getLogger(__name__)

#: Pillow's own decompression-bomb limit: about a quarter gigabyte of RGB pixels.
DEFAULT_MAX_PIXELS = 89_478_485
ImageMode = Literal["RGB", "L", "RGBA"]
#: The resize modes of images: those of `geometry`, and a seeded random resized crop.
ImageResize = Literal["exact", "shorter", "longer", "random"]
IMAGE_RESIZE_MODES = (*RESIZE_MODES, "random")
CHANNELS = {"RGB": 3, "L": 1, "RGBA": 4}
OnError = Literal["raise", "skip", "warn"]
# A PNG's signature and the length and type of its first chunk, the header
_PNG_HEAD = PNG_MAGIC + b"\x00\x00\x00\rIHDR"
# PNG colour types libspng decodes without help: grey, RGB, RGBA (8-bit)
_SPNG_CHANNELS = {0: 1, 2: 3, 6: 4}


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
        w, h, _ = _jpeg_header(tj, bytes(buf), sample_id)
        return ImageInfo("jpeg", w, h)
    im = _pil_open(buf, sample_id, fmt)
    return ImageInfo((im.format or fmt or "unknown").lower(), im.size[0], im.size[1])


def _jpeg_header(tj: JpegLib, data: bytes, sid: str | None) -> tuple[int, int, int]:
    """(width, height, colour space) of a JPEG, cross-checked against its frame header.

    libjpeg-turbo reuses a thread's decompressor: on a header too short to parse it can
    report the previous image's size without an error, so the size is also read here.
    """
    frame = jpeg_frame_size(data)
    try:
        w, h, _subsampling, colorspace = tj.header(data)
    except TurboError as exc:
        raise DecodeError(f"damaged JPEG header: {exc}", sample_id=sid, format="jpeg") from None
    if frame is None or frame != (w, h):
        raise DecodeError(
            "damaged JPEG header: no complete frame header before the image data",
            sample_id=sid,
            format="jpeg",
        )
    return w, h, colorspace


def _pil_open(buf: Buffer, sample_id: str | None, fmt: str | None = None) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(io.BytesIO(buf))
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(str(exc), sample_id=sample_id) from None
    except UnidentifiedImageError:
        raise UnsupportedFormatError(
            f"not an image format Pillow or ferroload knows (starts with {bytes(buf[:8])!r})",
            sample_id=sample_id,
        ) from None
    except Exception as exc:
        raise DecodeError(
            f"damaged {(fmt or 'image').upper()} header: {exc}", sample_id=sample_id, format=fmt
        ) from None


_scratch_local = threading.local()


def _scratch(shape: tuple[int, int, int], slot: str = "decode") -> npt.NDArray[np.uint8]:
    """A per-thread scratch array (reused, grown as needed) for a decode before resizing
    (`slot="decode"`) or a uint8 image before its conversion (`slot="convert"`).

    A fresh array per image would be a `mmap`/`munmap` pair above glibc's threshold (128
    KiB: a 256x256 RGB image) plus page faults, and those serialise the decode threads.
    """
    need = shape[0] * shape[1] * shape[2]
    buf: npt.NDArray[np.uint8] | None = getattr(_scratch_local, slot, None)
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1 << 20), dtype=np.uint8)
        setattr(_scratch_local, slot, buf)
    return buf[:need].reshape(shape)


def _orient(arr: npt.NDArray[np.uint8], orientation: int) -> npt.NDArray[np.uint8]:
    """Apply an EXIF orientation (as PIL.ImageOps.exif_transpose does) to an HWC array."""
    if orientation == 2:
        return arr[:, ::-1]
    if orientation == 3:
        return arr[::-1, ::-1]
    if orientation == 4:
        return arr[::-1]
    if orientation == 5:
        return arr.transpose(1, 0, 2)
    if orientation == 6:
        return np.rot90(arr, -1)
    if orientation == 7:
        return np.rot90(arr, -1)[::-1]
    if orientation == 8:
        return np.rot90(arr, 1)
    return arr


def _convert_channels(arr: npt.NDArray[np.uint8], channels: int) -> npt.NDArray[np.uint8]:
    """HWC array with `channels` channels, converting like Pillow's `convert`."""
    have = arr.shape[2]
    if have == channels:
        return arr
    if channels == 1:  # ITU-R 601-2 luma with Pillow's fixed-point rounding
        rgb = arr[..., :3].astype(np.uint32)
        luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
        return luma.astype(np.uint8)[..., None]
    if have == 1:
        grey = np.repeat(arr, 3, axis=2)
        return grey if channels == 3 else np.concatenate([grey, _opaque(arr)], axis=2)
    if channels == 3:  # RGBA -> RGB drops alpha
        return arr[..., :3]
    return np.concatenate([arr, _opaque(arr)], axis=2)  # RGB -> RGBA


def _opaque(arr: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    return np.full((*arr.shape[:2], 1), 255, dtype=np.uint8)


class ImageDecoder:
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
        max_pixels: refuse images whose header declares more pixels (decompression bombs).
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
        ValueError: for an option out of range, or options that do not go together
            (`crop_scale` without `resize="random"`, `mean` with uint8, …).

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
        dims = (size, size) if isinstance(size, int) and not isinstance(size, bool) else size
        if dims is not None and (
            not isinstance(dims, tuple | list)
            or len(dims) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in dims)
        ):
            raise ValueError(
                f"size must be (height, width) of positive ints or an int, got {size!r}"
            )
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
        if not isinstance(max_pixels, int) or max_pixels <= 0:
            raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
        if not 0 <= pad_value <= 255:
            raise ValueError(f"pad_value must be in 0..255, got {pad_value!r}")
        self.crop_scale, self.crop_ratio = check_crop(crop_scale, crop_ratio)
        self.hflip = check_hflip(hflip)
        #: The output conversion (dtype, layout, normalisation).
        self.format = OutputFormat(CHANNELS[mode], dtype=dtype, layout=layout, mean=mean, std=std)
        self.size: tuple[int, int] | None = None if dims is None else (int(dims[0]), int(dims[1]))
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
        tmp = None if self.size is None else _scratch((*self.size, self.channels), "convert")
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
            if hdr is not None and hdr[2] == 8 and hdr[3] in _SPNG_CHANNELS:
                ic = imagecodecs()
                if ic is not None:
                    return self._png(ic, buf, hdr, out, sid, u)
                warn_slow_path("PNG decoding", "imagecodecs (libspng)")
        elif fmt == "webp" and (ic := webp_fallback()) is not None:
            return self._webp(ic, buf, out, sid, u)
        return self._pillow(buf, fmt, out, sid, u)

    def _check_pixels(self, w: int, h: int, sid: str | None, fmt: str | None) -> None:
        if w <= 0 or h <= 0:
            raise DecodeError(
                f"damaged {(fmt or 'image').upper()} header: it declares size {w}x{h}",
                sample_id=sid,
                format=fmt,
            )
        if w * h > self.max_pixels:
            raise ImageTooLargeError(
                f"image of {w}x{h} = {w * h:,} pixels exceeds max_pixels={self.max_pixels:,} "
                "(a decompression bomb?); raise max_pixels if it is genuine",
                sample_id=sid,
                format=fmt,
            )

    def _target(self, h: int, w: int) -> tuple[int, int]:
        return self.size if self.size is not None else (h, w)

    def _geometry(self, h: int, w: int, th: int, tw: int, u: list[float] | None) -> Geometry:
        """Where an `h` x `w` source goes in the `th` x `tw` output (a random box for
        `resize="random"`, drawn from `u`)."""
        if self.resize == "random":
            assert u is not None  # decode and decode_batch insist on seeds
            y0, y1, x0, x1 = crop_box(h, w, u, self.crop_scale, self.crop_ratio)
            return Geometry(y0, y1, x0, x1, th, tw, 0, 0)
        return geometry(h, w, th, tw, self.resize)

    def _output(self, out: npt.NDArray[np.uint8] | None, th: int, tw: int) -> npt.NDArray[np.uint8]:
        if out is None:
            return np.empty((th, tw, self.channels), dtype=np.uint8)
        return out

    def _place(
        self,
        src: npt.NDArray[np.uint8],
        geo: Geometry,
        out: npt.NDArray[np.uint8],
    ) -> npt.NDArray[np.uint8]:
        """Crop `src` to the geometry's box and resize it into its place in `out`."""
        box = src[geo.y0 : geo.y1, geo.x0 : geo.x1]
        if geo.pads:
            out[...] = self.pad_value
        target = out[geo.top : geo.top + geo.height, geo.left : geo.left + geo.width]
        if any(s < 0 for s in box.strides):
            box = np.ascontiguousarray(box)
        resize_into(box, target, self.interpolation)
        return out

    # ------------------------------------------------------------------ JPEG

    def _jpeg(
        self,
        tj: JpegLib,
        buf: Buffer,
        out: npt.NDArray[np.uint8] | None,
        sid: str | None,
        u: list[float] | None = None,
    ) -> npt.NDArray[np.uint8]:
        data = buf if isinstance(buf, bytes) else bytes(buf)
        w, h, colorspace = _jpeg_header(tj, data, sid)
        self._check_pixels(w, h, sid, "jpeg")
        if colorspace in (COLORSPACE_CMYK, COLORSPACE_YCCK):
            return self._pillow(buf, "jpeg", out, sid, u)  # Pillow knows Adobe's inverted CMYK
        orientation = jpeg_orientation(data) if self.exif else 1
        oh, ow = (w, h) if orientation >= 5 else (h, w)
        th, tw = self._target(oh, ow)
        geo = self._geometry(oh, ow, th, tw, u)
        num, den = dct_scale(*geo.box_shape, geo.height, geo.width)
        sh, sw = -(-h * num // den), -(-w * num // den)  # libjpeg's scaled size
        result = self._output(out, th, tw)
        direct = (
            orientation == 1
            and not geo.pads
            and geo.box_shape == (oh, ow)
            and (geo.height, geo.width) == (sh, sw)
            and result.strides[1:] == (self.channels, 1)
        )
        # Already the target size: straight into the output; else into a scratch array.
        arr = result if direct else _scratch((sh, sw, self.channels))
        try:
            tj.decode_into(data, arr, PIXEL_FORMATS[self.mode])
        except TurboError as exc:
            if is_harmless(str(exc)):  # whole after a warning the binding cannot pass over
                return self._pillow(buf, "jpeg", out, sid, u)
            raise DecodeError(f"damaged JPEG: {exc}", sample_id=sid, format="jpeg") from None
        if direct:
            return result
        arr = _orient(arr, orientation)
        geo = geo.scaled(num, den, oh, ow) if den != 1 else geo
        return self._place(arr, geo, result)

    # ------------------------------------------------------------------ PNG

    def _png(
        self,
        ic: Any,
        buf: Buffer,
        hdr: tuple[int, int, int, int],
        out: npt.NDArray[np.uint8] | None,
        sid: str | None,
        u: list[float] | None = None,
    ) -> npt.NDArray[np.uint8]:
        w, h, _depth, color = hdr
        self._check_pixels(w, h, sid, "png")
        th, tw = self._target(h, w)
        geo = self._geometry(h, w, th, tw, u)
        result = self._output(out, th, tw)
        src_channels = _SPNG_CHANNELS[color]
        try:
            if (
                src_channels == self.channels
                and not geo.pads
                and (geo.height, geo.width) == (h, w) == geo.box_shape
            ):
                target = result[..., 0] if src_channels == 1 else result
                got = ic.spng_decode(buf, out=target)
                if got is not target and not np.shares_memory(got, result):
                    target[...] = got
                return result
            arr = ic.spng_decode(buf)
        except Exception as exc:
            raise DecodeError(f"damaged PNG: {exc}", sample_id=sid, format="png") from None
        if arr.ndim == 2:
            arr = arr[..., None]
        return self._place(_convert_channels(arr, self.channels), geo, result)

    # ------------------------------------------------------------------ WebP without Pillow's

    def _webp(
        self,
        ic: Any,
        buf: Buffer,
        out: npt.NDArray[np.uint8] | None,
        sid: str | None,
        u: list[float] | None,
    ) -> npt.NDArray[np.uint8]:
        """WebP through imagecodecs' libwebp, for a Pillow built without it (EXIF
        orientation, rare in WebP, is not read on this path)."""
        size = webp_size(buf)
        if size is None:
            raise DecodeError("damaged WEBP header", sample_id=sid, format="webp")
        w, h = size
        self._check_pixels(w, h, sid, "webp")
        try:
            arr = ic.webp_decode(buf)
        except Exception as exc:
            raise DecodeError(f"damaged WEBP: {exc}", sample_id=sid, format="webp") from None
        if arr.shape[:2] != (h, w):
            raise DecodeError(
                f"damaged WEBP: its header says {w}x{h}, its image is "
                f"{arr.shape[1]}x{arr.shape[0]}",
                sample_id=sid,
                format="webp",
            )
        th, tw = self._target(h, w)
        geo = self._geometry(h, w, th, tw, u)
        arr = arr[..., None] if arr.ndim == 2 else arr
        return self._place(_convert_channels(arr, self.channels), geo, self._output(out, th, tw))

    # ------------------------------------------------------------------ everything else

    def _pillow(
        self,
        buf: Buffer,
        fmt: str | None,
        out: npt.NDArray[np.uint8] | None,
        sid: str | None,
        u: list[float] | None = None,
    ) -> npt.NDArray[np.uint8]:
        from PIL import ImageOps

        im = _pil_open(buf, sid, fmt)
        fmt = (im.format or fmt or "image").lower()
        w, h = im.size
        self._check_pixels(w, h, sid, fmt)
        try:
            if self.exif:
                im = ImageOps.exif_transpose(im)
            oh, ow = im.size[1], im.size[0]
            th, tw = self._target(oh, ow)
            geo = self._geometry(oh, ow, th, tw, u)
            if (
                fmt == "jpeg"
                and (num_den := dct_scale(*geo.box_shape, geo.height, geo.width))[1] > 1
            ):
                # Pillow's DCT-domain scaling: same factors as the libjpeg-turbo path
                im.draft(im.mode, (-(-ow // num_den[1]), -(-oh // num_den[1])))
            im.load()
            arr = self._pil_array(im)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(
                f"damaged {fmt.upper()} image: {exc}", sample_id=sid, format=fmt
            ) from None
        if arr.shape[:2] != (oh, ow):  # decoded at a reduced (draft) scale
            sh, sw = arr.shape[:2]
            geo = Geometry(
                geo.y0 * sh // oh, max(1, geo.y1 * sh // oh), geo.x0 * sw // ow,
                max(1, geo.x1 * sw // ow), geo.height, geo.width, geo.top, geo.left,
            )  # fmt: skip
        return self._place(arr, geo, self._output(out, th, tw))

    def _pil_array(self, im: Any) -> npt.NDArray[np.uint8]:
        """The loaded Pillow image as HWC uint8 with this decoder's channels."""
        if im.mode.startswith("I;16") or (im.mode == "I" and im.format == "PNG"):
            arr16 = np.asarray(im, dtype=np.uint32)  # 16-bit samples: keep the top 8 bits
            return _convert_channels((arr16 >> 8).astype(np.uint8)[..., None], self.channels)
        if im.mode == "P" and "transparency" in im.info:
            im = im.convert("RGBA")
        if im.mode not in ("RGB", "L", "RGBA"):
            im = im.convert("RGBA" if "A" in im.mode or im.mode == "P" else "RGB")
        arr = np.asarray(im)
        if arr.ndim == 2:
            arr = arr[..., None]
        return _convert_channels(arr, self.channels)

    # ------------------------------------------------------------------ batches

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
        fast = self._same_size_png() if plain else None
        grey = self.channels == 1

        def one(i: int) -> None:
            item = items[i]
            if fast is not None and fast(item, out[i, ..., 0] if grey else out[i]):
                return
            sid = sample_ids[i] if sample_ids is not None else None
            try:
                decode(as_buffer(item, sid), out[i], sid, None if uniforms is None else uniforms[i])
            except DecodeError as exc:
                errors[i] = exc
                out[i] = 0

        self.pool.run(n, one, meanwhile=meanwhile)
        failed = tuple(e for e in errors if e is not None)
        ok = np.fromiter((e is None for e in errors), dtype=np.bool_, count=n)
        if failed:
            if on_error == "raise":
                raise failed[0]
            if on_error == "warn":
                for e in failed:
                    logger.warning("skipped an image that failed to decode: %s", e)
        return DecodedBatch(out, ok, failed)

    def _same_size_png(self) -> Callable[[Any, npt.NDArray[np.uint8]], bool] | None:
        """A lean path for batches of 8-bit PNGs already at the output size and mode.

        Tiny images (32x32) cost about 35 µs in libspng; the general path's checks add
        about 7 µs more, all of it holding the GIL, which keeps two threads from scaling.
        This path checks the header with one `struct` call, walks the chunk headers (no
        compressed text or ICC profile for libspng to inflate) and decodes straight into the
        batch; anything else (or any failure) takes the general path, which also reports
        the errors. Decoders that augment or convert their output do not take it.
        """
        ic = imagecodecs()
        if ic is None or self.size is None or self.exif:
            return None
        th, tw = self.size
        if th * tw > self.max_pixels:
            return None
        color = {1: 0, 3: 2, 4: 6}[self.channels]
        spng_decode = ic.spng_decode
        unpack = struct.unpack_from
        strip = png_strip_inflated

        def fast(item: Any, target: npt.NDArray[np.uint8]) -> bool:
            kind = type(item)  # exact types only: this runs once per image
            # 57 bytes: the signature, IHDR, and empty IDAT and IEND chunks
            if (kind is not bytes and kind is not memoryview) or len(item) < 57:
                return False
            if item[:16] != _PNG_HEAD:
                return False
            if unpack(">IIBB", item, 16) != (tw, th, 8, color):
                return False
            # IHDR, one IDAT, IEND (what most encoders write for a small image) has no
            # compressed text or ICC profile; anything else is walked, and one that has
            # such chunks takes the general path, which drops them
            length, chunk = unpack(">I4s", item, 33)
            iend = 49 + length
            simple = chunk == b"IDAT" and item[iend : iend + 4] == b"IEND"
            if not simple and strip(item) is not item:
                return False
            try:
                spng_decode(item, out=target)
            except Exception:
                return False
            return True

        return fast

    def close(self) -> None:
        """Stop the decode threads."""
        self.pool.close()


def decode_image(
    data: Buffer,
    *,
    size: int | tuple[int, int] | None = None,
    mode: ImageMode = "RGB",
    resize: ResizeMode = "exact",
    interpolation: Interpolation = "bilinear",
    exif: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    pad_value: int = 0,
    out: npt.NDArray[np.uint8] | None = None,
    sample_id: str | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode one image to a uint8 HWC array (see `ImageDecoder` for the options).

    Examples:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("RGB", (300, 200), "white").save(buf, "JPEG")
        >>> decode_image(buf.getvalue(), size=224, resize="shorter").shape
        (224, 224, 3)
    """
    dec = ImageDecoder(
        size, mode=mode, resize=resize, interpolation=interpolation, exif=exif,
        max_pixels=max_pixels, pad_value=pad_value, threads=1,
    )  # fmt: skip
    return dec.decode(data, out=out, sample_id=sample_id)


_SHARED: dict[tuple[Any, ...], ImageDecoder] = {}


def decode_images(
    items: Sequence[Buffer],
    *,
    size: int | tuple[int, int],
    mode: ImageMode = "RGB",
    resize: ResizeMode = "exact",
    interpolation: Interpolation = "bilinear",
    exif: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    pad_value: int = 0,
    threads: int | None = None,
    out: npt.NDArray[np.uint8] | None = None,
    sample_ids: Sequence[str] | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode a batch into one uint8 NHWC array on a thread pool (raises on the first error).

    Decoders are cached per option set, so repeated calls reuse their threads.

    Examples:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("L", (40, 40), 128).save(buf, "PNG")
        >>> decode_images([buf.getvalue()] * 3, size=(16, 20)).shape
        (3, 16, 20, 3)
    """
    key = (size, mode, resize, interpolation, exif, max_pixels, pad_value, threads)
    dec = _SHARED.get(key)
    if dec is None:
        dec = _SHARED.setdefault(
            key,
            ImageDecoder(
                size, mode=mode, resize=resize, interpolation=interpolation, exif=exif,
                max_pixels=max_pixels, pad_value=pad_value, threads=threads,
            ),
        )  # fmt: skip
    return dec.decode_batch(items, out=out, sample_ids=sample_ids).images
