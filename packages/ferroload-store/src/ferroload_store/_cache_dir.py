"""`CacheDirectory`: the directory side of a `BlockCache`: the size estimate its
processes share (`.usage`), scans of its entries, and eviction and clearing under the
directory's file lock."""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from filelock import FileLock

from ferroload_store._cache_entry import KEY_RE, O_CLOEXEC, TMP_PREFIX
from ferroload_store._counters import CacheStats
from ferroload_store._errors import CacheConfigError, CacheError
from ferroload_store._nofollow import O_NOFOLLOW

logger = logging.getLogger(__name__)

_FAN_RE = re.compile(r"[0-9a-f]{2}")
# The shared size estimate `.usage` grows by one byte per this many bytes written.
_USAGE_UNIT = 4096
_ZEROS = bytes(1 << 16)
# Temporary files older than this are left by a killed writer; eviction removes them.
_STALE_TMP_NS = 60 * 10**9
#: Eviction without a target frees down to this fraction of max_bytes.
EVICT_TO = 0.9


def cache_error(root: str, what: str, exc: OSError) -> CacheError:
    """The error of cache directory `root` when `what` failed with `exc`."""
    reason = exc.strerror or str(exc)
    return CacheError(
        f"block cache directory {root}: {what} ({reason}); point FERROLOAD_CACHE_DIR (or "
        "BlockCache(directory)) at a writable local directory",
        path=root,
    )


