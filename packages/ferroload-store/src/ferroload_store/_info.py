"""`ObjectInfo`: what a listing or `head` says about one object, and how it is read from
obstore's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


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


def info_from_meta(meta: Mapping[str, Any], prefix: str) -> ObjectInfo:
    """The `ObjectInfo` of obstore's metadata of one object, its key made relative to the
    store root `prefix`."""
    key = str(meta["path"])
    return ObjectInfo(
        key[len(prefix) :] if prefix and key.startswith(prefix) else key,
        int(meta["size"]),
        meta["last_modified"],
        meta.get("e_tag"),
    )
