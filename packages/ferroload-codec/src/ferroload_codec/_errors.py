"""Codec errors: each a `FerroloadError` and the builtin a caller would expect."""

from __future__ import annotations

from ferroload_core import FerroloadError


class DecodeError(FerroloadError, ValueError):
    """Bytes that could not be decoded (corrupt, truncated, empty).

    Attributes:
        sample_id: the sample, when the caller named it.
        format: the format the bytes looked like (`jpeg`, `png`, `flac`, …), if known.
    """

    def __init__(self, message: str, *, sample_id: str | None = None, format: str | None = None):
        self.sample_id = sample_id
        self.format = format
        if sample_id is not None:
            message = f"sample {sample_id!r}: {message}"
        super().__init__(message)


class UnsupportedFormatError(DecodeError):
    """Bytes in a format no available codec reads."""


class ImageTooLargeError(DecodeError):
    """An image whose header declares more pixels than the limit (a decompression bomb)."""


class AudioTooLongError(DecodeError):
    """Audio that would decode, or resample, to more samples than the limit
    (`max_samples`: a decompression bomb, or a rate that upsamples a file hugely)."""


class CodecUnavailableError(FerroloadError, ImportError):
    """A codec that needs an optional dependency which is not installed."""
