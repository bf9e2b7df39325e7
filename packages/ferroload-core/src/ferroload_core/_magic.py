"""What bytes are, from their first bytes: the one magic-byte table of ferroload (the
codecs pick their decoder by it, the importers name and check payloads by it)."""

from __future__ import annotations

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: A JPEG's start-of-image marker and the first byte of the marker after it.
JPEG_MAGIC = b"\xff\xd8\xff"
#: JPEG start-of-frame markers (baseline, extended, progressive, lossless, arithmetic …):
#: every 0xC0-0xCF but DHT (0xC4), JPG (0xC8) and DAC (0xCC).
JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: The image formats `sniff_ext` knows, by the extension it returns.
IMAGE_FORMATS = {"jpg": "jpeg", "png": "png", "gif": "gif", "webp": "webp", "bmp": "bmp",
                 "tiff": "tiff"}  # fmt: skip
#: The audio formats `sniff_ext` knows (the extension it returns is the format's name).
AUDIO_FORMATS = frozenset({"wav", "flac", "ogg", "aiff", "mp3", "aac", "m4a"})
#: Every extension `sniff_ext` returns for images, audio and video, by codec family: what
#: a payload of an `image`, `audio` or `video` modality can turn out to be.
MEDIA_EXTS: dict[str, tuple[str, ...]] = {
    "image": tuple(IMAGE_FORMATS),
    "audio": tuple(sorted(AUDIO_FORMATS)),
    "video": ("mp4", "webm", "mkv", "avi"),
}


def sniff_ext(data: bytes | bytearray | memoryview | None) -> str | None:
    """The usual file extension of `data` from its magic bytes (`jpg`, `png`, `gif`,
    `webp`, `bmp`, `tiff`, `wav`, `avi`, `flac`, `ogg`, `aiff`, `mp3`, `aac`, `m4a`,
    `mp4`, `webm`, `mkv`, `pdf`, `npy`), or None if unknown. Reads at most the first 64
    bytes.

    Examples:
        >>> sniff_ext(b"\\xff\\xd8\\xff\\xe0..."), sniff_ext(b"fLaC..."), sniff_ext(b"hello")
        ('jpg', 'flac', None)
    """
    if not data:
        return None
    head = bytes(data[:16])
    if head[:3] == JPEG_MAGIC:
        return "jpg"
    if head[:8] == PNG_MAGIC:
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF":
        return {b"WEBP": "webp", b"WAVE": "wav", b"AVI ": "avi"}.get(head[8:12])
    if head[:4] == b"RF64" and head[8:12] == b"WAVE":  # WAV over 4 GiB
        return "wav"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    # an ID3v2 tag, or an MPEG audio frame sync: layer bits 00 are ADTS AAC, others MPEG
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE6 > 0xE0):
        return "mp3"
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "aac"
    if head[4:8] == b"ftyp":
        return "m4a" if head[8:12] in (b"M4A ", b"M4B ") else "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm" if b"webm" in bytes(data[:64]) else "mkv"
    if head[:5] == b"%PDF-":
        return "pdf"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    return None


def sniff_image(data: bytes | bytearray | memoryview | None) -> str | None:
    """The image format `data` starts with (`jpeg`, `png`, `gif`, `webp`, `bmp`, `tiff`:
    the codecs' names), or None.

    Examples:
        >>> sniff_image(b"\\xff\\xd8\\xff\\xe0..."), sniff_image(b"fLaC...")
        ('jpeg', None)
    """
    ext = sniff_ext(data)
    return IMAGE_FORMATS.get(ext) if ext is not None else None


def sniff_audio(data: bytes | bytearray | memoryview | None) -> str | None:
    """The audio format `data` starts with (`wav`, `flac`, `ogg`, `aiff`, `mp3`, `aac`,
    `m4a`), or None.

    Examples:
        >>> sniff_audio(b"fLaC..."), sniff_audio(b"RF64....WAVE"), sniff_audio(b"hi")
        ('flac', 'wav', None)
    """
    ext = sniff_ext(data)
    return ext if ext in AUDIO_FORMATS else None
