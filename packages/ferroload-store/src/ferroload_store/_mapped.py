"""`MappedFiles`: reads of a local store through cached file descriptors, as positional
reads or zero-copy views of read-only memory maps whose pages are dropped from the
process every `MAPPED_TRIM_BYTES` or so."""

from __future__ import annotations

import mmap
import os
import threading
from contextlib import suppress

import numpy as np
import numpy.typing as npt

from ferroload_core import LRU
from ferroload_store._counters import StoreStats
from ferroload_store._errors import truncated_error
from ferroload_store._local import LocalRoot
from ferroload_store._remote import translate, translating

_FD_CACHE_SIZE = 256
#: Mapped bytes made resident (an estimate) after which the local mappings' pages are
#: dropped from the process (see `MappedFiles._touched`).
MAPPED_TRIM_BYTES = 256 << 20
#: What a read fault of a mapped file makes resident at least: the kernel maps the
#: pages around it that are in the page cache (`fault_around_bytes`, 64 KiB by default).
_FAULT_AROUND = 64 << 10


class _OpenFile:
    """A cached file descriptor, its memory map, and how many reads use it right now."""

    __slots__ = ("evicted", "fd", "mapped", "resident", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.evicted = False
        self.mapped: mmap.mmap | None = None
        #: an estimate of this map's bytes made resident since the last trim (at most
        #: the file's size: a file's pages count once however often they are read)
        self.resident = 0

    def mapping(self) -> mmap.mmap | None:
        """The whole file mapped read-only (None for an empty file), advised random
        access (no read-ahead around each page a read touches).

        Made on first use, and made again when the file's size changed: touching a page
        past the end of a file truncated after it was mapped would kill the process
        (SIGBUS), so every use checks the size first (one `fstat`).
        """
        size = os.fstat(self.fd).st_size
        if self.mapped is not None and len(self.mapped) != size:
            self.mapped = None  # views handed out earlier keep the old map alive
        if self.mapped is None and size:
            self.mapped = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
            if hasattr(mmap, "MADV_RANDOM"):
                self.mapped.madvise(mmap.MADV_RANDOM)
        return self.mapped


def _evicted(_path: str, f: _OpenFile) -> None:
    """A descriptor leaves the cache: it is closed now if no read holds it, else by the
    last `_release` (its map is unmapped once no view of it is left)."""
    f.evicted = True
    f.mapped = None
    if f.users == 0:
        os.close(f.fd)


class MappedFiles:
    """The open files of one local store: a least-recently-used cache of descriptors
    (`_FD_CACHE_SIZE`), each with its memory map, and the reads through them.

    Thread safety: `_lock` guards every descriptor's `users`, `evicted` and `mapped`,
    and is held around every use of the cache `_fds` that goes with a change of them
    (lookup or insertion and the pin in `_acquire`, `_release`, `drop`, the trim). The
    `LRU` takes its own lock inside, and calls `_evicted` from `put` under both locks, so
    an eviction and a pin never interleave: a descriptor evicted while a read holds it
    is closed only when that read is done, and a read never hits a closed or reused
    descriptor. Lock order is always `_lock`, then the LRU's; `_evicted` takes no lock.

    Args:
        root: the store's root folder (descriptors are opened through it).
        stats: the store's counters (reads, trims).
    """

    def __init__(self, root: LocalRoot, stats: StoreStats) -> None:
        self._root = root
        self._stats = stats
        self._lock = threading.Lock()
        self._fds: LRU[str, _OpenFile] = LRU(_FD_CACHE_SIZE, on_evict=_evicted)
        self._touched_bytes = 0  # the files' `resident` estimates, summed

    def _acquire(self, path: str) -> _OpenFile:
        """An open descriptor of local file `path`, pinned until `_release`."""
        with self._lock:
            f = self._fds.get(path)
            if f is None:
                f = _OpenFile(self._root.open(path))
                self._fds.put(path, f)
            f.users += 1
            return f

    def _release(self, f: _OpenFile) -> None:
        with self._lock:
            f.users -= 1
            if f.evicted and f.users == 0:
                os.close(f.fd)

    def drop(self, path: str) -> None:
        """Forget the descriptor of `path` (closed once no read holds it)."""
        with self._lock:
            f = self._fds.pop(path)
            if f is not None:
                _evicted(path, f)

    def close(self) -> None:
        """Drop every cached descriptor."""
        for path in self._fds.held():
            self.drop(path)

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """`length` bytes of `path` at `start` (one `pread`).

        Raises:
            ObjectNotFoundError: if the file does not exist.
            ObjectTruncatedError: if it ends before `start + length`.
        """
        try:
            f = self._acquire(path)
            try:
                data = os.pread(f.fd, length, start)
            finally:
                self._release(f)
        except OSError as exc:  # as a ferroload error, raised from the OS one
            raise translate(exc, uri=self._root.uri, path=path, action="range read of") from exc
        self._stats.add_read(1, len(data))
        if len(data) != length:
            raise truncated_error(self._root.uri, path, end=start + length, size=start + len(data))
        return data

    def ranges(self, path: str, starts: npt.ArrayLike, lengths: npt.ArrayLike) -> list[memoryview]:
        """Ranges of a local file as zero-copy views of its memory map: one `fstat` per
        call, no system call and no copy per range (the page cache serves them). A file
        truncated since it was mapped is mapped again at its new size, so the ranges past
        its end are reported as truncated instead of faulting.

        Raises:
            ObjectTruncatedError: if the file ends before one of the ranges does.
        """
        with translating(self._root.uri, path, "range read of"):
            f = self._acquire(path)
            try:
                with self._lock:
                    mapped = f.mapping()
            finally:
                self._release(f)
        size = len(mapped) if mapped is not None else 0
        s = np.asarray(starts, dtype=np.int64).reshape(-1)
        e = s + np.asarray(lengths, dtype=np.int64).reshape(-1)
        beyond = np.flatnonzero(e > size)
        if len(beyond):
            raise truncated_error(self._root.uri, path, end=int(e[beyond[0]]), size=size)
        if not len(s):
            return []
        # one request: the whole call is served from one mapping
        nbytes = int((e - s).sum())
        self._stats.add_read(1, nbytes)
        if mapped is None:
            return [memoryview(b"") for _ in range(len(s))]
        self._touched(f, nbytes + len(s) * _FAULT_AROUND, size)
        view = memoryview(mapped)
        return [view[a:b] for a, b in zip(s.tolist(), e.tolist(), strict=True)]

    def _touched(self, f: _OpenFile, nbytes: int, size: int) -> None:
        """Count mapped bytes of `f` (of `size` bytes) made resident; past
        `MAPPED_TRIM_BYTES` in all, drop every cached mapping's pages from the process
        (`MADV_DONTNEED`).

        Pages of a memory-mapped file count in the process's RSS until it unmaps them,
        so an epoch of random reads over local shards would grow the RSS to the size of
        every shard read. A file counts at most its size: its pages are resident once
        however often they are read, so shards smaller than `MAPPED_TRIM_BYTES` in all
        are never trimmed (a trim costs more than it frees: every page faults back in,
        ~20 us a fault in a VM, on the loader's decode threads). Dropped pages stay in
        the page cache: a view handed out earlier that is read again faults them back
        in, with the same bytes.
        """
        with self._lock:
            grown = max(0, min(f.resident + nbytes, size) - f.resident)
            f.resident += grown
            self._touched_bytes += grown
            if self._touched_bytes < MAPPED_TRIM_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
                return
            self._touched_bytes = 0
            for g in self._fds.values():
                g.resident = 0
                if g.mapped is not None:
                    with suppress(OSError, ValueError):
                        g.mapped.madvise(mmap.MADV_DONTNEED)
            self._stats.add(mapped_trims=1)
