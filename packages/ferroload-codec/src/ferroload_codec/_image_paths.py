"""The per-format paths of `ImageDecoder`: JPEG, PNG, WebP and Pillow to uint8 in place.

Each path decodes one image (JPEG through libjpeg-turbo with DCT-domain downscaling, PNG
through libspng, WebP through imagecodecs where Pillow lacks libwebp, everything else
through Pillow), then crops and resizes it into its place in the output. `ImagePaths` is
the half of `ImageDecoder` that does this; `ImageDecoder` chooses the path.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._augment import crop_box
from ferroload_codec._errors import DecodeError, ImageTooLargeError, UnsupportedFormatError
from ferroload_codec._pixels import ImageMode, convert_channels, orient, scratch
from ferroload_codec._resize import (
    Geometry,
    ImageResize,
    Interpolation,
    dct_scale,
    geometry,
    resize_into,
)
from ferroload_codec._sniff import Buffer, jpeg_frame, jpeg_frame_size, jpeg_orientation, webp_size
from ferroload_codec._turbo import (
    PIXEL_FORMATS,
    JpegLib,
    TurboError,
    is_harmless,
)

#: PNG colour types libspng decodes without help: grey, RGB, RGBA (8-bit), and their channels.
SPNG_CHANNELS = {0: 1, 2: 3, 6: 4}


_NO_FRAME = "damaged JPEG header: no complete frame header before the image data"


def jpeg_header(tj: JpegLib, data: bytes, sid: str | None) -> tuple[int, int, int]:
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
        raise DecodeError(_NO_FRAME, sample_id=sid, format="jpeg")
    return w, h, colorspace


def pil_open(buf: Buffer, sample_id: str | None, fmt: str | None = None) -> Any:
    """The image opened (not loaded) by Pillow, its errors translated to the codec's."""
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


class ImagePaths:
    """Decoding one image of each format into its place in the output (the per-format
    half of `ImageDecoder`, which sets these attributes and picks the path)."""

    size: tuple[int, int] | None
    mode: ImageMode
    channels: int
    resize: ImageResize
    interpolation: Interpolation
    exif: bool
    max_pixels: int
    pad_value: int
    crop_scale: tuple[float, float]
    crop_ratio: tuple[float, float]

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
        # the size from the frame header, read here: libjpeg-turbo's own header call
        # would cost a second C call (~3 us, 15% of a 32x32 JPEG) and may report a
        # previous image's size for a header cut short (see `_turbo`); a damaged header
        # fails in the decompress call instead
        frame = jpeg_frame(data)
        if frame is None:
            raise DecodeError(_NO_FRAME, sample_id=sid, format="jpeg")
        w, h, components = frame
        self._check_pixels(w, h, sid, "jpeg")
        if components == 4:  # CMYK or YCCK: Pillow knows Adobe's inverted CMYK
            return self._pillow(buf, "jpeg", out, sid, u)
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
        arr = result if direct else scratch((sh, sw, self.channels))
        try:
            tj.decode_into(data, arr, PIXEL_FORMATS[self.mode])
        except TurboError as exc:
            if is_harmless(str(exc)):  # whole after a warning the binding cannot pass over
                return self._pillow(buf, "jpeg", out, sid, u)
            raise DecodeError(f"damaged JPEG: {exc}", sample_id=sid, format="jpeg") from None
        if direct:
            return result
        arr = orient(arr, orientation)
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
        src_channels = SPNG_CHANNELS[color]
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
        return self._place(convert_channels(arr, self.channels), geo, result)

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
        return self._place(convert_channels(arr, self.channels), geo, self._output(out, th, tw))

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

        im = pil_open(buf, sid, fmt)
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
            return convert_channels((arr16 >> 8).astype(np.uint8)[..., None], self.channels)
        if im.mode == "P" and "transparency" in im.info:
            im = im.convert("RGBA")
        if im.mode not in ("RGB", "L", "RGBA"):
            im = im.convert("RGBA" if "A" in im.mode or im.mode == "P" else "RGB")
        arr = np.asarray(im)
        if arr.ndim == 2:
            arr = arr[..., None]
        return convert_channels(arr, self.channels)
