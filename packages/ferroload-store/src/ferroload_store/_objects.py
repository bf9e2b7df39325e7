"""`ObjectBackend`: the obstore side of a store (an object store, a memory store, or the
writes of a local one): its obstore stores, made on first use and again in a forked
process, and the calls through them, errors translated."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import obstore
from obstore.store import LocalStore as _ObLocalStore
from obstore.store import MemoryStore as _ObMemoryStore

from ferroload_store._backend import open_writer_obstore, remote_engine
from ferroload_store._counters import StoreStats
from ferroload_store._errors import truncated_error
from ferroload_store._info import ObjectInfo, info_from_meta
from ferroload_store._options import IOOptions
from ferroload_store._remote import (
    RemoteEngine,
    check_not_forked,
    mark_runtime_used,
    translating,
)
from ferroload_store._uri import ParsedURI
from ferroload_store._writers import ObjectWriter, ObstoreWriter

T = TypeVar("T")

_MEMORY_STORES: dict[str, _ObMemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


class ObjectBackend:
    """The obstore stores of one `Store`, and the calls it makes through them.

    A `memory://` store is shared by name within the process; an object store has a
    `RemoteEngine` (bounded, retried requests: `remote`); a local root gets an obstore
    `LocalStore` on its first write (which creates the folder).

    Args:
        parsed: the store's URI.
        storage_options: its obstore configuration (object stores), normalized.
        io: its request options.
        stats: its counters.
        local_root: the root folder of a local store (None otherwise).
    """

    def __init__(
        self,
        parsed: ParsedURI,
        storage_options: Mapping[str, Any],
        io: IOOptions,
        stats: StoreStats,
        local_root: Path | None,
    ) -> None:
        self.uri = parsed.uri
        self._parsed = parsed
        self._storage_options = storage_options
        self._io = io
        self._stats = stats
        self._local_root = local_root
        self._ob: Any = None
        self._writer_ob: tuple[int, Any] | None = None
        self._lock = threading.Lock()
        self.remote: RemoteEngine | None = None
        if parsed.kind == "memory":
            with _MEMORY_LOCK:
                self._ob = _MEMORY_STORES.setdefault(parsed.location, _ObMemoryStore())
        elif parsed.kind == "object":
            self.remote = remote_engine(parsed, storage_options, io, stats)

    def key(self, path: str) -> str:
        """The obstore key of `path` (the URI's prefix, then the path)."""
        return self._parsed.prefix + path

    def store(self) -> Any:
        """The obstore store (for local roots created on first write, with the directory)."""
        if self.remote is not None:
            return self.remote.store
        mark_runtime_used()
        if self._ob is None:
            with self._lock:
                if self._ob is None:
                    assert self._local_root is not None
                    self._ob = _ObLocalStore(prefix=self._local_root, mkdir=True)
        return self._ob

    def call(self, fn: Callable[[Any], T], path: str, action: str) -> T:
        """`fn(obstore store)`: on an object store through its request engine (bounded,
        retried), else at once; errors become ferroload errors naming `path`."""
        if self.remote is not None:
            return self.remote.call(fn, path, action)
        with translating(self.uri, path, action):
            return fn(self.store())

    def head(self, path: str) -> ObjectInfo:
        """Size, modification time and ETag of object `path`."""
        key = self.key(path)
        meta = self.call(lambda ob: obstore.head(ob, key), path, "head")
        return info_from_meta(meta, self._parsed.prefix)

    def list_objects(self, prefix: str, offset: str | None) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (and, with `offset`, sorts after
        it), sorted by key."""
        kwargs: dict[str, Any] = {}
        if offset is not None:
            kwargs["offset"] = self.key(offset)
        # obstore lists whole path segments: ask for the "directory", filter the rest here.
        directory = prefix[: prefix.rfind("/") + 1]
        list_prefix = self.key(directory) or None
        metas = self.call(
            lambda ob: [m for chunk in obstore.list(ob, list_prefix, **kwargs) for m in chunk],
            prefix,
            "list",
        )
        out = [info_from_meta(m, self._parsed.prefix) for m in metas]
        return sorted((o for o in out if o.path.startswith(prefix)), key=lambda o: o.path)

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """`length` bytes of object `path` at `start`.

        Raises:
            ObjectNotFoundError: if the object does not exist.
            ObjectTruncatedError: if it ends before `start + length`.
        """
        if self.remote is not None:
            (buf,), size = self.remote.read(self.key(path), path, [start], [length])
            if size is not None:
                raise truncated_error(self.uri, path, end=start + length, size=size)
            return buf if isinstance(buf, bytes) else bytes(buf)
        with translating(self.uri, path, "range read of"):
            got = obstore.get_range(self.store(), self.key(path), start=start, length=length)
            data = got.to_bytes()
        self._stats.add_read(1, len(data))
        if len(data) != length:
            raise truncated_error(self.uri, path, end=start + length, size=start + len(data))
        return data

    def read(
        self, path: str, starts: Sequence[int], lengths: Sequence[int]
    ) -> tuple[list[Any], int | None]:
        """Reads (`starts[i]`, `lengths[i]`) of `path`, one buffer each (shorter where the
        object ends early), and the object's size when an object store reported it."""
        if self.remote is not None:
            return self.remote.read(self.key(path), path, starts, lengths)
        with translating(self.uri, path, "range read of"):
            got = obstore.get_ranges(self.store(), self.key(path), starts=starts, lengths=lengths)
            bufs = [b.to_bytes() for b in got]
        self._stats.add_read(len(bufs), sum(len(b) for b in bufs))
        return bufs, None

    def writer(self, path: str) -> ObjectWriter:
        """A stream that becomes object `path` on `close()`: on an object store a
        multipart upload through a store that retries on its own."""
        if self.remote is None:
            return ObstoreWriter(self.store(), self.key(path), self._stats, self.uri, path)
        check_not_forked(self.uri)
        mark_runtime_used()
        return ObstoreWriter(self._writer_store(), self.key(path), self._stats, self.uri, path)

    def _writer_store(self) -> Any:
        """An obstore store that retries on its own, for multipart uploads (a stream
        cannot be replayed from here); one per process."""
        pid = os.getpid()
        with self._lock:
            if self._writer_ob is None or self._writer_ob[0] != pid:
                store = open_writer_obstore(self._parsed, self._storage_options, self._io)
                self._writer_ob = (pid, store)
            return self._writer_ob[1]

    def delete(self, path: str) -> None:
        """Delete object `path` (an `ObjectNotFoundError` when it is missing, on the
        backends that say so)."""
        key = self.key(path)
        self.call(lambda ob: obstore.delete(ob, key), path, "delete")

    def close(self) -> None:
        """Stop the request engine's threads (they start again when needed)."""
        if self.remote is not None:
            self.remote.close()
