"""`Store`: one object-store interface over local disk, memory and the clouds (obstore)."""

from __future__ import annotations

import json
import logging
import mmap
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import obstore
import obstore.exceptions as obx
from obstore.store import HTTPStore as _ObHTTPStore
from obstore.store import LocalStore as _ObLocalStore
from obstore.store import MemoryStore as _ObMemoryStore

from ferroload_core import UnsafePathError, check_relative_path
from ferroload_store._backend import (
    duration_text,
    obstore_kwargs,
    obstore_retry_config,
    open_obstore,
    user_sets_retry_config,
)
from ferroload_store._blocks import BlockReader, Fetch
from ferroload_store._cache import BlockCache
from ferroload_store._counters import Counters
from ferroload_store._errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StoreError,
    UnsupportedOperationError,
)
from ferroload_store._file import RangeFile
from ferroload_store._nofollow import SymlinkSwappedError, open_below, unlink_below
from ferroload_store._options import IOOptions
from ferroload_store._ranges import DEFAULT_MAX_READ, coalesce_ranges
from ferroload_store._remote import RemoteEngine, check_not_forked, mark_runtime_used, translate
from ferroload_store._storage_options import normalize_storage_options
from ferroload_store._uri import ParsedURI, parse_uri
from ferroload_store._writers import LocalFileWriter, ObjectWriter, ObstoreWriter

logger = logging.getLogger(__name__)

