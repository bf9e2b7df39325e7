"""Committing a layer: merging its staged partitions and claiming the next version with them.

The merged index part is staged, then a manifest listing the layer claims the next
version, then the part is published under its final name (docs/format.md §10).

Also the checks a `LayerWriter` makes of the latest version, when it starts and before
each attempt to commit: the names its columns take, and a layer of the same name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress

import pyarrow as pa
import pyarrow.parquet as pq

from ferroload_format import _commit
from ferroload_format._commit import MAX_COMMIT_ATTEMPTS, claim_version
from ferroload_format._errors import (
    CommitConflictError,
    IncompleteLayerError,
    InvalidLayerError,
    LayerExistsError,
    SchemaConflictError,
)
from ferroload_format._index import write_part
from ferroload_format._layer_parts import (
    PARTITION_RE,
    LayerSchema,
    partition_shard,
    staged_partition_path,
)
from ferroload_format._manifest import Manifest, utc_now
from ferroload_format._names import RESERVED_COLUMNS, new_txn_id
from ferroload_format._paths import layer_dir, layer_part_path, layer_staging_dir
from ferroload_format._publish import ensure_published, replaced_before
from ferroload_format._records import IndexPart, LayerInfo, ShardInfo
from ferroload_format._versions import read_manifest, write_hint
from ferroload_store import ObjectExistsError, ObjectNotFoundError, Store

logger = logging.getLogger(__name__)


def is_mine(manifest: Manifest, name: str, identity: str) -> bool:
    """Whether `manifest` has layer `name` computed as `identity`."""
    layer = manifest.layer(name)
    return layer is not None and layer.identity == identity


def staged_partitions(store: Store, name: str, identity: str) -> set[int]:
    """Partition numbers of layer `name` already staged (done) under `identity`."""
    prefix = layer_staging_dir(name, identity)
    out = set()
    for obj in store.list(prefix):
        m = PARTITION_RE.fullmatch(obj.path[len(prefix) :])
        if m is not None:
            out.add(int(m.group(1)))
    return out


def check_names(schema: LayerSchema, manifest: Manifest) -> None:
    """Refuse columns that `manifest`'s base or other layers already have."""
    # keyed by the lowercased name: SQL (subset, sql) compares names without case
    taken: dict[str, str] = dict.fromkeys(RESERVED_COLUMNS, "an index column")
    taken.update(
        (m.name.lower(), f"a modality of the dataset ({m.name!r})") for m in manifest.modalities
    )
    taken.update(
        (f.name.lower(), f"a metadata column of the dataset ({f.name!r})")
        for f in manifest.metadata
    )
    for other in manifest.layers:
        if other.name != schema.name:
            taken.update(
                (c.lower(), f"a column of layer {other.name!r} ({c!r})") for c in other.column_names
            )
    mine: dict[str, str] = {}
    for col in (*(m.name for m in schema.modalities), *(f.name for f in schema.columns)):
        what = taken.get(col.lower())
        if what is None and mine.setdefault(col.lower(), col) != col:
            what = f"a column of this layer ({mine[col.lower()]!r})"
        if what is not None:
            raise schema.error(
                SchemaConflictError,
                f"column {col!r} is already {what} (version {manifest.version}); "
                "name the layer's outputs differently",
                column=col,
            )


def check_existing(schema: LayerSchema, identity: str, overwrite: bool, latest: Manifest) -> None:
    """Refuse a layer of the same name but another identity in `latest`, unless `overwrite`."""
    layer = latest.layer(schema.name)
    if layer is not None and layer.identity != identity and not overwrite:
        raise schema.error(
            LayerExistsError,
            f"version {latest.version} already has this layer, computed as "
            f"{layer.identity!r} (this is {identity!r}); pass overwrite=True to "
            "replace it in a new version, or choose another layer name",
            identity=layer.identity,
        )


