"""`BlockCache`: a content-addressed, size-limited, verified block cache on local disk.

The layout of a cache directory::

    <dir>/.lock                      the eviction lock (filelock)
    <dir>/.usage                     the shared size estimate (see `CacheDirectory.account`)
    <dir>/ab/cd/<key>                one entry: header + key + data, immutable once renamed
    <dir>/ab/cd/.tmp-<key>.<pid>.<r> an entry being written (or left by a killed writer)

An entry is `HEADER` (magic, format version, key length, data length, xxh3-64 of the
data), then the key in ASCII, then the data. It is written to a temporary file in its
own directory and renamed into place, so a reader sees a whole entry or none; it is
never modified afterwards. Entries are not fsync'ed: a power loss can leave a renamed
entry with lost data, and the verification on `get` catches that like any other damage.

Eviction is least-recently-used by modification time: `put` creates an entry with the
current time, `get` refreshes it (at most once per `_TOUCH_INTERVAL_NS`, so a hot entry
costs no extra syscall), `mark_cold` sets it to the epoch so that it goes first.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Iterable
from contextlib import suppress
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import platformdirs

from ferroload_store._cache_dir import CacheDirectory, cache_error
from ferroload_store._cache_entry import (
    KEY_RE,
    TMP_PREFIX,
    entry_header,
    read_entry,
    verify_entry,
    write_entry,
)
from ferroload_store._counters import CacheStats
from ferroload_store._errors import CacheConfigError, CacheError, InvalidCacheKeyError
from ferroload_store._nofollow import O_NOFOLLOW, READ_FLAGS

logger = logging.getLogger(__name__)

#: The default size of a cached block (the Store cuts objects into aligned blocks).
DEFAULT_BLOCK_SIZE = 4 << 20
#: The default limit of `BlockCache.default()` when `FERROLOAD_CACHE_SIZE` is not set.
DEFAULT_CACHE_SIZE = 50 << 30

_KEY_PERSON = b"ferroload-blk1"

# A hit refreshes an entry's mtime only when it is older than this, so a hot entry is
# not touched on every read (the age comes free from the fstat a read needs anyway).
_TOUCH_INTERVAL_NS = 10 * 10**9
_UTIME_FD = os.utime in os.supports_fd

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    **{p: 1024**i for i, p in enumerate("kmgtp", start=1)},
    **{p + "ib": 1024**i for i, p in enumerate("kmgtp", start=1)},
    **{p + "b": 1000**i for i, p in enumerate("kmgtp", start=1)},
}


def parse_size(text: str, *, name: str = "size") -> int:
    """Parse a byte size: plain bytes (`"1048576"`) or a number with a unit.

    `KB`, `MB`, `GB`, `TB` are powers of 1000; `KiB`, `MiB`, `GiB`, `TiB` and the bare
    `K`, `M`, `G`, `T` are powers of 1024. Case and spaces do not matter.

    Args:
        text: the size, for example `"50GiB"`, `"200MB"`, `"1.5 TiB"`.
        name: what the size is, for the error message (for example an environment variable).

    Returns:
        The size in bytes (at least 1).

    Raises:
        CacheConfigError: `text` is not a positive size.
    """
    match = _SIZE_RE.fullmatch(text)
    unit = _SIZE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise CacheConfigError(
            f"{name}={text!r} is not a size: give a number of bytes or a number with a "
            "unit, such as 200MB, 50GiB or 1.5TiB"
        )
    try:
        value = int(Decimal(match.group(1)) * unit)
    except InvalidOperation as exc:  # pragma: no cover  (the regex admits only decimals)
        raise CacheConfigError(f"{name}={text!r} is not a size") from exc
    if value <= 0:
        raise CacheConfigError(f"{name}={text!r} must be at least one byte")
    return value


class BlockCache:
    """A content-addressed, size-limited cache of object blocks on local disk.

    Several threads and processes (DDP ranks, DataLoader workers) may share one
    directory. Every entry is verified when read (magic, format version, key, length
    and an xxh3-64 of the data): a damaged, truncated or foreign entry is deleted,
    counted in `stats.corrupt`, and reported as a miss. Entries are written to a
    temporary file and renamed into place, so a killed writer leaves at most a
    temporary file, which the next eviction removes. When a `put` takes the cache past
    `max_bytes`, the least recently used entries (by modification time; `mark_cold`
    entries first) are evicted down to 90% of `max_bytes`.

    The size is tracked without scanning the directory on every `put`: each process adds
    what it writes to a shared estimate (`<directory>/.usage`), and an eviction scans
    the directory and resets the estimate to the true size. Entries written while
    another process evicts can escape the count until the next eviction, so the
    directory may briefly exceed `max_bytes` by a few blocks.

    Args:
        directory: where the entries live; created if missing. Use a local disk.
        max_bytes: the size limit in bytes (headers included).
        block_size: the block size the Store cuts objects into (4 MiB); recorded for the
            Store, part of every key.

    Raises:
        CacheError: the directory cannot be created or is not writable.
        CacheConfigError: `max_bytes` or `block_size` is not a positive integer.

    Examples:
        >>> import tempfile
        >>> from ferroload_store import BlockCache
        >>> cache = BlockCache(tempfile.mkdtemp(), max_bytes=64 << 20)
        >>> key = BlockCache.key("s3://bucket/ds", "shards/00000.tar", "etag-1", 0, cache.block_size)
        >>> cache.get(key) is None
        True
        >>> cache.put(key, b"the bytes of block 0")
        >>> bytes(cache.get(key))
        b'the bytes of block 0'
        >>> cache.mark_cold([key])  # read for the last time: evict it first
        >>> cache.evict(target_bytes=0) > 0
        True
        >>> cache.contains(key)
        False
        >>> cache.stats.snapshot()["hits"], cache.stats.snapshot()["misses"]
        (1, 1)
    """

    directory: Path
    max_bytes: int
    block_size: int
    stats: CacheStats

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
    ) -> None:
        for name, value in (("max_bytes", max_bytes), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise CacheConfigError(f"BlockCache {name} must be a positive int, got {value!r}")
        self._root = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.directory = Path(self._root)
        self.max_bytes = max_bytes
        self.block_size = block_size
        self.stats = CacheStats()
        try:
            os.makedirs(self._root, exist_ok=True)
        except OSError as exc:
            raise self._error("cannot be created", exc) from exc
        if not os.access(self._root, os.W_OK | os.X_OK):
            raise CacheError(
                f"block cache directory {self._root} is not writable; point "
                "FERROLOAD_CACHE_DIR (or BlockCache(directory)) at a writable local directory",
                path=self._root,
            )
        self._dir = CacheDirectory(self._root, self.stats)

    @classmethod
    def default(cls, directory: str | os.PathLike[str] | None = None) -> BlockCache:
        """The cache for remote stores: configured by the environment.

        The directory is `directory` if given, else `$FERROLOAD_CACHE_DIR`, else the user
        cache directory's `ferroload` (for example `~/.cache/ferroload`); the limit is
        `$FERROLOAD_CACHE_SIZE` (`"50GiB"`, `"200MB"` or plain bytes), else 50 GiB.

        Raises:
            CacheConfigError: `FERROLOAD_CACHE_SIZE` is not a size.
            CacheError: the directory cannot be created or is not writable.
        """
        if directory is None:
            directory = os.environ.get("FERROLOAD_CACHE_DIR") or platformdirs.user_cache_path(
                "ferroload"
            )
        raw = os.environ.get("FERROLOAD_CACHE_SIZE", "")
        max_bytes = parse_size(raw, name="FERROLOAD_CACHE_SIZE") if raw.strip() else None
        return cls(directory, max_bytes=max_bytes or DEFAULT_CACHE_SIZE)

    @staticmethod
    def key(uri: str, path: str, version: str, block: int, block_size: int) -> str:
        """The key of one block: a hex digest of (store, path, version, block, block size).

        Each string is length-prefixed, so no two different tuples encode alike; the
        digest is a 128-bit BLAKE2b. `uri` identifies the store (a `Store` passes its URI
        with its endpoint and region, so one URI on two endpoints never shares entries);
        `version` identifies the object (a `Store` passes its ETag and size, joined with
        the caller's tag), so a changed or re-created object gets new keys and never
        serves stale bytes.

        Raises:
            CacheConfigError: `block` is negative or `block_size` is not positive.
        """
        if block < 0 or block_size <= 0:
            raise CacheConfigError(
                f"a block index must be >= 0 and a block size > 0, got {block}, {block_size}"
            )
        h = hashlib.blake2b(digest_size=16, person=_KEY_PERSON)
        for part in (uri, path, version):
            raw = part.encode("utf-8", "surrogatepass")
            h.update(len(raw).to_bytes(8, "little"))
            h.update(raw)
        h.update(struct.pack("<QQ", block, block_size))
        return h.hexdigest()

    # ------------------------------------------------------------------ entries

    def get(self, key: str) -> memoryview | None:
        """The data of an entry, verified, or None when it is absent or damaged.

        A hit refreshes the entry's modification time (warming it again if it was
        marked cold). The view is read-only and private to the caller: the entry is read
        into a fresh buffer and verified, never mapped, so a file truncated, replaced or
        corrupted by another process later can neither change the bytes nor crash the
        process (a truncated entry reads short and counts as damaged). Anything in an
        entry's place that is not a regular file (a symlink, a FIFO, which would block the
        read, a device) is damaged too: opened without following a link or blocking,
        never read.

        Raises:
            InvalidCacheKeyError: `key` is not a key `BlockCache.key` makes.
            CacheError: the entry exists but cannot be read (permissions, I/O error).
        """
        path = self._entry_path(key)
        try:
            fd = os.open(path, READ_FLAGS | O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):  # absent, or evicted meanwhile
            self.stats.add(misses=1)
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise self._error(f"entry {path} cannot be read", exc) from exc
            logger.warning("block cache entry %s is a symlink; deleted", path)
            with suppress(OSError):
                os.unlink(path)  # the link, never its target
            self.stats.add(misses=1, corrupt=1)
            return None
        try:
            st = os.fstat(fd)
            regular = stat.S_ISREG(st.st_mode)
            data = verify_entry(key, read_entry(fd, st.st_size)) if regular else None
            if data is not None and time.time_ns() - st.st_mtime_ns > _TOUCH_INTERVAL_NS:
                with suppress(OSError):  # advisory: an entry owned by another user
                    os.utime(fd if _UTIME_FD else path)
        except OSError as exc:
            raise self._error(f"entry {path} cannot be read", exc) from exc
        finally:
            os.close(fd)
        if data is None:
            logger.warning("block cache entry %s is damaged; deleted", path)
            self._discard(path, st)
            self.stats.add(misses=1, corrupt=1)
            return None
        self.stats.add(hits=1, hit_bytes=len(data))
        return data

    def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store an entry (atomically: written to a temporary file, then renamed).

        When the cache grows past `max_bytes`, the oldest entries are evicted. An entry
        larger than `max_bytes` is not stored.

        Raises:
            InvalidCacheKeyError: `key` is not a key `BlockCache.key` makes.
            CacheError: the entry cannot be written (permissions, disk full after
                evicting).
        """
        path = self._entry_path(key)
        view = memoryview(data)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        header = entry_header(key, view)
        nbytes = len(header) + view.nbytes
        if nbytes > self.max_bytes:
            logger.debug(
                "block cache entry %s (%d bytes) exceeds max_bytes; not stored", key, nbytes
            )
            return
        leaf = os.path.dirname(path)
        tmp = f"{leaf}/{TMP_PREFIX}{key}.{os.getpid()}.{secrets.token_hex(4)}"
        for attempt in range(2):
            try:
                write_entry(leaf, tmp, header, view)
                os.replace(tmp, path)
                break
            except OSError as exc:
                with suppress(OSError):
                    os.unlink(tmp)
                if isinstance(exc, FileNotFoundError):
                    # our temporary file or its directory went: a concurrent clear(), or a
                    # stale-file sweep after this writer stalled a minute. Not cached.
                    logger.debug("block cache entry %s lost to a concurrent clear", key)
                    return
                if exc.errno == errno.ENOSPC and attempt == 0:
                    self.evict()
                    continue
                raise self._error(f"entry {path} cannot be written", exc) from exc
        self.stats.add(puts=1, put_bytes=view.nbytes)
        if self._dir.account(nbytes, self.max_bytes):
            self._dir.evict(None, self.max_bytes, only_if_over=True)

    def contains(self, key: str) -> bool:
        """Whether an entry exists (not verified: `get` may still find it damaged)."""
        return os.path.exists(self._entry_path(key))

    def mark_cold(self, keys: Iterable[str]) -> None:
        """Make entries the first to be evicted (their mtime becomes the epoch).

        Missing keys are ignored. A cold entry read again is warmed again.

        Raises:
            InvalidCacheKeyError: a key is not a key `BlockCache.key` makes.
        """
        for key in keys:
            path = self._entry_path(key)
            try:
                os.utime(path, ns=(0, 0))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue  # gone, or owned by another user: marking is advisory
            except OSError as exc:
                raise self._error(f"entry {path} cannot be marked cold", exc) from exc

    # ------------------------------------------------------------------ the directory

    def size(self) -> int:
        """The bytes the entries take now (one directory scan; temporary files excluded)."""
        return self._dir.scan()[2]

    def count(self) -> int:
        """The entries in the cache now (one directory scan; temporary files excluded)."""
        return len(self._dir.scan()[0])

    def evict(self, target_bytes: int | None = None) -> int:
        """Delete the oldest entries until the cache holds at most `target_bytes`.

        Runs under a file lock on `<directory>/.lock`, so one process evicts at a time;
        the size is recomputed from a directory scan. Entries go oldest modification
        time first (`mark_cold` entries before all others). Temporary files left by
        killed writers (older than a minute) are removed too.

        Args:
            target_bytes: the size to get down to; default 90% of `max_bytes`.

        Returns:
            The bytes freed (entries and stale temporary files).

        Raises:
            CacheConfigError: `target_bytes` is negative.
            CacheError: the lock or an entry cannot be removed.
        """
        return self._dir.evict(target_bytes, self.max_bytes)

    def clear(self) -> None:
        """Delete every entry and temporary file, and the fan-out directories.

        Raises:
            CacheError: an entry cannot be removed.
        """
        self._dir.clear()

    def close(self) -> None:
        """Release the file this cache keeps open (the cache stays usable: it reopens)."""
        self._dir.close()

    def __del__(self) -> None:
        # not contextlib.suppress: at interpreter exit this module's globals (`suppress`,
        # `os`) may already be None, and the error would be printed as "Exception ignored"
        try:  # noqa: SIM105  (see above)
            self.close()
        except Exception:  # nothing to report from a finalizer
            pass

    def __repr__(self) -> str:
        return (
            f"BlockCache({self._root!r}, max_bytes={self.max_bytes}, block_size={self.block_size})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # locks and counters stay behind: a worker process gets a fresh cache on the same
        # directory
        return (_restore, (type(self), self._root, self.max_bytes, self.block_size))

    # ------------------------------------------------------------------ internals

    def _entry_path(self, key: str) -> str:
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            raise InvalidCacheKeyError(str(key))
        return f"{self._root}/{key[:2]}/{key[2:4]}/{key}"

    def _error(self, what: str, exc: OSError) -> CacheError:
        return cache_error(self._root, what, exc)

    def _discard(self, path: str, seen: os.stat_result) -> None:
        """Delete a damaged entry, unless another process has replaced it meanwhile."""
        with suppress(OSError):
            now = os.stat(path)
            if (now.st_ino, now.st_dev) == (seen.st_ino, seen.st_dev):
                os.unlink(path)


def _restore(cls: type[BlockCache], directory: str, max_bytes: int, block_size: int) -> BlockCache:
    return cls(directory, max_bytes=max_bytes, block_size=block_size)
