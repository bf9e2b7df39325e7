"""`open_store`: the one way to a `Store`, from a URI and its options."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from ferroload_store._cache import BlockCache
from ferroload_store._options import IOOptions
from ferroload_store._store import Store
from ferroload_store._uri import parse_uri


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
