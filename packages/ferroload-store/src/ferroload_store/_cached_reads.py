"""`CachedReads`: the range reads of an object store through its block cache, each
object's version looked up once and every fetched block checked to be whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_store._blocks import BlockReader, Fetch
from ferroload_store._errors import truncated_error
from ferroload_store._remote import RemoteEngine
from ferroload_store._versions import Lister, ObjectVersions


class CachedReads:
    """Reads of one object store through a `BlockReader`.

    The store is passed to the calls that look an object's version up (`Lister`) rather
    than kept, so that a `Store` and its cached reads form no reference cycle.

    Args:
        reader: the block cache reader (the cache and this store's identity in it).
        remote: the store's request engine, which fetches missing blocks.
        prefix: the store's key prefix (a path's key is `prefix + path`).
    """

    def __init__(self, reader: BlockReader, remote: RemoteEngine, prefix: str) -> None:
        self.reader = reader
        self._remote = remote
        self._prefix = prefix
        self._versions = ObjectVersions()

    def version(
        self, store: Lister, path: str, size: int | None, version: str | None
    ) -> tuple[int, str]:
        """(size, version) of object `path` for the cache keys (`ObjectVersions`)."""
        return self._versions.version(store, path, size, version)

    def keys(
        self, store: Lister, path: str, blocks: Sequence[int], size: int | None, version: str | None
    ) -> list[str]:
        """The cache keys of `blocks` of object `path`."""
        _, version = self.version(store, path, size, version)
        return self.reader.keys(path, version, list(blocks))

    def _fetch(self, path: str, size: int) -> Fetch:
        """Fetch reads of `path` in full (split, parallel, retried), or raise
        `ObjectTruncatedError` when the object is shorter than `size` says."""
        remote, key = self._remote, self._prefix + path

        def fetch(starts: Sequence[int], lengths: Sequence[int]) -> list[Any]:
            bufs, actual = remote.read(key, path, starts, lengths)
            for s, n, b in zip(starts, lengths, bufs, strict=True):
                if len(b) != n:
                    end, ends_at = s + n, actual if actual is not None else s + len(b)
                    raise truncated_error(remote.uri, path, end=end, size=ends_at)
            return bufs

        return fetch

    def ranges(
        self,
        store: Lister,
        path: str,
        starts: npt.ArrayLike,
        lengths: npt.ArrayLike,
        size: int | None,
        version: str | None,
    ) -> list[memoryview]:
        """Ranges of object `path` from its blocks (see `BlockReader.ranges`).

        Raises:
            ObjectTruncatedError: if a range ends past the object's size.
        """
        s = np.asarray(starts, dtype=np.int64).reshape(-1)
        e = s + np.asarray(lengths, dtype=np.int64).reshape(-1)
        if not len(s):
            return []
        size, version = self.version(store, path, size, version)
        beyond = np.flatnonzero(e > size)
        if len(beyond):
            raise truncated_error(self._remote.uri, path, end=int(e[beyond[0]]), size=size)
        fetch = self._fetch(path, size)
        return self.reader.ranges(path, s, e, size=size, version=version, fetch=fetch)

    def prefetch(
        self,
        store: Lister,
        path: str,
        blocks: npt.ArrayLike,
        size: int | None,
        version: str | None,
    ) -> None:
        """Fetch `blocks` of `path` into the disk cache (those cached cost a `stat`)."""
        size, version = self.version(store, path, size, version)
        wanted = np.unique(np.asarray(blocks, dtype=np.int64)).tolist()
        fetch = self._fetch(path, size)
        self.reader.blocks(path, wanted, size=size, version=version, fetch=fetch, keep=False)

    def mark_cold(
        self,
        store: Lister,
        path: str,
        blocks: npt.ArrayLike,
        size: int | None,
        version: str | None,
    ) -> None:
        """Have the cache evict `blocks` of `path` before any other."""
        _, version = self.version(store, path, size, version)
        cold = np.asarray(blocks, dtype=np.int64).tolist()
        self.reader.mark_cold(path, cold, version=version)