class CacheDirectory:
    """The files of a cache directory other than its entries' contents: the shared size
    estimate, the eviction lock, scans, eviction and clearing.

    The cache's `max_bytes` is passed to the calls that need it (it is the cache's
    attribute, and this object keeps no reference back to the cache).

    Args:
        root: the cache directory (absolute, existing).
        stats: the cache's counters (evictions are counted here).
    """

    def __init__(self, root: str, stats: CacheStats) -> None:
        self.root = root
        self._stats = stats
        self._usage_lock = threading.Lock()
        self._evict_lock = threading.Lock()
        self._usage: int | None = None  # fd of <dir>/.usage, opened by the first put
        self._filelock = FileLock(os.path.join(root, ".lock"))

    def account(self, nbytes: int, max_bytes: int) -> bool:
        """Add a written entry to the shared size estimate; whether it is over the limit.

        `<dir>/.usage` is a (sparse) file whose length, in units of `_USAGE_UNIT`, is the
        estimate: every process appends one byte per unit it writes (O_APPEND makes each
        append atomic), and an eviction sets the length to the true size it counted. So
        the processes that share a directory see one another's writes at the cost of one
        small write and one fstat per put.
        """
        fd, created = self._open_usage()
        if created:  # the first use of this directory: count what is there once
            self.evict(max_bytes, max_bytes)
            return False
        try:
            units = -(-nbytes // _USAGE_UNIT)
            os.write(fd, _ZEROS[:units] if units <= len(_ZEROS) else bytes(units))
            estimate = os.fstat(fd).st_size * _USAGE_UNIT
        except OSError:  # pragma: no cover  (the directory itself is writable)
            return True
        return estimate > max_bytes

    def _open_usage(self) -> tuple[int, bool]:
        """The open `.usage` file, and whether this call created it.

        An existing one is opened without following a symlink (appends would grow the
        file it points at) or blocking (a FIFO without a reader), and must be a regular
        file.
        """
        fd = self._usage
        if fd is not None:
            return fd, False
        path = os.path.join(self.root, ".usage")
        flags = os.O_WRONLY | os.O_APPEND | O_CLOEXEC | O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
        with self._usage_lock:
            if self._usage is None:
                try:
                    try:
                        self._usage = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                        return self._usage, True
                    except FileExistsError:
                        fd = os.open(path, flags)
                        if not stat.S_ISREG(os.fstat(fd).st_mode):
                            os.close(fd)
                            raise OSError(errno.EINVAL, "not a regular file") from None
                        self._usage = fd
                except OSError as exc:
                    why = "is a symlink" if exc.errno == errno.ELOOP else "cannot be opened"
                    raise cache_error(self.root, f"{path} {why}", exc) from exc
            return self._usage, False

    def _usage_units(self) -> int:
        """The shared estimate, in units of `_USAGE_UNIT`."""
        fd, _ = self._open_usage()
        return os.fstat(fd).st_size

    def _set_usage(self, total: int, *, also_units: int = 0) -> None:
        """Record the true size, as counted under the eviction lock."""
        fd, _ = self._open_usage()
        with suppress(OSError):  # an estimate: the next eviction sets it again
            os.ftruncate(fd, -(-total // _USAGE_UNIT) + max(also_units, 0))

    def evict(self, target_bytes: int | None, max_bytes: int, *, only_if_over: bool = False) -> int:
        """Evict down to the target (default 90% of max_bytes); with `only_if_over`, do
        nothing when, once the lock is ours, the estimate is back under max_bytes (another
        thread or process evicted while we waited)."""
        target = int(max_bytes * EVICT_TO) if target_bytes is None else target_bytes
        if target < 0:
            raise CacheConfigError(f"evict target_bytes must be >= 0, got {target_bytes}")
        with self._evict_lock, self.locked():
            before = self._usage_units()
            if only_if_over and before * _USAGE_UNIT <= max_bytes:
                return 0
            entries, temps, total = self.scan()
            freed = 0
            now = time.time_ns()
            for tmp_path, mtime, nbytes in temps:
                if now - mtime > _STALE_TMP_NS and self.unlink(tmp_path):
                    freed += nbytes
            entries.sort()
            evicted = evicted_bytes = 0
            for _mtime, _name, nbytes, entry_path in entries:
                if total <= target:
                    break
                total -= nbytes
                if self.unlink(entry_path):
                    evicted += 1
                    evicted_bytes += nbytes
            # what others appended while we scanned may be missing from `total`;
            # keep it (counting an entry twice only makes the next eviction earlier)
            self._set_usage(total, also_units=self._usage_units() - before)
        self._stats.add(evictions=evicted, evicted_bytes=evicted_bytes)
        if evicted:
            logger.debug(
                "block cache %s: evicted %d entries, %d bytes", self.root, evicted, evicted_bytes
            )
        return freed + evicted_bytes

    def clear(self) -> None:
        """Delete every entry and temporary file, and the fan-out directories."""
        with self._evict_lock, self.locked():
            for top in _subdirs(self.root):
                for leaf in _subdirs(top):
                    for name, entry_path, _st in _files(leaf):
                        if name.startswith(TMP_PREFIX) or KEY_RE.fullmatch(name):
                            self.unlink(entry_path)
                    with suppress(OSError):
                        os.rmdir(leaf)
                with suppress(OSError):
                    os.rmdir(top)
            self._set_usage(0)

    def close(self) -> None:
        """Close the `.usage` file (it reopens on the next use)."""
        with self._usage_lock:
            fd, self._usage = self._usage, None
        if fd is not None:
            os.close(fd)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's eviction lock (one evicting process at a time)."""
        try:
            self._filelock.acquire(poll_interval=0.005)
        except OSError as exc:
            raise cache_error(self.root, "the eviction lock cannot be taken", exc) from exc
        try:
            yield
        finally:
            self._filelock.release()

    def scan(self) -> tuple[list[tuple[int, str, int, str]], list[tuple[str, int, int]], int]:
        """Entries as (mtime_ns, key, bytes, path), temporary files as (path, mtime_ns,
        bytes), and the entries' total bytes."""
        entries: list[tuple[int, str, int, str]] = []
        temps: list[tuple[str, int, int]] = []
        total = 0
        try:
            for top in _subdirs(self.root):
                for leaf in _subdirs(top):
                    for name, entry_path, st in _files(leaf):
                        if name.startswith(TMP_PREFIX):
                            temps.append((entry_path, st.st_mtime_ns, st.st_size))
                        elif KEY_RE.fullmatch(name):
                            entries.append((st.st_mtime_ns, name, st.st_size, entry_path))
                            total += st.st_size
        except OSError as exc:
            raise cache_error(self.root, "cannot be listed", exc) from exc
        return entries, temps, total

    def unlink(self, path: str) -> bool:
        """Delete a file; False when another process deleted it first."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise cache_error(self.root, f"{path} cannot be removed", exc) from exc
        return True


def _subdirs(path: str) -> Iterator[str]:
    """The fan-out directories (two hex digits) in `path`; none if it has gone."""
    try:
        it = os.scandir(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for entry in it:
            if _FAN_RE.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                yield entry.path


def _files(path: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(name, path, stat) of the regular files in `path`, skipping any that vanish."""
    try:
        it = os.scandir(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield entry.name, entry.path, st
