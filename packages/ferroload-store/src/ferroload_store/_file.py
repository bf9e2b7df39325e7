"""A read-only, seekable file over ranged reads of one object (for pyarrow and friends)."""

from __future__ import annotations

import bisect
import io
from collections.abc import Sequence
from typing import Protocol

from ferroload_store._ranges import DEFAULT_MAX_GAP, coalesce_ranges


class _Sized(Protocol):
    @property
    def size(self) -> int: ...


class RangeSource(Protocol):
    """What a `RangeFile` reads through: a `Store` (typed apart so that this module does
    not import `_store`, which imports it)."""

    @property
    def uri(self) -> str: ...
    def head(self, path: str) -> _Sized: ...
    def get_range(self, path: str, start: int, length: int) -> bytes: ...
    def get_ranges(
        self,
        path: str,
        starts: Sequence[int],
        lengths: Sequence[int],
        *,
        size: int | None = ...,
        version: str | None = ...,
    ) -> list[memoryview]: ...


class RangeFile(io.RawIOBase):
    """Reads an object lazily with one range request per `read`, except for the ranges
    fetched ahead with `prefetch`.

    Pass it to `pyarrow.parquet` with `pre_buffer=True` so that column chunks are
    coalesced into few requests, or `prefetch` the chunks first.

    Args:
        store: the store holding the object.
        path: its key.
        size: its size, when known (else one `HEAD`).
        version: its version for the store's block cache, when known.
    """

    def __init__(
        self, store: RangeSource, path: str, size: int | None = None, version: str | None = None
    ) -> None:
        super().__init__()
        self._store = store
        self._path = path
        self._size = store.head(path).size if size is None else size
        self._version = version
        self._pos = 0
        self._prefetched: dict[int, tuple[int, memoryview]] = {}
        self._starts: list[int] = []

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

    def prefetch(self, starts: Sequence[int], lengths: Sequence[int]) -> None:
        """Fetch these ranges now, together (coalesced, in parallel, through the store's
        block cache when it has one); later reads inside one of them make no request.

        Parquet readers read column chunks one after another; prefetching the chunks a
        read will need turns that many round trips into one.
        """
        # Kept merged across small gaps: a reader's own coalescing (pyarrow joins column
        # chunks across holes) then still reads inside one kept range.
        plan = coalesce_ranges(starts, lengths, max_gap=DEFAULT_MAX_GAP)
        ms, ml = plan.starts.tolist(), plan.lengths.tolist()
        views = self._store.get_ranges(self._path, ms, ml, size=self._size, version=self._version)
        for s, n, v in zip(ms, ml, views, strict=True):
            if n:
                self._prefetched[s] = (s + n, v)
        self._starts = sorted(self._prefetched)

    def _from_prefetched(self, start: int, end: int) -> bytes | None:
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        s = self._starts[i]
        e, view = self._prefetched[s]
        if end > e:
            return None
        return bytes(view[start - s : end - s])

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._from_prefetched(self._pos, end) if self._starts else None
        if data is None:
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
