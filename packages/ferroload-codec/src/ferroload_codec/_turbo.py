"""libjpeg-turbo's TurboJPEG API with one decompressor per thread: one C call per image.

PyTurboJPEG finds and loads the library (it knows where each platform keeps it). Its own
`decode` opens and destroys a decompressor for every call and goes through seven ctypes
calls per image, each of which drops and retakes the GIL; with several decode threads that
hand-over costs more than the Python work itself. Here each thread keeps one decompressor,
and an image costs one decompress call, straight into the caller's array (the decoder
reads the size from the frame header itself; `header` serves `image_info`).

The decompress call releases the GIL, except for tiny images (at most `GIL_HELD_PIXELS`
out and `GIL_HELD_BYTES` in, which bounds the time it is held to tens of us): their
decompression takes less time than the Python around each image, and two threads that
hand the GIL to each other twice an image wait on each other more than they decode
(32x32: 19.7 us an image on 2 threads against 16.8 on 1; 48x48: 27.6 against 21.8).
Holding it, a batch of tiny images decodes as fast on several threads as on one (17.1,
22.0); from 64x64 on, releasing it wins (21.6 us on 2 threads against 29.6 on 1).
`holds_gil` says which images are tiny: a batch of them that must come here (they need
resizing, or simplejpeg is missing) decodes on one thread, where a second could only
wait for the GIL. A batch of tiny JPEGs already at the output size does not come here:
`_jpeg_fast` decodes it through simplejpeg, whose Cython call releases the GIL around
less Python, on all the pool's threads (20,000 32x32 JPEGs in batches of 256, 2 cores:
through this binding ~36k images/s, 27.6 us of CPU an image, one thread or two;
through simplejpeg ~66k on one thread, 15.2 us, and ~77k on two, 23.6 us). Two threads
do not double it: each still drops and retakes the GIL twice an image (simplejpeg's
header call and its decompression), and they wait on each other for it, which costs
CPU; 1.24-1.52x in the medians of three runs, 1.0-1.6x in single rounds.

A decompressor that reported an error is destroyed and replaced. Even so, a header too
short to parse can leave the previous image's size in place without an error, so callers
take the size from the frame header (`_sniff.jpeg_frame`, which walks the markers by
libjpeg's grammar; `image_info` cross-checks the two), which such a header lacks.

The decompress call writes the image from the output's top-left corner at the largest of
libjpeg-turbo's scaled sizes that fits the output, which is smaller than the output when
the caller misjudged the image's size; the rest of the output would then keep what it
held before (a previous batch's pixels). So `decode_into` writes a canary into the
output's last pixel first: when it is still there after the call, libjpeg's own header
decides (one more call, for about one image in 256 with a grey output, by chance), and
an image that did not fill the output is a `TurboError`.

libjpeg *warnings* are errors here, with one exception: "extraneous bytes before marker",
after which the image decodes completely. A truncated file, for instance, is only a
warning to libjpeg (it fills the rest with grey).

Where the system has no libturbojpeg, `SimpleJpeg` offers the same two calls over the
libjpeg-turbo that simplejpeg's wheels bundle (it releases the GIL while decoding and
scales in the DCT domain too): the same pixels, no system package.
"""

from __future__ import annotations

import ctypes
import threading
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

#: TurboJPEG pixel formats and colour spaces (turbojpeg.h).
PIXEL_FORMATS = {"RGB": 0, "L": 6, "RGBA": 7}
COLORSPACE_CMYK, COLORSPACE_YCCK = 3, 4
_TJERR_WARNING = 0
_HARMLESS_WARNINGS = ("extraneous bytes before marker",)
#: Written into the last pixel of an output before it is decoded (see above); the alpha
#: byte is never it: libjpeg-turbo writes 255 there.
_CANARY = b"\x5a\xc3\x17\x00"
_CANARIES = {c: np.frombuffer(_CANARY[:c], dtype=np.uint8) for c in (1, 3, 4)}
#: Output pixels and encoded bytes up to which an image decompresses with the GIL held
#: (see above; a 48x48 photo at quality 95 is 1.8-2.4 KB).
GIL_HELD_PIXELS, GIL_HELD_BYTES = 48 * 48, 4096


class TurboError(Exception):
    """libjpeg-turbo reported an error, or a warning that means damaged data."""