def commit_layer(
    store: Store,
    schema: LayerSchema,
    identity: str,
    num_partitions: int,
    *,
    overwrite: bool,
    base: Callable[[], Manifest],
    sample_ids: Callable[[], pa.Array],
) -> Manifest:
    """Merge partitions 0 .. `num_partitions` - 1 of layer `schema` computed as
    `identity` and commit them (what `LayerWriter.commit` does); the manifest of the
    version that has the layer. `base` and `sample_ids` give the base version's manifest
    and sample ids (asked for only when needed)."""
    name = schema.name
    latest = read_manifest(store)
    if is_mine(latest, name, identity):
        logger.info("layer %r of %s is already committed", name, store.uri)
        return latest
    check_existing(schema, identity, overwrite, latest)
    missing = sorted(set(range(num_partitions)) - staged_partitions(store, name, identity))
    if missing:
        latest = read_manifest(store)
        if is_mine(latest, name, identity):  # a concurrent committer won and removed staging
            return latest
        raise _incomplete(schema, missing, num_partitions)
    try:
        tables = [_read_partition(store, schema, identity, k) for k in range(num_partitions)]
    except ObjectNotFoundError:
        latest = read_manifest(store)
        if is_mine(latest, name, identity):  # a concurrent committer won and removed staging
            return latest
        missing = sorted(set(range(num_partitions)) - staged_partitions(store, name, identity))
        raise _incomplete(schema, missing, num_partitions) from None
    shards = [
        partition_shard(t, where=f"{staged_partition_path(name, identity, k)} of {store.uri}")
        for k, t in enumerate(tables)
    ]
    table = schema.merge(tables, sample_ids())
    txn = new_txn_id()
    staged = f"{layer_staging_dir(name, identity)}index-{txn}.parquet"
    part_bytes = write_part(table)
    store.put(staged, part_bytes)
    _commit._checkpoint("part-staged")
    for _attempt in range(MAX_COMMIT_ATTEMPTS):
        latest = read_manifest(store)
        if is_mine(latest, name, identity):
            with suppress(OSError):
                store.delete(staged)
            return latest
        check_existing(schema, identity, overwrite, latest)
        check_names(schema, latest)
        if replaced_before(latest) > schema.version:  # rows match by position
            raise schema.error(
                CommitConflictError,
                f"version {replaced_before(latest)} overwrote the content this layer was "
                f"computed on (version {schema.version}); nothing was committed: run the "
                "map again on the latest version",
            )
        ensure_published(store, latest)
        manifest = _next_manifest(
            schema, identity, latest, shards, staged, len(part_bytes), txn, base().num_samples
        )
        _check_shards_exist(store, schema, [s for s in shards if s is not None])
        _commit._checkpoint("before-commit")
        if claim_version(store, manifest):
            break
    else:
        raise schema.error(
            CommitConflictError,
            f"gave up committing after {MAX_COMMIT_ATTEMPTS} attempts: other writers "
            "kept committing first",
        )
    _commit._checkpoint("committed")
    with suppress(ObjectExistsError):
        store.put_if_absent(layer_part_path(name, manifest.version), part_bytes)
    _commit._checkpoint("published")
    write_hint(store, manifest.version)
    prefix = layer_staging_dir(name, identity)
    try:
        store.delete([o.path for o in store.list(prefix)])
    except OSError:
        logger.warning("could not remove staging %s of %s; gc will", prefix, store.uri)
    logger.info(
        "committed layer %r of %s as version %d (%d rows)",
        name,
        store.uri,
        manifest.version,
        table.num_rows,
    )
    return manifest


def _incomplete(schema: LayerSchema, missing: list[int], num_partitions: int) -> Exception:
    shown = ", ".join(map(str, missing[:20])) + (" …" if len(missing) > 20 else "")
    return schema.error(
        IncompleteLayerError,
        f"{len(missing)} of {num_partitions} partitions are not staged ({shown}); "
        "run them (write_partition), then commit",
        missing=missing,
    )


def _read_partition(store: Store, schema: LayerSchema, identity: str, k: int) -> pa.Table:
    key = staged_partition_path(schema.name, identity, k)
    data = store.get(key)
    table = pq.ParquetFile(pa.BufferReader(data)).read()
    want = schema.partition_schema()
    if not table.schema.remove_metadata().equals(want):
        raise schema.error(
            InvalidLayerError,
            f"staged partition {key} has columns ({table.schema.remove_metadata()}) "
            f"that differ from the layer's ({want}); was it staged by other code under "
            "the same identity? Delete it or use another identity",
            partition=k,
        )
    return table


def _next_manifest(
    schema: LayerSchema,
    identity: str,
    latest: Manifest,
    shards: list[ShardInfo | None],
    staged: str,
    part_size: int,
    txn: str,
    num_rows: int,
) -> Manifest:
    version = latest.version + 1
    layer = LayerInfo(
        name=schema.name,
        identity=identity,
        base_version=schema.version,
        num_rows=num_rows,
        columns=schema.columns,
        modalities=schema.modalities,
        shards=tuple(
            ShardInfo(s.path, s.side_index, s.size, s.num_samples, s.num_members, version)
            for s in shards
            if s is not None
        ),
        index_parts=(
            IndexPart(layer_part_path(schema.name, version), staged, num_rows, part_size, version),
        ),
        created_at=utc_now(),
    )
    old = latest.layer(schema.name)
    if old is None:
        layers = (*latest.layers, layer)
    else:
        layers = tuple(layer if la.name == schema.name else la for la in latest.layers)
    return latest.derive(
        version=version,
        parent_version=latest.version,
        created_at=utc_now(),
        txn=txn,
        operation="layer",
        layers=layers,
    )


def _check_shards_exist(store: Store, schema: LayerSchema, shards: list[ShardInfo]) -> None:
    """Refuse to commit shards that are gone (a `gc` with too short a grace period)."""
    expected = {p for s in shards for p in (s.path, s.side_index)}
    if not expected:
        return
    found = {o.path for o in store.list(f"{layer_dir(schema.name)}shards/")}
    gone = sorted(expected - found)
    if gone:
        raise schema.error(
            CommitConflictError,
            f"{len(gone)} staged object(s) disappeared before the commit (first: "
            f"{gone[0]}); was gc run with a grace period shorter than the map? Run the "
            "partitions again, then commit",
            shard=gone[0],
        )
