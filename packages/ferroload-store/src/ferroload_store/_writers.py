"""Streams that become one object when closed: local temporary file + rename, or an
obstore multipart upload."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Protocol

import obstore

from ferroload_store._counters import Counters
from ferroload_store._remote import translating


class ObjectWriter(Protocol):
    """A stream that becomes one object when closed; nothing is visible before `close`."""

    def write(self, data: bytes | bytearray | memoryview) -> int: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...


class LocalFileWriter:
    """Writes a temporary file beside the target and renames it into place on close."""

    def __init__(self, target: Path, stats: Counters) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        self._target = target
        self._tmp = target.with_name(f"{target.name}.tmp-{secrets.token_hex(6)}")
        self._file = open(self._tmp, "wb")  # noqa: SIM115  (closed in close/abort)
        self._stats = stats
        self._written = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = self._file.write(data)
        self._written += n
        return n

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.close()
        os.replace(self._tmp, self._target)
        self._stats.add(put_requests=1, bytes_written=self._written)

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self._tmp.unlink(missing_ok=True)


class ObstoreWriter:
    """Buffered multipart upload through obstore; abandoned uploads are never completed."""

    def __init__(self, store: Any, key: str, stats: Counters, uri: str, path: str) -> None:
        self._uri = uri
        self._path = path
        with translating(uri, path, "upload of"):
            self._writer = obstore.open_writer(store, key)
        self._stats = stats
        self._written = 0
        self._done = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        with translating(self._uri, self._path, "upload of"):
            n = int(self._writer.write(data))
        self._written += n
        return n

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        with translating(self._uri, self._path, "upload of"):
            self._writer.close()
        self._stats.add(put_requests=1, bytes_written=self._written)

    def abort(self) -> None:
        # obstore has no explicit abort: an unclosed multipart upload never becomes an object.
        self._done = True
