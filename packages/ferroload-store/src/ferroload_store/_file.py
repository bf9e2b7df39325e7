"""A read-only, seekable file over ranged reads of one object (for pyarrow and friends)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferroload_store._store import Store


class RangeFile(io.RawIOBase):
    """Reads an object lazily with one range request per `read`; nothing is prefetched.

    Pass it to `pyarrow.parquet` with `pre_buffer=True` so that column chunks are
    coalesced into few requests.
    """

    def __init__(self, store: Store, path: str, size: int | None = None) -> None:
        super().__init__()
        self._store = store
        self._path = path
        self._size = store.head(path).size if size is None else size
        self._pos = 0

    @property
    def name(self) -> str:
        return f"{self._store.uri}/{self._path}"

    @property
    def size(self) -> int:
        """The object's size in bytes."""
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._store.get_range(self._path, self._pos, end - self._pos)
        self._pos = end
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        n = len(data)
        memoryview(buffer)[:n] = data
        return n
