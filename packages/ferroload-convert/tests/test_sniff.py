from __future__ import annotations

import io

import numpy as np
import pytest
from _convert_data import flac_bytes, image_bytes, wav_bytes
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from ferroload_convert._sniff import check_image, kind_of
from ferroload_core import sniff_ext

FORMATS = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tiff"}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_whole_images_pass_and_are_recognised(fmt: str) -> None:
    for i in range(3):
        data = image_bytes(i, fmt)
        assert sniff_ext(data) == FORMATS[fmt]
        assert check_image(data) is None
        assert kind_of(FORMATS[fmt]) == ("tensor", "image")


def test_progressive_jpeg_with_exif_and_trailing_bytes_passes() -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    buf = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(pixels).save(buf, "JPEG", progressive=True, exif=exif.tobytes())
    data = buf.getvalue()
    assert check_image(data) is None
    assert check_image(data + b"\x00trailing data some cameras add") is None


_JPEG = image_bytes(11, "JPEG")
_PNG = image_bytes(12, "PNG")


@given(st.integers(min_value=0, max_value=len(_JPEG) - 2))
def test_any_cut_jpeg_is_caught(cut: int) -> None:
    assert check_image(_JPEG[:cut]) is not None


@given(st.integers(min_value=0, max_value=len(_PNG) - 1))
def test_any_cut_png_is_caught(cut: int) -> None:
    assert check_image(_PNG[:cut]) is not None


def test_audio_and_other_formats_are_sniffed() -> None:
    assert sniff_ext(wav_bytes(0)) == "wav"
    assert sniff_ext(flac_bytes(0)) == "flac"
    assert sniff_ext(b"OggS\x00\x02") == "ogg"
    assert sniff_ext(b"ID3\x04") == "mp3"
    assert sniff_ext(b"\x00\x00\x00\x18ftypmp42") == "mp4"
    assert sniff_ext(b"%PDF-1.7") == "pdf"
    assert sniff_ext(b"") is None and sniff_ext(b"\xff") is None
    assert (
        check_image(wav_bytes(0)) == "not an image (no JPEG, PNG, GIF, WebP, BMP or TIFF signature)"
    )


@pytest.mark.parametrize(
    ("ext", "kind"),
    [
        ("jfif", ("tensor", "image")),
        ("JPE", ("tensor", "image")),
        ("dib", ("tensor", "image")),
        ("aiff", ("tensor", "audio")),
        ("aif", ("tensor", "audio")),
        ("avif", ("bytes", "raw")),  # no codec of ours decodes it: its bytes as they are
    ],
)
def test_every_extension_the_codecs_decode_is_theirs(ext: str, kind: tuple[str, str]) -> None:
    assert kind_of(ext) == kind