_MEMORY_STORES: dict[str, _ObMemoryStore] = {}
_MEMORY_LOCK = threading.Lock()
_FD_CACHE_SIZE = 256
#: Mapped bytes made resident (an estimate) after which the local mappings' pages are
#: dropped from the process (see `Store._touched`).
MAPPED_TRIM_BYTES = 256 << 20
#: What a read fault of a mapped file makes resident at least: the kernel maps the
#: pages around it that are in the page cache (`fault_around_bytes`, 64 KiB by default).
_FAULT_AROUND = 64 << 10
# Storage options that say where an object store is (part of its cache identity), and
# those that are secrets (never part of it, even when their name matches).
_CACHE_IDENTITY_RE = re.compile(r"endpoint|region|account|url|host|project|virtual_hosted", re.I)
_SECRET_RE = re.compile(r"secret|key|token|password|sas|credential", re.I)
_CACHE_IDENTITY_ENV = (
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "GOOGLE_STORAGE_EMULATOR_HOST",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ENDPOINT",
)


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or `head` says about one object.

    Attributes:
        path: key relative to the store root, `/`-separated.
        size: size in bytes.
        last_modified: modification time (UTC).
        etag: the backend's entity tag, when it has one.
    """

    path: str
    size: int
    last_modified: datetime
    etag: str | None = None


@dataclass
class StoreStats(Counters):
    """Request and byte counters of one `Store` (reads, writes, listings).

    Useful to check that reads are coalesced: `get_requests` counts every request that
    fetched bytes, whatever its size (a read split into parts counts each part).
    `retries` counts the requests to an object store that failed transiently and were
    made again (see [`IOOptions`][ferroload_store.IOOptions]). `mapped_trims` counts
    the times the pages of local files' memory maps were dropped from the process (every
    `MAPPED_TRIM_BYTES` or so of mapped reads), which keeps its RSS bounded.
    """

    get_requests: int = 0
    bytes_read: int = 0
    put_requests: int = 0
    bytes_written: int = 0
    list_requests: int = 0
    head_requests: int = 0
    delete_requests: int = 0
    retries: int = 0
    mapped_trims: int = 0

    def add_read(self, requests: int, nbytes: int) -> None:
        """Count read requests and the bytes they returned (the hot path of `add`)."""
        with self._lock:
            self.get_requests += requests
            self.bytes_read += nbytes


class _OpenFile:
    """A cached file descriptor, its memory map, and how many reads use it right now."""

    __slots__ = ("evicted", "fd", "mapped", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.evicted = False
        self.mapped: mmap.mmap | None = None

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
        self._blocks: BlockReader | None = None
        self._versions: dict[str, tuple[int, str]] = {}
        self._dir_misses: dict[str, int] = {}
        self._parsed = parsed
        self._storage_options = (
            normalize_storage_options(parsed.location, storage_options)
            if parsed.kind == "object"
            else dict(storage_options or {})
        )
        self._io = io if io is not None else IOOptions()
        if not isinstance(self._io, IOOptions):
            raise TypeError(f"io must be an IOOptions, got {type(io).__name__}")
        self._ob: Any = None
        self._ob_lock = threading.Lock()
        self._remote: RemoteEngine | None = None
        self._writer_ob: Any = None
        self._fds: OrderedDict[str, _OpenFile] = OrderedDict()
        self._mapped_touched = 0  # an estimate of the mapped bytes made resident since a trim
        self._fd_lock = threading.Lock()
        self.stats = StoreStats()
        self._root = Path(parsed.location) if parsed.kind == "local" else None
        if parsed.kind == "memory":
            with _MEMORY_LOCK:
                self._ob = _MEMORY_STORES.setdefault(parsed.location, _ObMemoryStore())
        elif parsed.kind == "object":
            kwargs = obstore_kwargs(parsed.location, self._storage_options, self._io)
            client = kwargs["client_options"]
            timeouts = (
                f"timeout={duration_text(client.get('timeout'))}, "
                f"connect_timeout={duration_text(client.get('connect_timeout'))}"
            )
            self._remote = RemoteEngine(
                lambda: open_obstore(parsed, kwargs),
                uri=parsed.uri,
                io=self._io,
                stats=self.stats,
                timeouts=timeouts,
            )

    # ------------------------------------------------------------------ identity

    @property
    def uri(self) -> str:
        """The canonical URI of the root."""
        return self._parsed.uri

    @property
    def is_local(self) -> bool:
        """True when the root is a local directory."""
        return self._root is not None

    def local_path(self, path: str = "") -> Path | None:
        """The filesystem path of `path` (resolved), or None when the store is not local.

        Raises:
            UnsafePathError: if `path` is unsafe or resolves (through a symlink) outside
                the root.
        """
        if self._root is None:
            return None
        return self._local(path, resolve=True) if path else self._root

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

    def _block_reader(self) -> BlockReader | None:
        """The block cache reader of an object store (made on first use: the default
        cache directory is created only when a read needs it)."""
        if self._remote is None or self._cache_spec is None:
            return None
        if self._blocks is None:
            with self._ob_lock:
                if self._blocks is None:
                    spec = self._cache_spec
                    cache = BlockCache.default() if isinstance(spec, str) else spec
                    self._blocks = BlockReader(cache, self._cache_identity())
        return self._blocks

    def _cache_identity(self) -> str:
        """What names this store in cache keys: its URI and where it points (endpoint,
        region, account: from the storage options and the environment, never a secret),
        so that one URI on two endpoints never shares cache entries."""
        assert self._parsed.kind == "object"
        config = obstore_kwargs(self._parsed.location, self._storage_options, self._io)["config"]
        where = {
            str(k).lower(): str(v)
            for k, v in config.items()
            if _CACHE_IDENTITY_RE.search(str(k)) and not _SECRET_RE.search(str(k))
        }
        for name in _CACHE_IDENTITY_ENV:
            value = os.environ.get(name)
            if value:
                where.setdefault("env:" + name.lower(), value)
        return self.uri + "\n" + json.dumps(where, sort_keys=True)

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

    def _object_version(self, path: str, size: int | None, version: str | None) -> tuple[int, str]:
        """(size, version) of an object for the cache keys: the object's identity as the
        backend gives it (ETag and size, else last-modified and size), joined with the
        caller's `version` (the format layer's tag) when given. A dataset deleted and
        re-created at the same URI has new ETags, so its blocks get new keys even where
        its manifest tags repeat.

        The identity is looked up once per object and store: the first object of a
        directory with one `HEAD`, and at the second, the whole directory with one `LIST`
        (a stream over many shards then pays one round trip, not one per shard)."""
        known = self._versions.get(path)
        if known is None:
            known = self._identify(path)
        return (size if size is not None else known[0]), (
            known[1] if version is None else f"{version}|{known[1]}"
        )

    def _identify(self, path: str) -> tuple[int, str]:
        parent = path.rpartition("/")[0]
        with self._ob_lock:
            misses = self._dir_misses[parent] = self._dir_misses.get(parent, 0) + 1
            listing = bool(parent) and misses == 2
        if listing:
            for info in self.list(parent + "/"):
                self._versions.setdefault(info.path, (info.size, _identity(info)))
            known = self._versions.get(path)
            if known is not None:
                return known
        info = self.head(path)
        known = self._versions[path] = (info.size, _identity(info))
        return known

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

        Raises:
            ObjectNotFoundError: if the object does not exist (its identity is read).
        """
        reader = self._block_reader()
        if reader is None:
            return []
        _, version = self._object_version(path, size, version)
        return reader.keys(path, version, list(blocks))

    def _exact_fetch(self, path: str, size: int) -> Fetch:
        """Fetch reads of `path` in full (split, parallel, retried), or raise
        `ObjectTruncatedError` when the object is shorter than `size` says."""
        assert self._remote is not None
        remote, key = self._remote, self._key(path)

        def fetch(starts: Sequence[int], lengths: Sequence[int]) -> list[Any]:
            bufs, actual = remote.read(key, path, starts, lengths)
            for s, n, b in zip(starts, lengths, bufs, strict=True):
                if len(b) != n:
                    self._truncated(path, s + n, actual if actual is not None else s + len(b))
            return bufs

        return fetch

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
        reader = self._block_reader()
        if reader is None:
            return
        size, version = self._object_version(path, size, version)
        wanted = np.unique(np.asarray(blocks, dtype=np.int64)).tolist()
        reader.blocks(
            path, wanted, size=size, version=version, fetch=self._exact_fetch(path, size),
            keep=False,
        )  # fmt: skip

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
        reader = self._block_reader()
        if reader is None:
            return
        _, version = self._object_version(path, size, version)
        reader.mark_cold(path, np.asarray(blocks, dtype=np.int64).tolist(), version=version)

    # ------------------------------------------------------------------ internals

    def _key(self, path: str) -> str:
        return self._parsed.prefix + path

    def _real_root(self) -> str:
        assert self._root is not None
        return os.path.realpath(self._root)

    def _local(self, path: str, *, resolve: bool = False) -> Path:
        """The file of key `path` under the local root, refusing a key that leaves it.

        The key must pass `check_relative_path`, and the file (with `resolve`) or its
        folder must resolve inside the root: a symlink never leads a read, write or
        delete out of it. With `resolve` the resolved path is returned (what is opened
        is what was checked); without it, the unresolved one (a delete removes the link,
        never its target).

        Raises:
            UnsafePathError: if the key is unsafe or resolves outside the root.
        """
        assert self._root is not None
        what = f"key of store {self.uri}"
        check_relative_path(path, what=what)
        target = self._root / path
        real = os.path.realpath(target if resolve else target.parent)
        root = self._real_root()
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise UnsafePathError(
                path, what=what, reason="it resolves through a symlink to outside the root"
            )
        return Path(real) if resolve else target

    def _open_local(self, path: str) -> int:
        """A read-only descriptor of key `path`, checked by `_local` and opened from the
        root one component at a time without following a symlink (`open_below`), so a
        folder swapped for a link after the check cannot lead the open outside the root.

        Raises:
            UnsafePathError: if the key is unsafe, resolves outside the root, or became a
                symlink between the check and the open.
        """
        real = self._local(path, resolve=True)
        try:
            return open_below(self._real_root(), str(real))
        except SymlinkSwappedError as exc:
            raise UnsafePathError(
                path,
                what=f"key of store {self.uri}",
                reason="a folder on its way became a symlink while it was opened",
            ) from exc

    def _local_list(
        self, directory: str, prefix: str = "", offset: str | None = None
    ) -> list[ObjectInfo]:
        """The regular files under folder `directory` of the local root whose keys start
        with `prefix` and (with `offset`) sort after it, reached through no symlink: a
        listing never follows a link (so it never leaves the root, nor loops). Files of
        uploads in progress (`name#N`) are left out, as obstore does. Only the files kept
        are `stat`ed (a listing of the versions after the latest stats one or two files,
        not every version)."""
        assert self._root is not None
        folder = directory.rstrip("/")
        parts = folder.split("/") if folder else []
        start = os.path.join(self._root, *parts)
        if os.path.realpath(start) != os.path.join(self._real_root(), *parts):
            return []  # the folder is, or lies in, a symlink
        out: list[ObjectInfo] = []
        stack = [(start, folder)]
        while stack:
            path, key = stack.pop()
            try:
                it = os.scandir(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with it:
                for entry in it:
                    name = f"{key}/{entry.name}" if key else entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((entry.path, name))
                            continue
                        if not name.startswith(prefix) or (offset is not None and name <= offset):
                            continue
                        if not entry.is_file(follow_symlinks=False) or _uploading(entry.name):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted while listed
                        continue
                    when = datetime.fromtimestamp(st.st_mtime, UTC)
                    out.append(ObjectInfo(name, st.st_size, when, None))
        return out

    def _obstore(self) -> Any:
        """The obstore store (for local roots created on first write, with the directory)."""
        if self._remote is not None:
            return self._remote.store
        mark_runtime_used()
        if self._ob is None:
            with self._ob_lock:
                if self._ob is None:
                    assert self._root is not None
                    self._ob = _ObLocalStore(prefix=self._root, mkdir=True)
        return self._ob

    def _translate(self, exc: BaseException, path: str, action: str) -> StoreError:
        """The ferroload error for a backend or OS error raised while doing `action`."""
        return translate(exc, uri=self.uri, path=path, action=action)

    @contextmanager
    def _errors(self, path: str, action: str) -> Iterator[None]:
        try:
            yield
        except (obx.BaseError, OSError, NotImplementedError) as exc:
            translated = self._translate(exc, path, action)
            if translated is exc:
                raise
            raise translated from exc

    def _acquire(self, path: str) -> _OpenFile:
        """An open descriptor of local file `path`, pinned until `_release`.

        Descriptors are cached (LRU); one evicted while another thread still reads it is
        closed only when that read is done, so a read never hits a reused descriptor.
        """
        assert self._root is not None
        with self._fd_lock:
            f = self._fds.get(path)
            if f is None:
                f = _OpenFile(self._open_local(path))
                self._fds[path] = f
                while len(self._fds) > _FD_CACHE_SIZE:
                    _, old = self._fds.popitem(last=False)
                    old.evicted = True
                    old.mapped = None  # unmapped once no view of it is left
                    if old.users == 0:
                        os.close(old.fd)
            else:
                self._fds.move_to_end(path)
            f.users += 1
            return f

    def _release(self, f: _OpenFile) -> None:
        with self._fd_lock:
            f.users -= 1
            if f.evicted and f.users == 0:
                os.close(f.fd)

    def _drop_fd(self, path: str) -> None:
        with self._fd_lock:
            f = self._fds.pop(path, None)
            if f is not None:
                f.evicted = True
                f.mapped = None
                if f.users == 0:
                    os.close(f.fd)

    def close(self) -> None:
        """Close cached file descriptors and stop I/O threads (the store stays usable)."""
        if self._remote is not None:
            self._remote.close()
        with self._fd_lock:
            paths = list(self._fds)
        for path in paths:
            self._drop_fd(path)

    def __del__(self) -> None:
        with suppress(Exception):  # interpreter shutdown may have torn down os already
            self.close()

    # ------------------------------------------------------------------ reads

    def get(self, path: str) -> bytes:
        """Read a whole object.

        Raises:
            ObjectNotFoundError: if it does not exist.
        """
        if self._remote is not None:
            key = self._key(path)
            data = self._remote.call(
                lambda ob: obstore.get(ob, key).bytes().to_bytes(), path, "get"
            )
        else:
            with self._errors(path, "get"):
                if self._root is not None:
                    data = _read_fd(self._open_local(path))
                else:
                    data = obstore.get(self._obstore(), self._key(path)).bytes().to_bytes()
        self.stats.add_read(1, len(data))
        return data

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Read `length` bytes at `start`.

        Raises:
            ObjectNotFoundError: if the object does not exist.
            ObjectTruncatedError: if the object ends before `start + length`.
        """
        if self._remote is not None:
            (buf,), size = self._remote.read(self._key(path), path, [start], [length])
            if size is not None:
                self._truncated(path, start + length, size)
            return buf if isinstance(buf, bytes) else bytes(buf)
        try:
            if self._root is not None:
                f = self._acquire(path)
                try:
                    data = os.pread(f.fd, length, start)
                finally:
                    self._release(f)
            else:
                data = obstore.get_range(
                    self._obstore(), self._key(path), start=start, length=length
                ).to_bytes()
        except (obx.BaseError, OSError) as exc:
            raise self._translate(exc, path, "range read of") from exc
        self.stats.add_read(1, len(data))
        if len(data) != length:
            self._truncated(path, start + length, start + len(data))
        return data

    def _truncated(self, path: str, end: int, size: int) -> None:
        raise ObjectTruncatedError(
            f"{self.uri}/{path} is truncated: a read needed bytes up to {end} "
            f"but the object ends at {size}",
            uri=self.uri,
            path=path,
            size=size,
            end=end,
        )

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
        if self._root is not None:
            return self._mapped_ranges(path, starts, lengths)
        reader = self._block_reader()
        if reader is not None:
            return self._cached_ranges(reader, path, starts, lengths, size, version)
        gap = self._io.max_gap if max_gap is None else max_gap
        plan = coalesce_ranges(starts, lengths, max_gap=gap, max_read=max_read)
        if plan.num_reads == 0:
            return []
        rs, rl = plan.starts.tolist(), plan.lengths.tolist()
        size = None
        # Empty reads (empty payloads) need no request, and object stores refuse them.
        fetch = [k for k, n in enumerate(rl) if n]
        fs, fl = [rs[k] for k in fetch], [rl[k] for k in fetch]
        got_bufs: list[bytes] = []
        if not fetch:
            pass
        elif self._remote is not None:
            got_bufs, size = self._remote.read(self._key(path), path, fs, fl)
        else:
            with self._errors(path, "range read of"):
                got = obstore.get_ranges(self._obstore(), self._key(path), starts=fs, lengths=fl)
                got_bufs = [b.to_bytes() for b in got]
            self.stats.add_read(len(got_bufs), sum(len(b) for b in got_bufs))
        bufs: list[bytes] = [b""] * len(rl)
        for k, b in zip(fetch, got_bufs, strict=True):
            bufs[k] = b
        views = [memoryview(b) for b in bufs]
        ends = np.asarray(plan.offset_in_read) + np.asarray(lengths, dtype=np.int64).reshape(-1)
        got_len = np.asarray([len(b) for b in bufs], dtype=np.int64)[plan.read_of]
        short = ends > got_len
        if short.any():
            i = int(np.flatnonzero(short)[0])
            read = int(plan.read_of[i])
            end = int(rs[read] + ends[i])
            self._truncated(path, end, size if size is not None else int(rs[read] + got_len[i]))
        return [
            views[r][o : o + n]
            for r, o, n in zip(
                plan.read_of.tolist(),
                plan.offset_in_read.tolist(),
                np.asarray(lengths, dtype=np.int64).reshape(-1).tolist(),
                strict=True,
            )
        ]

    def _cached_ranges(
        self,
        reader: BlockReader,
        path: str,
        starts: npt.ArrayLike,
        lengths: npt.ArrayLike,
        size: int | None,
        version: str | None,
    ) -> list[memoryview]:
        s = np.asarray(starts, dtype=np.int64).reshape(-1)
        e = s + np.asarray(lengths, dtype=np.int64).reshape(-1)
        if not len(s):
            return []
        size, version = self._object_version(path, size, version)
        beyond = np.flatnonzero(e > size)
        if len(beyond):
            self._truncated(path, int(e[beyond[0]]), size)
        fetch = self._exact_fetch(path, size)
        return reader.ranges(path, s, e, size=size, version=version, fetch=fetch)

    def _mapped_ranges(
        self, path: str, starts: npt.ArrayLike, lengths: npt.ArrayLike
    ) -> list[memoryview]:
        """Ranges of a local file as zero-copy views of its memory map: one `fstat` per
        call, no system call and no copy per range (the page cache serves them). A file
        truncated since it was mapped is mapped again at its new size, so the ranges past
        its end are reported as truncated instead of faulting."""
        with self._errors(path, "range read of"):
            f = self._acquire(path)
            try:
                with self._fd_lock:
                    mapped = f.mapping()
            finally:
                self._release(f)
        size = len(mapped) if mapped is not None else 0
        s = np.asarray(starts, dtype=np.int64).reshape(-1)
        e = s + np.asarray(lengths, dtype=np.int64).reshape(-1)
        beyond = np.flatnonzero(e > size)
        if len(beyond):
            self._truncated(path, int(e[beyond[0]]), size)
        if not len(s):
            return []
        # one request: the whole call is served from one mapping
        nbytes = int((e - s).sum())
        self.stats.add_read(1, nbytes)
        self._touched(nbytes + len(s) * _FAULT_AROUND)
        if mapped is None:
            return [memoryview(b"") for _ in range(len(s))]
        view = memoryview(mapped)
        return [view[a:b] for a, b in zip(s.tolist(), e.tolist(), strict=True)]

    def _touched(self, nbytes: int) -> None:
        """Count mapped bytes made resident; past `MAPPED_TRIM_BYTES`, drop every cached
        mapping's pages from this process (`MADV_DONTNEED`).

        Pages of a memory-mapped file count in the process's RSS until it unmaps them,
        so an epoch of random reads over local shards would grow the RSS to the size of
        every shard read. Dropped pages stay in the page cache: a view handed out earlier
        that is read again faults them back in, with the same bytes.
        """
        self._mapped_touched += nbytes
        if self._mapped_touched < MAPPED_TRIM_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
            return
        with self._fd_lock:
            self._mapped_touched = 0
            for f in self._fds.values():
                if f.mapped is not None:
                    with suppress(OSError, ValueError):
                        f.mapped.madvise(mmap.MADV_DONTNEED)
            self.stats.add(mapped_trims=1)

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
        if self._remote is not None:
            key = self._key(path)
            return self._info(self._remote.call(lambda ob: obstore.head(ob, key), path, "head"))
        with self._errors(path, "head"):
            if self._root is not None:
                fd = self._open_local(path)
                try:
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                return ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC), None)
            meta = obstore.head(self._obstore(), self._key(path))
        return self._info(meta)

    def exists(self, path: str) -> bool:
        """True when the object exists."""
        try:
            self.head(path)
        except ObjectNotFoundError:
            return False
        return True

    def _info(self, meta: Mapping[str, Any]) -> ObjectInfo:
        key = str(meta["path"])
        prefix = self._parsed.prefix
        return ObjectInfo(
            key[len(prefix) :] if prefix and key.startswith(prefix) else key,
            int(meta["size"]),
            meta["last_modified"],
            meta.get("e_tag"),
        )

    def list(self, prefix: str = "", *, offset: str | None = None) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, sorted by key.

        Args:
            prefix: key prefix: a "directory" ending in `/`, or any string keys start with.
            offset: only keys lexically greater than this one (cheap on object stores).
        """
        self.stats.add(list_requests=1)
        if self._root is not None and not self._root.is_dir():
            return []
        kwargs: dict[str, Any] = {}
        if offset is not None:
            kwargs["offset"] = self._key(offset)
        # obstore lists whole path segments: ask for the "directory", filter the rest here.
        directory = prefix[: prefix.rfind("/") + 1]
        list_prefix = self._key(directory) or None
        if self._remote is not None:
            metas = self._remote.call(
                lambda ob: [m for chunk in obstore.list(ob, list_prefix, **kwargs) for m in chunk],
                prefix,
                "list",
            )
        elif self._root is not None:
            with self._errors(prefix, "list"):
                local = self._local_list(directory, prefix, offset)
            return sorted(local, key=lambda o: o.path)
        else:
            with self._errors(prefix, "list"):
                chunks = obstore.list(self._obstore(), list_prefix, **kwargs)
                metas = [m for chunk in chunks for m in chunk]
        out = [self._info(m) for m in metas]
        return sorted((o for o in out if o.path.startswith(prefix)), key=lambda o: o.path)

    # ------------------------------------------------------------------ writes

    def put(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write an object atomically, replacing any object at `path`."""
        payload = bytes(data)
        if self._remote is not None:
            key = self._key(path)
            self._remote.call(lambda ob: obstore.put(ob, key, payload), path, "put")
        else:
            if self._root is not None:
                self._local(path)
            with self._errors(path, "put"):
                obstore.put(self._obstore(), self._key(path), payload)
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
            UnsupportedOperationError: if the backend has no conditional put (plain
                HTTP(S) servers).
        """
        payload = bytes(data)
        if self._remote is None:
            if self._root is not None:
                self._local(path)
            with self._errors(path, "put-if-absent"):
                obstore.put(self._obstore(), self._key(path), payload, mode="create")
            self.stats.add(put_requests=1, bytes_written=len(payload))
            return
        if isinstance(self._remote.store, _ObHTTPStore):
            raise UnsupportedOperationError(
                f"put_if_absent is not supported by {self.uri}: plain HTTP(S) servers have no "
                "conditional put (the commit primitive); write datasets to a local path or "
                "an object store (s3://, gs://, az://) and serve them over HTTP read-only",
                uri=self.uri,
                path=path,
            )
        key = self._key(path)
        attempts = 0

        def attempt(ob: Any) -> None:
            nonlocal attempts
            attempts += 1
            obstore.put(ob, key, payload, mode="create")

        try:
            self._remote.call(attempt, path, "put-if-absent")
        except ObjectExistsError:
            # Retried (only transient failures are): did the attempt that failed land?
            if attempts < 2 or self._remote_get_or_none(path) != payload:
                raise
            logger.info("put-if-absent of %s/%s landed on an attempt that failed", self.uri, path)
        self.stats.add(put_requests=1, bytes_written=len(payload))

    def _remote_get_or_none(self, path: str) -> bytes | None:
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
        if self._root is not None:
            return LocalFileWriter(self._local(path), self.stats)
        if self._remote is None:
            return ObstoreWriter(self._obstore(), self._key(path), self.stats)
        check_not_forked(self.uri)
        mark_runtime_used()
        return ObstoreWriter(self._writer_store(), self._key(path), self.stats)

    def _writer_store(self) -> Any:
        """An obstore store that retries on its own, for multipart uploads (a stream
        cannot be replayed from here)."""
        pid = os.getpid()
        with self._ob_lock:
            if self._writer_ob is None or self._writer_ob[0] != pid:
                kwargs = obstore_kwargs(self._parsed.location, self._storage_options, self._io)
                if not user_sets_retry_config(self._storage_options):
                    kwargs["retry_config"] = obstore_retry_config(self._io)
                self._writer_ob = (pid, open_obstore(self._parsed, kwargs))
            return self._writer_ob[1]

    def delete(self, paths: str | Sequence[str]) -> None:
        """Delete objects; missing ones are ignored."""
        keys = [paths] if isinstance(paths, str) else list(paths)
        for key in keys:
            self.stats.add(delete_requests=1)
            if self._root is not None:
                self._drop_fd(key)
                target = self._local(key)
                with self._errors(key, "delete"):
                    try:
                        unlink_below(
                            self._real_root(), os.path.realpath(target.parent), target.name
                        )
                    except SymlinkSwappedError as exc:
                        raise UnsafePathError(
                            key,
                            what=f"key of store {self.uri}",
                            reason="its folder became a symlink while it was deleted",
                        ) from exc
                # Object stores have no directories; do not leave empty ones behind either.
                with suppress(OSError):
                    if target.parent != self._root:
                        target.parent.rmdir()
                continue
            try:
                if self._remote is not None:
                    self._remote.call(partial(_delete, key=self._key(key)), key, "delete")
                else:
                    with self._errors(key, "delete"):
                        obstore.delete(self._obstore(), self._key(key))
            except ObjectNotFoundError:
                pass


def _uploading(name: str) -> bool:
    """True for obstore's in-progress upload files, `name#N` (its own listing skips them)."""
    _, sep, tail = name.partition("#")
    return bool(sep and tail and tail.isascii() and tail.isdigit())


def _read_fd(fd: int) -> bytes:
    """All of the file open at `fd`, which is closed."""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _delete(ob: Any, key: str) -> None:
    obstore.delete(ob, key)


def open_store(
    uri: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    io: IOOptions | None = None,
    cache: BlockCache | Literal["default"] | None = "default",
) -> Store:
    """Open the storage root that `uri` names.

    Args:
        uri: a local path, `file://…`, `memory://name/prefix`, `s3://bucket/prefix`,
            `gs://…`, `az://…` (or another Azure form obstore accepts), or `https://…`
            (read-only).
        storage_options: obstore configuration for object stores: credentials,
            `endpoint`, `region`, `skip_signature`, …, as obstore's `from_url` takes them;
            fsspec's spellings (s3fs `key`, `secret`, `anon`, `client_kwargs`, gcsfs
            `token`, adlfs `connection_string`, …) are translated to them (see
            [`normalize_storage_options`][ferroload_store.normalize_storage_options]).
            HTTP client keys (`allow_http`, `timeout`, `proxy_url`, …) may sit among them
            or under `client_options`; `retry_config` passes through to obstore (which
            then retries on its own as well). Unset keys come from the environment
            (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as obstore reads them.
        io: concurrency, part size, retries and timeouts of object-store requests
            (defaults: [`IOOptions()`][ferroload_store.IOOptions]).
        cache: the block cache of an object store's range reads: `"default"`
            ([`BlockCache.default()`][ferroload_store.BlockCache.default], configured by
            `FERROLOAD_CACHE_DIR` / `FERROLOAD_CACHE_SIZE`, made on first use), a
            `BlockCache`, or None to read ranges straight from the store. Local and
            memory stores never cache.

    Returns:
        A `Store` rooted at `uri`.

    Raises:
        InvalidURIError: if the URI has an unknown scheme or is empty.
        StorageOptionsError: (a `ValueError`) for a storage option no store knows.
        StoreError: if obstore rejects the URI or the storage options.

    Examples:
        >>> store = open_store("memory://docs/example")
        >>> store.put("a.txt", b"hello")
        >>> store.get("a.txt")
        b'hello'
        >>> open_store("memory://docs/example", io=IOOptions(max_concurrency=4)).io.max_concurrency
        4
    """
    return Store(parse_uri(uri), storage_options=storage_options, io=io, cache=cache)


def _identity(info: ObjectInfo) -> str:
    """An object's identity for cache keys: its ETag (content-derived on S3, GCS, Azure)
    and size, else its last-modified time (to the second: `LIST` and `HEAD` report it at
    different precisions) and size."""
    etag = (info.etag or "").strip('"')
    if etag:
        return f"etag:{etag}|{info.size}"
    return f"mtime:{info.last_modified.replace(microsecond=0).isoformat()}|{info.size}"
