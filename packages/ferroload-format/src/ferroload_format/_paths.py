"""Where everything of a dataset lives under its root (docs/format.md §1, §10.1): the
directories, and the key of each manifest, index part, shard, shard list and layer object.
"""

from __future__ import annotations

META_DIR = "_ferroload"
VERSIONS_DIR = f"{META_DIR}/versions/"
LATEST_HINT = f"{META_DIR}/latest"
STAGING_DIR = f"{META_DIR}/staging/"
SHARDS_DIR = "shards/"
INDEX_DIR = "index/"
LAYERS_DIR = "layers/"
IDS_DIR = f"{META_DIR}/ids/"
SHARD_LISTS_DIR = f"{META_DIR}/shardlists/"
MERGED_DIR = f"{META_DIR}/merged/"


def version_path(version: int) -> str:
    """Key of the manifest of `version`."""
    return f"{VERSIONS_DIR}{version:010d}.json"


def part_path(version: int) -> str:
    """Key of the published index part that `version` adds."""
    return f"{INDEX_DIR}part-{version:010d}.parquet"


def merged_part_path(version: int) -> str:
    """Key of the merged index part that `version` adds (a tiered append or a compaction,
    docs/format.md §7.6): outside `index/`, so that the `index/part-*` glob never shows
    a row twice."""
    return f"{MERGED_DIR}part-{version:010d}.parquet"


def barrier_path(version: int) -> str:
    """Key of the file that an overwrite committing `version` keeps in the `index/part-*`
    glob while it replaces the parts there (§7.4): not Parquet, so that DuckDB refuses the
    glob rather than show two versions' rows."""
    return f"{INDEX_DIR}part-{version:010d}-overwriting.parquet"


def staged_own_path(txn: str) -> str:
    """Key where transaction `txn` stages its own rows when its index part is merged: the
    bytes of `index/part-<version>.parquet`, the glob's share of the version (§7.6)."""
    return f"{STAGING_DIR}{txn}/own.parquet"


def staged_part_path(txn: str) -> str:
    """Key where transaction `txn` stages its index part before committing."""
    return f"{STAGING_DIR}{txn}/part.parquet"


def shard_list_path(txn: str, version: int) -> str:
    """Key of the shard list that transaction `txn` writes for `version` (§6.2)."""
    return f"{SHARD_LISTS_DIR}{txn}-{version:010d}.jsonl"


def shard_paths(txn: str, number: int) -> tuple[str, str]:
    """Keys of shard `number` of transaction `txn` and of its side index."""
    stem = f"{SHARDS_DIR}{txn}-{number:05d}"
    return f"{stem}.tar", f"{stem}.idx.parquet"


def layer_dir(name: str) -> str:
    """Prefix of everything layer `name` owns: `layers/<name>/`."""
    return f"{LAYERS_DIR}{name}/"


def layer_part_path(name: str, version: int) -> str:
    """Key of the published index part of layer `name` committed by `version`."""
    return f"{layer_dir(name)}index/part-{version:010d}.parquet"


def layer_staging_dir(name: str, identity: str) -> str:
    """Prefix under which a map with `identity` stages the partitions of layer `name`."""
    return f"{layer_dir(name)}_staging/{identity}/"


def layer_shard_paths(name: str, txn: str, number: int) -> tuple[str, str]:
    """Keys of shard `number` of layer `name` written by transaction `txn`, and of its
    side index."""
    stem = f"{layer_dir(name)}shards/{txn}-{number:05d}"
    return f"{stem}.tar", f"{stem}.idx.parquet"


def parse_version_path(key: str) -> int | None:
    """The version number in a manifest key, or None when `key` is not one."""
    if not key.startswith(VERSIONS_DIR) or not key.endswith(".json"):
        return None
    digits = key[len(VERSIONS_DIR) : -len(".json")]
    return int(digits) if digits.isdigit() and len(digits) == 10 else None
