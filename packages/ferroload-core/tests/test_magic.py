"""The one magic-byte table (`sniff_ext`, `sniff_image`)."""

from __future__ import annotations

import pytest

from ferroload_core import JPEG_SOF_MARKERS, PNG_MAGIC, sniff_audio, sniff_ext, sniff_image

SIGNATURES = [
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "jpg", "jpeg"),
    (PNG_MAGIC + b"\x00\x00\x00\rIHDR", "png", "png"),
    (b"GIF89a\x01\x00", "gif", "gif"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "webp", "webp"),
    (b"BM\x00\x00\x00\x00", "bmp", "bmp"),
    (b"II*\x00\x08\x00\x00\x00", "tiff", "tiff"),
    (b"MM\x00*\x00\x00\x00\x08", "tiff", "tiff"),
    (b"RIFF\x00\x00\x00\x00WAVEfmt ", "wav", None),
    (b"RIFF\x00\x00\x00\x00AVI LIST", "avi", None),
    (b"fLaC\x00\x00\x00\x22", "flac", None),
    (b"OggS\x00\x02", "ogg", None),
    (b"ID3\x04\x00", "mp3", None),
    (b"\xff\xfb\x90\x64", "mp3", None),  # MPEG-1 layer III frame sync
    (b"\xff\xf1\x50\x80", "aac", None),  # ADTS AAC: layer bits 00
    (b"RF64\xff\xff\xff\xffWAVEds64", "wav", None),
    (b"FORM\x00\x00\x00\x00AIFFCOMM", "aiff", None),
    (b"FORM\x00\x00\x00\x00AIFCFVER", "aiff", None),
    (b"\x00\x00\x00\x20ftypM4A \x00", "m4a", None),
    (b"\x00\x00\x00\x20ftypisom\x00", "mp4", None),
    (b"\x1a\x45\xdf\xa3\x01\x00\x00\x00\x00\x00\x00\x1fB\x82\x84webm", "webm", None),
    (b"\x1a\x45\xdf\xa3\x01\x00\x00\x00\x00\x00\x00\x1fB\x82\x88matroska", "mkv", None),
    (b"%PDF-1.7", "pdf", None),
    (b"\x93NUMPY\x01\x00", "npy", None),
    (b"hello world", None, None),
    (b"", None, None),
]


@pytest.mark.parametrize(("data", "ext", "image"), SIGNATURES)
def test_signatures(data: bytes, ext: str | None, image: str | None) -> None:
    assert sniff_ext(data) == ext
    assert sniff_ext(memoryview(data)) == ext
    assert sniff_image(data) == image
    audio = ext if ext in {"wav", "flac", "ogg", "aiff", "mp3", "aac", "m4a"} else None
    assert sniff_audio(data) == audio


def test_jpeg_frame_markers() -> None:
    assert sniff_ext(None) is None
    assert 0xC0 in JPEG_SOF_MARKERS and 0xC2 in JPEG_SOF_MARKERS
    assert not {0xC4, 0xC8, 0xCC} & JPEG_SOF_MARKERS
