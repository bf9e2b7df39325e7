"""`put_if_absent` on an object store: the conditional put, retried, and the read-back
that tells an attempt that landed before it failed from a lost race."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import obstore
from obstore.store import HTTPStore as _ObHTTPStore

from ferroload_store._errors import ObjectExistsError, UnsupportedOperationError
from ferroload_store._remote import RemoteEngine

logger = logging.getLogger(__name__)


def remote_put_if_absent(
    remote: RemoteEngine,
    key: str,
    path: str,
    payload: bytes,
    read_back: Callable[[str], bytes | None],
) -> None:
    """Create object `key` (`path` to the store) holding `payload` only if none exists,
    through `remote` (`If-None-Match: *` on S3). When an attempt fails in a way that
    leaves open whether it landed and its retry finds an object, `read_back(path)` (None
    when there is none) tells: if it holds exactly `payload`, the call succeeded.

    Raises:
        ObjectExistsError: if an object already exists at `path`.
        UnsupportedOperationError: if the backend has no conditional put (plain
            HTTP(S) servers).
    """
    if isinstance(remote.store, _ObHTTPStore):
        raise UnsupportedOperationError(
            f"put_if_absent is not supported by {remote.uri}: plain HTTP(S) servers have no "
            "conditional put (the commit primitive); write datasets to a local path or "
            "an object store (s3://, gs://, az://) and serve them over HTTP read-only",
            uri=remote.uri,
            path=path,
        )
    attempts = 0

    def attempt(ob: Any) -> None:
        nonlocal attempts
        attempts += 1
        obstore.put(ob, key, payload, mode="create")

    try:
        remote.call(attempt, path, "put-if-absent")
    except ObjectExistsError:
        # Retried (only transient failures are): did the attempt that failed land?
        if attempts < 2 or read_back(path) != payload:
            raise
        logger.info("put-if-absent of %s/%s landed on an attempt that failed", remote.uri, path)
