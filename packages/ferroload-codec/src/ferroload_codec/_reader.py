"""A file over encoded bytes that copies only what a decoder reads (audio and video)."""

from __future__ import annotations

from typing import Any


class ByteReader:
    """A read-only, seekable file over encoded bytes, for decoders that read files
    (libsndfile's virtual I/O, PyAV's Python I/O).

    `io.BytesIO` copies a memoryview or bytearray whole when it is made: for a clip mapped
    from a shard, that reads (and copies) every page of it when a crop needs a fraction,
    and holds a second copy of a long video for as long as it is decoded. This hands the
    decoder only what it asks for, straight from the buffer. It seeks, tells and reads
    like `BytesIO`: a seek past the end is allowed (reads there return nothing), a
    relative seek before the start stops at 0, an absolute negative one is a ValueError.
    """

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self._buf = memoryview(buf)
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            if offset < 0:
                raise ValueError(f"negative seek value {offset}")
            self._pos = offset
        elif whence in (1, 2):
            self._pos = max(0, (self._pos if whence == 1 else len(self._buf)) + offset)
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        return self._pos

    def readinto(self, out: Any) -> int:
        """Copy the next bytes into the writable buffer `out`; how many came."""
        pos = self._pos
        n = max(0, min(len(out), len(self._buf) - pos))
        out[:n] = self._buf[pos : pos + n]
        self._pos = pos + n
        return n

    def read(self, size: int | None = -1) -> bytes:
        pos = self._pos
        end = len(self._buf) if size is None or size < 0 else min(len(self._buf), pos + size)
        data = bytes(self._buf[pos:end]) if end > pos else b""
        self._pos = max(pos, end)
        return data
