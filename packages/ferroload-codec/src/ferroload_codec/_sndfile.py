"""libsndfile (soundfile) and soxr for the audio decoder: loading, sniffing, reading, resampling.

Frames are read in pieces, so a header that overstates its length never allocates more
than the data holds; WAV-like containers and FLAC seek to a crop's start exactly, the
others are decoded forward from the start (libsndfile 1.2's seeks in those land hundreds
of frames off the target).
"""

from __future__ import annotations

import functools
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from ferroload_codec._errors import CodecUnavailableError, DecodeError

Frames: TypeAlias = npt.NDArray[np.float32]  # (frames, channels), as libsndfile and soxr use

#: soxr's quality preset ("HQ": 20-bit precision, 95% bandwidth, linear phase).
RESAMPLE_QUALITY = "HQ"
# Containers where libsndfile's seek is sample-accurate (checked against a full decode).
EXACT_SEEK = frozenset({"WAV", "WAVEX", "W64", "RF64", "AIFF", "AU", "CAF", "FLAC"})
#: The formats of `ferroload_core.sniff_audio` libsndfile decodes (not AAC, M4A).
SNDFILE_FORMATS = frozenset({"wav", "flac", "ogg", "aiff", "mp3"})
FORMAT_NAMES = {"WAV": "wav", "WAVEX": "wav", "RF64": "wav", "W64": "wav", "OGG": "ogg"}
_CHUNK_SAMPLES = 1 << 20  # whole files are decoded in pieces of 4 MiB, whatever the header says
SF_ERR_UNRECOGNISED_FORMAT = 1
SF_ERR_NO_STREAM = 7  # libsndfile's "file does not exist" for a stream with no valid frame


@functools.cache
def _soundfile_module() -> Any:
    import soundfile

    return soundfile


def load_soundfile() -> Any:
    """The `soundfile` module (`CodecUnavailableError` without it or libsndfile)."""
    try:
        return _soundfile_module()
    except (ImportError, OSError) as exc:  # OSError: the libsndfile shared library is missing
        raise CodecUnavailableError(
            f"audio decoding needs soundfile with libsndfile >= 1.1 (pip install soundfile): {exc}"
        ) from exc


def load_soxr() -> Any:
    """The `soxr` module (`CodecUnavailableError` without it)."""
    try:
        import soxr
    except ImportError as exc:
        raise CodecUnavailableError(
            f"resampling audio needs soxr (pip install soxr): {exc}"
        ) from exc
    return soxr


def wav_missing_bytes(buf: bytes | bytearray | memoryview) -> int:
    """How many bytes a RIFF/WAVE `data` chunk declares beyond the end of the input.

    libsndfile decodes a truncated WAV quietly, as if it were shorter; this tells it apart.
    A size of 0 or 0xFFFFFFFF (written by streaming encoders that never come back to fix
    the header) means "unknown" and never counts as missing.
    """
    if bytes(buf[:4]) != b"RIFF" or bytes(buf[8:12]) != b"WAVE":
        return 0
    pos, n = 12, len(buf)
    while pos + 8 <= n:
        size = int.from_bytes(buf[pos + 4 : pos + 8], "little")
        if bytes(buf[pos : pos + 4]) == b"data":
            return 0 if size in (0, 0xFFFFFFFF) else max(0, size - (n - pos - 8))
        pos += 8 + size + (size & 1)
    return 0


def resample(x: Frames, in_rate: int, out_rate: int, sid: str | None, fmt: str) -> Frames:
    lib = load_soxr()
    try:
        y: Frames = lib.resample(x, in_rate, out_rate, quality=RESAMPLE_QUALITY)
    except Exception as exc:  # soxr raises ValueError, RuntimeError, …
        raise DecodeError(
            f"cannot resample {in_rate} Hz to {out_rate} Hz: {exc}", sample_id=sid, format=fmt
        ) from None
    return y.reshape(-1, x.shape[1])


def read_frames(
    f: Any, start: int, n: int, total: int, exact_seek: bool, sid: str | None, fmt: str
) -> Frames:
    """Frames `[start, start + n)` as `(n, channels)` float32.

    Reads in pieces of at most `_CHUNK_SAMPLES` samples, so a header that overstates the
    length never allocates more than what the data actually holds.
    """
    chunk = max(1, _CHUNK_SAMPLES // f.channels)
    if start > 0 and exact_seek and f.seekable():
        f.seek(start)
    elif start > 0:  # decode forward, dropping what comes before the crop
        scratch = np.empty((min(chunk, start), f.channels), dtype=np.float32)
        skipped = 0
        while skipped < start and (k := _read_into(f, scratch[: start - skipped])):
            skipped += k
        if skipped < start:
            raise _truncated(total, skipped, sid, fmt)
    pieces: list[Frames] = []
    got = 0
    while got < n:
        piece = np.empty((min(chunk, n - got), f.channels), dtype=np.float32)
        k = _read_into(f, piece)
        if k == 0:
            break
        pieces.append(piece[:k])
        got += k
    if got < n:
        raise _truncated(total, start + got, sid, fmt)
    if len(pieces) == 1:
        return pieces[0]
    return np.concatenate(pieces) if pieces else np.empty((0, f.channels), np.float32)


def _read_into(f: Any, buf: Frames) -> int:
    """Decode the next `len(buf)` frames into the C-contiguous `buf`; returns how many came.

    Calls libsndfile directly: `SoundFile.read` seeks back to where it stopped after every
    read, and libsndfile's MP3 seek is fuzzy even to the current position, which garbles
    an MP3 read in pieces (the seek-free path is soundfile's documented C API).
    """
    sf = load_soundfile()
    lib, ffi, handle = (
        getattr(sf, "_snd", None),
        getattr(sf, "_ffi", None),
        getattr(f, "_file", None),
    )
    if lib is None or ffi is None or handle is None:  # a soundfile without them: public API
        return len(f.read(len(buf), dtype="float32", out=buf))
    got = int(lib.sf_readf_float(handle, ffi.cast("float *", ffi.from_buffer(buf)), len(buf)))
    if err := int(lib.sf_error(handle)):
        raise RuntimeError(ffi.string(lib.sf_error_number(err)).decode("utf-8", "replace"))
    return got


def _truncated(total: int, got: int, sid: str | None, fmt: str) -> DecodeError:
    return DecodeError(
        f"truncated {fmt}: the header declares {total} frames, the data ends after {got}",
        sample_id=sid,
        format=fmt,
    )
