"""`Store`: one object-store interface over local disk, memory and the clouds (obstore)."""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy.typing as npt
import obstore

from ferroload_store._blocks import BlockReader
from ferroload_store._cache import BlockCache
from ferroload_store._cached_reads import CachedReads
from ferroload_store._commit import remote_put_if_absent
from ferroload_store._counters import StoreStats
from ferroload_store._direct import direct_ranges
from ferroload_store._errors import NotARegularFileError, ObjectExistsError, ObjectNotFoundError
from ferroload_store._file import RangeFile
from ferroload_store._info import ObjectInfo
from ferroload_store._local import LocalRoot
from ferroload_store._mapped import MappedFiles
from ferroload_store._objects import ObjectBackend
from ferroload_store._options import IOOptions
from ferroload_store._ranges import DEFAULT_MAX_READ
from ferroload_store._remote import translating
from ferroload_store._storage_options import normalize_storage_options
from ferroload_store._uri import ParsedURI
from ferroload_store._versions import cache_identity
from ferroload_store._writers import LocalFileWriter, ObjectWriter


class Store:
    """A dataset root on local disk, in memory, or in an object store.

    Paths given to methods are keys relative to the root, `/`-separated. Writes go through
    obstore (atomic put and put-if-absent on every backend); reads of local files use
    positional reads and memory maps of cached file descriptors, which are two orders of
    magnitude cheaper per call than a round trip through obstore's runtime. Requests to an
    object store run in parallel under a concurrency limit, with retries and timeouts, as
    its [`IOOptions`][ferroload_store.IOOptions] say.

    A store pickles to its URI and options (for worker processes). obstore cannot make
    requests in a process forked after it made some: use the `spawn` or `forkserver`
    start method for workers that read object stores.

    Create one with [`open_store`][ferroload_store.open_store].
    """

    def __init__(
        self,
        parsed: ParsedURI,
        *,
        storage_options: Mapping[str, Any] | None = None,
        io: IOOptions | None = None,
        cache: BlockCache | Literal["default"] | None = "default",
    ):
        if not (cache is None or cache == "default" or isinstance(cache, BlockCache)):
            raise TypeError(f"cache must be a BlockCache, 'default' or None, got {cache!r}")
        self._cache_spec = cache
        self._cached: CachedReads | None = None
        self._parsed = parsed
        self._storage_options = (
            normalize_storage_options(parsed.location, storage_options)
            if parsed.kind == "object"
            else dict(storage_options or {})
        )
        self._io = io if io is not None else IOOptions()
        if not isinstance(self._io, IOOptions):
            raise TypeError(f"io must be an IOOptions, got {type(io).__name__}")
        # The parts: a local root's files (`LocalRoot`, read through `MappedFiles`), the
        # obstore side (`ObjectBackend`: every write, memory and object stores), and an
        # object store's block cache reads (`CachedReads`, made on first use).
        self._lock = threading.Lock()  # guards the lazy `_cached`
        self.stats = StoreStats()
        self._disk: LocalRoot | None = None
        self._files: MappedFiles | None = None
        if parsed.kind == "local":
            self._disk = LocalRoot(Path(parsed.location), parsed.uri)
            self._files = MappedFiles(self._disk, self.stats)
        local_root = self._disk.path if self._disk is not None else None
        self._objects = ObjectBackend(
            parsed, self._storage_options, self._io, self.stats, local_root
        )
        self._remote = self._objects.remote

    # ------------------------------------------------------------------ identity

    @property
    def uri(self) -> str:
        """The canonical URI of the root."""
        return self._parsed.uri

    @property
    def is_local(self) -> bool:
        """True when the root is a local directory."""
        return self._disk is not None

    def local_path(self, path: str = "") -> Path | None:
        """The filesystem path of `path` (resolved), or None when the store is not local.

        For a reader that opens the file by name (pyarrow, DuckDB): a file that exists is
        opened the way the store opens files (no symlink out of the root, never
        blocking) and must be a regular file; a missing one is returned as it is.

        Raises:
            UnsafePathError: if `path` is unsafe or resolves (through a symlink) outside
                the root.
            NotARegularFileError: (an `ObjectNotFoundError`) if it names a FIFO, a
                device, a socket or a folder, which such a reader would wait on for
                ever or read without end.
        """
        if self._disk is None:
            return None
        if not path:
            return self._disk.path
        real = self._disk.file(path, resolve=True)
        try:
            with self._errors(path, "open"):
                os.close(self._disk.open(path))
        except NotARegularFileError:
            raise
        except ObjectNotFoundError:  # missing: the reader says so, as before
            pass
        return real

    def map_local(self, path: str) -> mmap.mmap | bytes | None:
        """The bytes of `path` as a read-only memory map (an empty file: `b""`), or None
        when the store is not local: for a reader that takes a buffer (pyarrow's
        `BufferReader`) instead of opening the file by name, so that what it reads is the
        very file the store checked, opened the way the store opens files (no symlink out
        of the root, never blocking, a regular file only).

        Raises:
            UnsafePathError: if `path` is unsafe or resolves outside the root.
            ObjectNotFoundError: if it does not exist.
            NotARegularFileError: (an `ObjectNotFoundError`) if it names a FIFO, a
                device, a socket or a folder.
        """
        if self._disk is None:
            return None
        with self._errors(path, "open"):
            fd = self._disk.open(path)
            try:
                if os.fstat(fd).st_size == 0:
                    return b""
                return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    @property
    def io(self) -> IOOptions:
        """How this store reads from an object store (ignored by local and memory stores)."""
        return self._io

    def __getstate__(self) -> dict[str, Any]:
        return {
            "parsed": self._parsed,
            "storage_options": self._storage_options,
            "io": self._io,
            "cache": self._cache_spec,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["parsed"],
            storage_options=state["storage_options"],
            io=state.get("io"),
            cache=state.get("cache", "default"),
        )

    # ------------------------------------------------------------------ block cache

    def _cached_reads(self) -> CachedReads | None:
        """The block cache reads of an object store (made on first use: the default
        cache directory is created only when a read needs it)."""
        if self._remote is None or self._cache_spec is None:
            return None
        if self._cached is None:
            with self._lock:
                if self._cached is None:
                    spec = self._cache_spec
                    cache = BlockCache.default() if isinstance(spec, str) else spec
                    reader = BlockReader(cache, self._cache_identity())
                    self._cached = CachedReads(reader, self._remote, self._parsed.prefix)
        return self._cached

    def _block_reader(self) -> BlockReader | None:
        """The block cache reader of an object store (None without a cache)."""
        cached = self._cached_reads()
        return cached.reader if cached is not None else None

    def _cache_identity(self) -> str:
        """What names this store in cache keys (`cache_identity`: URI and endpoint)."""
        return cache_identity(self._parsed, self._storage_options, self._io)

    @property
    def cache(self) -> BlockCache | None:
        """The block cache that range reads of this object store go through (None for
        local and memory stores, or when opened with `cache=None`)."""
        reader = self._block_reader()
        return reader.cache if reader is not None else None

    @property
    def block_size(self) -> int | None:
        """The size of the blocks range reads fetch and cache (None without a cache)."""
        reader = self._block_reader()
        return reader.block_size if reader is not None else None

    def cache_keys(
        self,
        path: str,
        blocks: Sequence[int],
        *,
        size: int | None = None,
        version: str | None = None,
    ) -> list[str]:
        """The block cache keys of `blocks` of object `path` as this store makes them
        (store identity, object identity, caller's version); empty without a cache.

        The object's identity is its ETag and size (else last-modified and size) as the
        backend gives them, looked up once per object: a dataset deleted and re-created
        at the same URI has new ETags, so its blocks get new keys even where its
        manifest tags repeat.

        Raises:
            ObjectNotFoundError: if the object does not exist (its identity is read).
        """
        cached = self._cached_reads()
        return [] if cached is None else cached.keys(self, path, blocks, size, version)

    def prefetch_blocks(
        self,
        path: str,
        blocks: npt.ArrayLike,
        *,
        size: int | None = None,
        version: str | None = None,
    ) -> None:
        """Fetch blocks of `path` into the block cache ahead of a read (those cached
        already cost a `stat` each); a no-op without a cache.

        Args:
            path: the object's key.
            blocks: block indices (`offset // block_size`).
            size: the object's size, when known (else one `HEAD` per object).
            version: its version (ETag, generation, or a tag the caller guarantees
                changes with the content), when known.
        """
        cached = self._cached_reads()
        if cached is not None:
            cached.prefetch(self, path, blocks, size, version)

    def mark_cold_blocks(
        self,
        path: str,
        blocks: npt.ArrayLike,
        *,
        size: int | None = None,
        version: str | None = None,
    ) -> None:
        """Tell the block cache that these blocks will not be read again soon (this
        epoch): they are evicted before any other. A no-op without a cache."""
        cached = self._cached_reads()
        if cached is not None:
            cached.mark_cold(self, path, blocks, size, version)

    # ------------------------------------------------------------------ internals

    def _errors(self, path: str, action: str) -> AbstractContextManager[None]:
        """Translate the backend and OS errors raised inside into ferroload errors."""
        return translating(self.uri, path, action)

    def close(self) -> None:
        """Close cached file descriptors and stop I/O threads (the store stays usable)."""
        self._objects.close()
        if self._files is not None:
            self._files.close()

    def __del__(self) -> None:
        # not contextlib.suppress: at interpreter exit this module's globals (`suppress`,
        # `os`) may already be None, and the error would be printed as "Exception ignored"
        try:  # noqa: SIM105  (see above)
            self.close()
        except Exception:  # nothing to report from a finalizer
            pass

    # ------------------------------------------------------------------ reads

    def get(self, path: str) -> bytes:
        """Read a whole object.

        Raises:
            ObjectNotFoundError: if it does not exist.
        """
        if self._disk is not None:
            with self._errors(path, "get"):
                data = self._disk.read(path)
        else:
            key = self._objects.key(path)
            data = self._objects.call(
                lambda ob: obstore.get(ob, key).bytes().to_bytes(), path, "get"
            )
        self.stats.add_read(1, len(data))
        return data

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Read `length` bytes at `start`.

        Raises:
            ObjectNotFoundError: if the object does not exist.
            ObjectTruncatedError: if the object ends before `start + length`.
        """
        if self._files is not None:
            return self._files.get_range(path, start, length)
        return self._objects.get_range(path, start, length)

    def get_ranges(
        self,
        path: str,
        starts: npt.ArrayLike,
        lengths: npt.ArrayLike,
        *,
        max_gap: int | None = None,
        max_read: int = DEFAULT_MAX_READ,
        size: int | None = None,
        version: str | None = None,
    ) -> list[memoryview]:
        """Read many ranges of one object with as few requests as possible.

        Ranges closer than `max_gap` are merged into one read (see
        [`coalesce_ranges`][ferroload_store.coalesce_ranges]); the result holds one
        zero-copy view per input range, in input order. On an object store, merged
        reads longer than `IOOptions.part_size` are fetched as parallel parts, and every
        request runs under the store's concurrency limit and retry policy.

        Args:
            path: the object's key.
            starts: start offset of each range.
            lengths: length of each range.
            max_gap: largest gap read through to merge two ranges; `IOOptions.max_gap`
                (64 KiB by default) when not given.
            max_read: largest merged read.
            size: the object's size, when the caller knows it (object stores with a
                block cache: saves a `HEAD`).
            version: the object's version for the cache keys, when known (ETag, or a
                tag that changes whenever the content does).

        With a block cache (object stores, by default), the object is read in aligned
        blocks of `block_size`: each block is fetched once, kept on local disk and
        served from there; ranges within one block are zero-copy views of it.

        Raises:
            ObjectNotFoundError: if the object does not exist.
            ObjectTruncatedError: if the object ends before one of the ranges does;
                `end` is the first offset past the data that could not be read.
        """
        if self._files is not None:
            return self._files.ranges(path, starts, lengths)
        cached = self._cached_reads()
        if cached is not None:
            return cached.ranges(self, path, starts, lengths, size, version)
        gap = self._io.max_gap if max_gap is None else max_gap
        read = partial(self._objects.read, path)
        return direct_ranges(read, self.uri, path, starts, lengths, max_gap=gap, max_read=max_read)

    def open_input(self, path: str) -> RangeFile:
        """A seekable read-only file over `path` that fetches byte ranges on demand.

        Raises:
            ObjectNotFoundError: if the object does not exist.
        """
        return RangeFile(self, path)

    def head(self, path: str) -> ObjectInfo:
        """Size, modification time and ETag of one object.

        Raises:
            ObjectNotFoundError: if it does not exist.
        """
        self.stats.add(head_requests=1)
        if self._disk is not None:
            with self._errors(path, "head"):
                return self._disk.head(path)
        return self._objects.head(path)

    def exists(self, path: str) -> bool:
        """True when the object exists."""
        try:
            self.head(path)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix: str = "", *, offset: str | None = None) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, sorted by key.

        Args:
            prefix: key prefix: a "directory" ending in `/`, or any string keys start with.
            offset: only keys lexically greater than this one (cheap on object stores).
        """
        self.stats.add(list_requests=1)
        if self._disk is not None:
            if not self._disk.path.is_dir():
                return []
            directory = prefix[: prefix.rfind("/") + 1]
            with self._errors(prefix, "list"):
                local = self._disk.list(directory, prefix, offset)
            return sorted(local, key=lambda o: o.path)
        return self._objects.list_objects(prefix, offset)

    # ------------------------------------------------------------------ writes

    def put(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write an object atomically, replacing any object at `path`."""
        payload = bytes(data)
        if self._disk is not None:
            self._disk.file(path)
        key = self._objects.key(path)
        self._objects.call(lambda ob: obstore.put(ob, key, payload), path, "put")
        self.stats.add(put_requests=1, bytes_written=len(data))

    def put_if_absent(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Create an object only if nothing exists at `path` (atomic, never a rename).

        This is the commit primitive: of several concurrent callers, exactly one succeeds.
        On an object store it is a conditional put (`If-None-Match: *` on S3). When an
        attempt fails in a way that leaves open whether it landed (a dropped connection,
        a 5xx) and its retry then finds an object at `path`, the object is read back: if
        it holds exactly `data`, the earlier attempt landed and the call succeeds.

        Raises:
            ObjectExistsError: if an object already exists at `path`.
            NotARegularFileError: if a local `path` holds a FIFO, a device, a socket or
                a folder (no object, but nothing can be created there either).
            UnsupportedOperationError: if the backend has no conditional put (plain
                HTTP(S) servers).
        """
        payload = bytes(data)
        if self._remote is not None:
            remote_put_if_absent(
                self._remote, self._objects.key(path), path, payload, self._get_or_none
            )
        else:
            if self._disk is not None:
                self._disk.file(path)
            key = self._objects.key(path)
            try:
                self._objects.call(
                    lambda ob: obstore.put(ob, key, payload, mode="create"), path, "put-if-absent"
                )
            except ObjectExistsError:
                if self._disk is not None:  # a FIFO or a device there is no object taken
                    try:
                        with self._errors(path, "open"):
                            os.close(self._disk.open(path))
                    except NotARegularFileError:
                        raise
                    except OSError:
                        pass  # gone or unreadable since: the object existed all the same
                raise
        self.stats.add(put_requests=1, bytes_written=len(payload))

    def _get_or_none(self, path: str) -> bytes | None:
        try:
            return self.get(path)
        except ObjectNotFoundError:
            return None

    def open_writer(self, path: str) -> ObjectWriter:
        """A stream that becomes the object at `path` on `close()`; `abort()` drops it.

        On an object store the stream is a multipart upload; its requests are retried by
        obstore itself (`IOOptions.retries` times, with the same backoff), and are not
        counted in `stats.retries`.
        """
        if self._disk is not None:
            return LocalFileWriter(self._disk.file(path), self.stats)
        return self._objects.writer(path)

    def delete(self, paths: str | Sequence[str]) -> None:
        """Delete objects; missing ones are ignored."""
        keys = [paths] if isinstance(paths, str) else list(paths)
        for key in keys:
            self.stats.add(delete_requests=1)
            if self._disk is not None and self._files is not None:
                self._files.drop(key)
                with self._errors(key, "delete"):
                    self._disk.delete(key)
                continue
            with suppress(ObjectNotFoundError):
                self._objects.delete(key)
