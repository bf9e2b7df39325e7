"""A cheap check that an image is whole, and what the importers call each kind of file.

What bytes are comes from `ferroload_core.sniff_ext`.

`check_image` reads structure only (markers, chunk lengths, size fields), never pixels:
it catches a file that is not an image, a header that does not parse and an image cut
short (a JPEG without its end marker, a PNG without `IEND`), in microseconds. It needs no
imaging library, so `ferroload-convert` does not depend on one.
"""

from __future__ import annotations

import struct

from ferroload_core import JPEG_SOF_MARKERS, sniff_ext

#: File extensions (lowercase) the importers treat as images.
#: The extensions of the image formats the importers check and the codecs decode
#: (`jfif`, `jpe`: JPEG; `dib`: BMP).
IMAGE_EXTS = frozenset(
    {"jpg", "jpeg", "jpe", "jfif", "png", "gif", "webp", "bmp", "dib", "tif", "tiff"}
)
AUDIO_EXTS = frozenset({"flac", "wav", "mp3", "ogg", "opus", "m4a", "aac", "aiff", "aif"})
VIDEO_EXTS = frozenset({"mp4", "webm", "mkv", "avi", "mov"})
TEXT_EXTS = frozenset({"txt", "cls", "json", "jsonl", "csv", "xml", "html", "md", "yaml"})


def kind_of(ext: str) -> tuple[str, str]:
    """(kind, codec_hint) of a modality whose payloads have extension `ext`.

    Examples:
        >>> kind_of("JPG"), kind_of("seg.png"), kind_of("flac"), kind_of("cls"), kind_of("npy")
        (('tensor', 'image'), ('tensor', 'image'), ('tensor', 'audio'), ('text', 'raw'), ('bytes', 'raw'))
    """
    last = ext.rsplit(".", 1)[-1].lower()
    if last in IMAGE_EXTS:
        return "tensor", "image"
    if last in AUDIO_EXTS:
        return "tensor", "audio"
    if last in VIDEO_EXTS:
        return "tensor", "video"
    if last in TEXT_EXTS:
        return "text", "raw"
    return "bytes", "raw"


#: Extensions of one format spelled otherwise, by the spelling `sniff_ext` returns.
_ALIASES = {"jpeg": "jpg", "jpe": "jpg", "jfif": "jpg", "tif": "tiff", "dib": "bmp",
            "aif": "aiff", "aifc": "aiff", "oga": "ogg", "opus": "ogg", "m4v": "mp4",
            "mov": "mp4"}  # fmt: skip


def same_format(a: str, b: str) -> bool:
    """Whether extensions `a` and `b` name one format (`jpeg` and `JPG`, `tif` and `tiff`).

    Examples:
        >>> same_format("JPEG", "jpg"), same_format("tif", "tiff"), same_format("png", "jpg")
        (True, True, False)
    """
    a, b = a.lower(), b.lower()
    return _ALIASES.get(a, a) == _ALIASES.get(b, b)


def true_ext(declared: str, data: bytes) -> str:
    """The file extension of `data`: its format's, as `sniff_ext` reads it from the bytes,
    else `declared` (also when both name one format: a `jpeg` modality's JPEGs stay
    `.jpeg`).

    Examples:
        >>> png = b"\\x89PNG\\r\\n\\x1a\\n"
        >>> true_ext("jpg", png), true_ext("jpeg", b"\\xff\\xd8\\xff"), true_ext("npy", b"?")
        ('png', 'jpeg', 'npy')
    """
    sniffed = sniff_ext(data)
    return declared if sniffed is None or same_format(sniffed, declared) else sniffed


def is_image_ext(ext: str) -> bool:
    """Whether `ext` (its last part: `seg.png` -> `png`) names an image format."""
    return ext.rsplit(".", 1)[-1].lower() in IMAGE_EXTS


def check_image(data: bytes | memoryview) -> str | None:
    """None if `data` is a whole image as far as its structure shows, else the reason.

    Examples:
        >>> check_image(b"not an image")
        'not an image (no JPEG, PNG, GIF, WebP, BMP or TIFF signature)'
        >>> check_image(b"\\xff\\xd8\\xff\\xe0\\x00\\x02")
        'JPEG is cut short: no start of scan'
    """
    buf = bytes(data) if isinstance(data, memoryview) else data
    fmt = sniff_ext(buf[:16])
    if fmt == "jpg":
        return _check_jpeg(buf)
    if fmt == "png":
        return _check_png(buf)
    if fmt == "gif":
        return None if len(buf) >= 13 else "GIF is cut short: no screen descriptor"
    if fmt == "webp":
        (size,) = struct.unpack_from("<I", buf, 4)
        return (
            None if len(buf) >= size + 8 else f"WebP is cut short: {len(buf)} of {size + 8} bytes"
        )
    if fmt == "bmp":
        if len(buf) < 26:
            return "BMP is cut short: no header"
        size, offset = struct.unpack_from("<I", buf, 2)[0], struct.unpack_from("<I", buf, 10)[0]
        if offset >= len(buf) or size > len(buf):
            return f"BMP is cut short: {len(buf)} bytes, the header says {size}"
        return None
    if fmt == "tiff":
        if len(buf) < 8:
            return "TIFF is cut short: no header"
        (ifd,) = struct.unpack_from("<I" if buf[:2] == b"II" else ">I", buf, 4)
        return None if 8 <= ifd < len(buf) else "TIFF header points past the end of the file"
    return "not an image (no JPEG, PNG, GIF, WebP, BMP or TIFF signature)"


def _check_jpeg(buf: bytes) -> str | None:
    pos, n = 2, len(buf)
    frame = False
    while True:
        if pos + 4 > n:
            return "JPEG is cut short: no start of scan"
        if buf[pos] != 0xFF:
            return f"JPEG header does not parse: no marker at byte {pos}"
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA:
            break
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(buf[pos + 2 : pos + 4], "big")
        if length < 2:
            return f"JPEG header does not parse: segment length {length} at byte {pos}"
        if marker in JPEG_SOF_MARKERS:
            frame = True
        pos += 2 + length
    if not frame:
        return "JPEG header does not parse: no frame header before the scan"
    # The entropy-coded data never holds 0xFF 0xD9 (0xFF is stuffed), so the end marker
    # after the scan start proves the file was not cut (bytes after it are allowed).
    if buf.rfind(b"\xff\xd9", pos) < 0:
        return "JPEG is cut short: no end-of-image marker"
    return None


def _check_png(buf: bytes) -> str | None:
    pos, n = 8, len(buf)
    first = True
    while pos + 8 <= n:
        length, kind = struct.unpack_from(">I4s", buf, pos)
        if first and kind != b"IHDR":
            return "PNG header does not parse: the first chunk is not IHDR"
        first = False
        end = pos + 12 + length
        if end > n:
            return f"PNG is cut short: chunk {kind.decode('latin-1')!r} needs {end} bytes, got {n}"
        if kind == b"IEND":
            return None
        pos = end
    return "PNG is cut short: no IEND chunk"