class JpegLib(Protocol):
    """What the image decoder needs of a libjpeg-turbo binding."""

    def header(self, data: bytes) -> tuple[int, int, int, int]: ...

    def decode_into(self, data: bytes, dst: npt.NDArray[np.uint8], pixel_format: int) -> None: ...

    def holds_gil(self, pixels: int, nbytes: int) -> bool: ...


class _ScalingFactor(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


class Turbo:
    """Decode JPEGs with libjpeg-turbo, thread-safely (a decompressor per thread).

    Args:
        lib_path: the shared library PyTurboJPEG located.
    """

    def __init__(self, lib_path: str) -> None:
        self.lib_path = lib_path
        # Cheap calls keep the GIL (PyDLL): a GIL hand-over costs more than they do, and
        # with several decode threads every hand-over is a chance to wait. Only the
        # decompression of an image larger than tiny releases it (CDLL).
        lib = ctypes.PyDLL(lib_path)
        slow = ctypes.CDLL(lib_path)
        c_int_p = ctypes.POINTER(ctypes.c_int)
        self._init = lib.tjInitDecompress
        self._init.argtypes = []
        self._init.restype = ctypes.c_void_p
        self._header = lib.tjDecompressHeader3
        self._header.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, *[c_int_p] * 4]
        self._header.restype = ctypes.c_int
        # the same decompression, releasing the GIL (CDLL) and keeping it (tiny images)
        self._decompress, self._decompress_held = slow.tjDecompress2, lib.tjDecompress2
        for fn in (self._decompress, self._decompress_held):
            fn.argtypes = [
                ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p,
                ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ]  # fmt: skip
            fn.restype = ctypes.c_int
        self._destroy = lib.tjDestroy
        self._destroy.argtypes = [ctypes.c_void_p]
        self._destroy.restype = ctypes.c_int
        get_factors = lib.tjGetScalingFactors
        get_factors.argtypes = [c_int_p]
        get_factors.restype = ctypes.POINTER(_ScalingFactor)
        count = ctypes.c_int()
        factors = get_factors(ctypes.byref(count))
        #: libjpeg-turbo's scaling factors (num, den): the sizes a decompression can fill
        self.scaling_factors = tuple((factors[i].num, factors[i].denom) for i in range(count.value))
        self._error_str = lib.tjGetErrorStr2
        self._error_str.argtypes = [ctypes.c_void_p]
        self._error_str.restype = ctypes.c_char_p
        self._error_code = getattr(lib, "tjGetErrorCode", None)
        if self._error_code is not None:
            self._error_code.argtypes = [ctypes.c_void_p]
            self._error_code.restype = ctypes.c_int
        self._local = threading.local()

    def _state(self) -> Any:
        state = self._local
        if not hasattr(state, "handle"):
            handle = self._init()
            if not handle:
                raise TurboError("tjInitDecompress failed (out of memory?)")
            state.handle = handle
            state.ints = [ctypes.c_int() for _ in range(4)]
            state.refs = [ctypes.byref(i) for i in state.ints]
        return state

    def _check(self, handle: int, status: int) -> None:
        if status == 0:
            return
        message = (self._error_str(handle) or b"unknown libjpeg-turbo error").decode(
            errors="replace"
        )
        warning = self._error_code is not None and self._error_code(handle) == _TJERR_WARNING
        if warning and is_harmless(message):
            return
        # A decompressor that failed may keep state from the image it failed on: start over.
        self._destroy(handle)
        del self._local.handle
        raise TurboError(message)

    def header(self, data: bytes) -> tuple[int, int, int, int]:
        """(width, height, chroma subsampling, colour space) from a JPEG's header."""
        state = self._state()
        self._check(state.handle, self._header(state.handle, data, len(data), *state.refs))
        w, h, subsampling, colorspace = (i.value for i in state.ints)
        return w, h, subsampling, colorspace

    def holds_gil(self, pixels: int, nbytes: int) -> bool:
        """Whether an image of `nbytes` decompressed to `pixels` keeps the GIL (tiny)."""
        return pixels <= GIL_HELD_PIXELS and nbytes <= GIL_HELD_BYTES

    def decode_into(self, data: bytes, dst: npt.NDArray[np.uint8], pixel_format: int) -> None:
        """Decode into `dst` of shape (h, w, channels), rows may be strided.

        The JPEG is scaled in the DCT domain to `dst`'s size, which must be one of
        libjpeg-turbo's scaled sizes (`ceil(width * num / den)`).

        Raises:
            TurboError: damaged data, or an image that does not fill `dst` (its size is
                not what the caller read from its header): nothing of `dst` is handed
                out that the decoder did not write.
        """
        h, w, c = dst.shape
        if dst.strides[1] != c or dst.strides[2] != 1:
            raise ValueError("dst rows must be contiguous pixels")
        state = self._state()
        decompress = self._decompress_held if self.holds_gil(h * w, len(data)) else self._decompress
        last = dst[h - 1, w - 1]
        last[...] = _CANARIES[c]
        status = decompress(
            state.handle, data, len(data), dst.__array_interface__["data"][0],
            w, dst.strides[0], h, pixel_format, 0,
        )  # fmt: skip
        self._check(state.handle, status)
        if last.tobytes() == _CANARY[:c]:  # not written, or by chance the same pixel
            self._check_filled(data, h, w)

    def _check_filled(self, data: bytes, h: int, w: int) -> None:
        """Raise unless libjpeg-turbo decompresses `data` to exactly `h` x `w` at one of
        its scaling factors (the largest that fits is the one it takes)."""
        width, height, _, _ = self.header(data)
        for num, den in self.scaling_factors:
            if -(-width * num // den) == w and -(-height * num // den) == h:
                return
        raise TurboError(
            f"the JPEG is {width}x{height} to libjpeg-turbo, which cannot fill a {w}x{h} "
            "output from it (its frame header was read otherwise)"
        )


#: simplejpeg's names of TurboJPEG colour spaces and pixel formats.
_SJ_COLORSPACES = {
    "RGB": 0,
    "YCbCr": 1,
    "Gray": 2,
    "CMYK": COLORSPACE_CMYK,
    "YCCK": COLORSPACE_YCCK,
}
_SJ_PIXEL_FORMATS = {
    PIXEL_FORMATS["RGB"]: "RGB",
    PIXEL_FORMATS["L"]: "GRAY",
    PIXEL_FORMATS["RGBA"]: "RGBA",
}


class SimpleJpeg:
    """`Turbo`'s two calls over simplejpeg, whose wheels bundle libjpeg-turbo.

    Decoding goes straight into the caller's array when its rows are contiguous (else
    through a scratch array), scaled in the DCT domain to the array's size, exactly as
    `Turbo.decode_into` does; both give the same pixels.

    Args:
        module: the imported `simplejpeg`.
    """

    def __init__(self, module: ModuleType) -> None:
        #: The imported `simplejpeg` (the lean batch path calls it directly).
        self.module = module
        self.version: str = module.__version__

    def holds_gil(self, pixels: int, nbytes: int) -> bool:
        """False: simplejpeg releases the GIL while it decodes, whatever the size."""
        return False

    def header(self, data: bytes) -> tuple[int, int, int, int]:
        """(width, height, chroma subsampling (-1: not reported), colour space)."""
        try:
            h, w, colorspace, _subsampling = self.module.decode_jpeg_header(data)
        except ValueError as exc:
            if not is_harmless(str(exc)):
                raise TurboError(str(exc)) from None
            h, w, colorspace, _subsampling = self.module.decode_jpeg_header(data, strict=False)
        return w, h, -1, _SJ_COLORSPACES.get(colorspace, -1)

    def decode_into(self, data: bytes, dst: npt.NDArray[np.uint8], pixel_format: int) -> None:
        """Decode into `dst` of shape (h, w, channels), rows may be strided (see `Turbo`).

        Unlike `Turbo`, simplejpeg cannot finish an image after a harmless warning
        ("extraneous bytes before marker"): that raises `TurboError` with the warning,
        which `is_harmless` recognises, and the caller decodes the image another way.
        """
        h, w, c = dst.shape
        if dst.strides[1] != c or dst.strides[2] != 1:
            raise ValueError("dst rows must be contiguous pixels")
        target = dst if dst.strides[0] == w * c else np.empty((h, w, c), dtype=np.uint8)
        try:
            got = self.module.decode_jpeg(
                data, _SJ_PIXEL_FORMATS[pixel_format], min_height=h, min_width=w, buffer=target
            )
        except ValueError as exc:  # damaged data, or `dst` not a scaled size (too small)
            raise TurboError(str(exc)) from None
        if got.shape[:2] != (h, w):
            raise TurboError(f"{h}x{w} is not one of this JPEG's DCT-scaled sizes")
        if target is not dst:
            dst[...] = target


def is_harmless(message: str) -> bool:
    """True for a libjpeg warning after which the image decodes completely."""
    return any(warning in message for warning in _HARMLESS_WARNINGS)
