"""`VersionInfo`, one entry of a dataset's history, and reading that history."""

from __future__ import annotations

from dataclasses import dataclass

from ferroload_format._manifest import Manifest
from ferroload_format._versions import list_versions, read_manifest
from ferroload_store import Store


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a dataset's history (see `Dataset.versions`)."""

    version: int
    created_at: str
    operation: str
    num_samples: int
    num_shards: int
    txn: str


def version_history(store: Store, current: Manifest) -> list[VersionInfo]:
    """Every committed version of the dataset at `store`, oldest first (`current`, the
    manifest already read, is not read again)."""
    out = []
    for v in list_versions(store):
        m = current if v == current.version else read_manifest(store, v)
        out.append(
            VersionInfo(m.version, m.created_at, m.operation, m.num_samples, m.num_shards, m.txn)
        )
    return out
