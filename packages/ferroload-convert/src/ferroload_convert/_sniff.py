"""What bytes are, from their first bytes; and a cheap check that an image is whole.

`check_image` reads structure only (markers, chunk lengths, size fields), never pixels:
it catches a file that is not an image, a header that does not parse and an image cut
short (a JPEG without its end marker, a PNG without `IEND`), in microseconds. It needs no
imaging library, so `ferroload-convert` does not depend on one.
"""

from __future__ import annotations

import struct

#: File extensions (lowercase) the importers treat as images.
IMAGE_EXTS = frozenset({"jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff"})
AUDIO_EXTS = frozenset({"flac", "wav", "mp3", "ogg", "opus", "m4a", "aac"})
VIDEO_EXTS = frozenset({"mp4", "webm", "mkv", "avi", "mov"})
TEXT_EXTS = frozenset({"txt", "cls", "json", "jsonl", "csv", "xml", "html", "md", "yaml"})

_PNG = b"\x89PNG\r\n\x1a\n"


def sniff_ext(data: bytes | memoryview | None) -> str | None:
    """The usual file extension of `data` from its magic bytes, or None if unknown.

    Examples:
        >>> sniff_ext(b"\\xff\\xd8\\xff\\xe0..."), sniff_ext(b"fLaC..."), sniff_ext(b"hello")
        ('jpg', 'flac', None)
    """
    if not data:
        return None
    head = bytes(data[:16])
    if head[:3] == b"\xff\xd8\xff":
        return "jpg"
    if head[:8] == _PNG:
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF":
        return {b"WEBP": "webp", b"WAVE": "wav", b"AVI ": "avi"}.get(head[8:12])
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "m4a" if head[8:12] in (b"M4A ", b"M4B ") else "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm" if b"webm" in bytes(data[:64]) else "mkv"
    if head[:5] == b"%PDF-":
        return "pdf"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    return None


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
        if marker in _SOF:
            frame = True
        pos += 2 + length
    if not frame:
        return "JPEG header does not parse: no frame header before the scan"
    # The entropy-coded data never holds 0xFF 0xD9 (0xFF is stuffed), so the end marker
    # after the scan start proves the file was not cut (bytes after it are allowed).
    if buf.rfind(b"\xff\xd9", pos) < 0:
        return "JPEG is cut short: no end-of-image marker"
    return None


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


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
