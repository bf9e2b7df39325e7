"""Finding and reading committed versions (docs/format.md §7.2)."""

from __future__ import annotations

import logging
import os

from ferroload_format import _rs011
from ferroload_format._errors import (
    DatasetNotFoundError,
    ManifestError,
    NotADatasetError,
    VersionNotFoundError,
)
from ferroload_format._manifest import Manifest
from ferroload_format._paths import LATEST_HINT, VERSIONS_DIR, parse_version_path, version_path
from ferroload_store import ObjectNotFoundError, Store

logger = logging.getLogger(__name__)

#: A version number fits int64: a longer hint is ignored (`int()` of 4,301 digits raises).
_MAX_HINT_DIGITS = 19


def list_versions(store: Store, *, after: int = 0) -> list[int]:
    """Committed version numbers greater than `after`, ascending."""
    offset = version_path(after) if after > 0 else None
    found = (parse_version_path(o.path) for o in store.list(VERSIONS_DIR, offset=offset))
    ours = sorted(v for v in found if v is not None and v > after)
    if ours or after > 0 or not _rs011.is_rs011_root(store):
        return ours
    return _rs011.legacy_versions(store)  # a ferroload-rs 0.1.1 root, read as it is


def _read_hint(store: Store) -> int:
    try:
        text = store.get(LATEST_HINT).decode("ascii", "replace").strip()
    except ObjectNotFoundError:
        return 0
    if not text.isdigit() or len(text) > _MAX_HINT_DIGITS:
        logger.warning("ignoring unreadable latest-version hint in %s: %r", store.uri, text[:40])
        return 0
    return int(text)


def latest_version(store: Store) -> int | None:
    """The newest committed version, or None when `store` holds no dataset.

    Reads the `latest` hint, then lists manifests from there on: the hint may lag behind
    (a writer died before updating it) but never leads.
    """
    hint = _read_hint(store)
    newer = list_versions(store, after=hint - 1 if hint > 1 else 0)
    if newer:
        return newer[-1]
    if hint:
        # The hint points at a manifest the listing does not show: trust the listing.
        logger.warning("latest-version hint %d in %s has no manifest", hint, store.uri)
    everything = list_versions(store) if hint > 1 else newer  # (after=0: 0.1.1 roots too)
    return everything[-1] if everything else None


def write_hint(store: Store, version: int) -> None:
    """Best-effort update of the `latest` hint (a failure only costs a longer listing)."""
    try:
        store.put(LATEST_HINT, str(version).encode())
    except OSError:
        logger.warning("could not update the latest-version hint of %s", store.uri, exc_info=True)


def _not_found(store: Store) -> DatasetNotFoundError:
    root = store.local_path()
    if root is not None and root.is_dir() and any(os.scandir(root)):
        return NotADatasetError(
            f"{store.uri} exists but is not a ferroload dataset "
            f"(it has no {VERSIONS_DIR} manifests)",
            uri=store.uri,
        )
    if root is not None and root.exists() and not root.is_dir():
        return NotADatasetError(f"{store.uri} is a file, not a dataset directory", uri=store.uri)
    return DatasetNotFoundError(f"no ferroload dataset at {store.uri}", uri=store.uri)


def read_manifest(store: Store, version: int | None = None) -> Manifest:
    """The manifest of `version` (default: the latest), bound to `store` (its shard
    lists are read from there on first use of `Manifest.shards`, never here).

    Raises:
        DatasetNotFoundError: if `store` holds no dataset (`NotADatasetError` when it
            holds something else).
        VersionNotFoundError: if `version` was never committed.
        ManifestError: if the manifest is damaged or of an unknown major version.
    """
    if version is None:
        version = latest_version(store)
        if version is None:
            raise _not_found(store)
    elif not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise VersionNotFoundError(
            f"version must be a positive int, got {version!r}", uri=store.uri, version=version
        )
    key = version_path(version)
    try:
        data = store.get(key)
    except ObjectNotFoundError:
        if _rs011.is_rs011_root(store):
            return _rs011.read_manifest(store, version).bind(store)
        known = list_versions(store)
        if not known:
            raise _not_found(store) from None
        raise VersionNotFoundError(
            f"{store.uri} has no version {version}; it has versions {known[0]}..{known[-1]}",
            uri=store.uri,
            version=version,
        ) from None
    manifest = Manifest.from_bytes(data, uri=f"{store.uri}/{key}")
    if manifest.version != version:
        raise ManifestError(
            f"{store.uri}/{key} claims to be version {manifest.version}", uri=store.uri
        )
    return manifest.bind(store)  # its shard lists are read through `store` when needed
