"""What names stores and objects in block cache keys: a store's identity (its URI and
where it points, never a secret) and each object's (ETag or mtime, and size), looked up
once per object."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from ferroload_store._backend import obstore_kwargs
from ferroload_store._info import ObjectInfo
from ferroload_store._options import IOOptions
from ferroload_store._uri import ParsedURI

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


def cache_identity(parsed: ParsedURI, storage_options: Mapping[str, Any], io: IOOptions) -> str:
    """What names an object store in cache keys: its URI and where it points (endpoint,
    region, account: from the storage options and the environment, never a secret), so
    that one URI on two endpoints never shares cache entries."""
    assert parsed.kind == "object"
    config = obstore_kwargs(parsed.location, storage_options, io)["config"]
    where = {
        str(k).lower(): str(v)
        for k, v in config.items()
        if _CACHE_IDENTITY_RE.search(str(k)) and not _SECRET_RE.search(str(k))
    }
    for name in _CACHE_IDENTITY_ENV:
        value = os.environ.get(name)
        if value:
            where.setdefault("env:" + name.lower(), value)
    return parsed.uri + "\n" + json.dumps(where, sort_keys=True)


def object_identity(info: ObjectInfo) -> str:
    """An object's identity for cache keys: its ETag (content-derived on S3, GCS, Azure)
    and size, else its last-modified time (to the second: `LIST` and `HEAD` report it at
    different precisions) and size."""
    etag = (info.etag or "").strip('"')
    if etag:
        return f"etag:{etag}|{info.size}"
    return f"mtime:{info.last_modified.replace(microsecond=0).isoformat()}|{info.size}"


class Lister(Protocol):
    """Where `ObjectVersions` looks objects up: a `Store` (typed apart so that this module
    does not import `_store`, which imports it)."""

    def head(self, path: str) -> ObjectInfo: ...
    def list(self, prefix: str = ..., *, offset: str | None = ...) -> list[ObjectInfo]: ...


class ObjectVersions:
    """The identities of the objects of one store, each looked up once: the first object
    of a directory with one `HEAD`, and at the second, the whole directory with one
    `LIST` (a stream over many shards then pays one round trip, not one per shard).

    The store is passed to each call rather than kept, so that a `Store` and its
    versions form no reference cycle (a dropped store closes its descriptors at once).
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, str]] = {}
        self._dir_misses: dict[str, int] = {}
        self._lock = threading.Lock()

    def version(
        self, store: Lister, path: str, size: int | None, version: str | None
    ) -> tuple[int, str]:
        """(size, version) of object `path` for the cache keys: its identity as the
        backend gives it (`object_identity`), joined with the caller's `version` (the
        format layer's tag) when given; `size` when given, else the backend's."""
        known = self._known.get(path)
        if known is None:
            known = self._identify(store, path)
        return (size if size is not None else known[0]), (
            known[1] if version is None else f"{version}|{known[1]}"
        )

    def _identify(self, store: Lister, path: str) -> tuple[int, str]:
        parent = path.rpartition("/")[0]
        with self._lock:
            misses = self._dir_misses[parent] = self._dir_misses.get(parent, 0) + 1
            listing = bool(parent) and misses == 2
        if listing:
            for info in store.list(parent + "/"):
                self._known.setdefault(info.path, (info.size, object_identity(info)))
            known = self._known.get(path)
            if known is not None:
                return known
        info = store.head(path)
        known = self._known[path] = (info.size, object_identity(info))
        return known
