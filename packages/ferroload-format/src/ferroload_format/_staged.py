"""Writes staged by many tasks and committed as one version: `StagedWrite`, `commit_staged`.

A distributed write (a Ray Data sink, an import on a cluster) runs one `Writer` per task.
Each task calls `Writer.stage()` instead of `close()`: its shards and side indexes are
written, nothing is committed, and what it wrote comes back as a small, picklable
`StagedWrite` (its shard list and its index rows). The driver then calls
`commit_staged(uri, staged)` once: the rows of every task, in the order given, become one
version through the ordinary commit (docs/format.md §7), so readers see all of the tasks'
samples or none. A task that failed, or ran twice (a retry), left shards that no
committed manifest references: they are leftovers, invisible to readers, which `gc`
deletes after its grace period (or `discard_staged` at once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format._commit import commit
from ferroload_format._errors import (
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    SchemaConflictError,
)
from ferroload_format._index import ROW_GROUP_SIZE, index_schema
from ferroload_format._index_arrays import absent_modality
from ferroload_format._manifest import Manifest
from ferroload_format._names import new_txn_id
from ferroload_format._pending import PendingCommit
from ferroload_format._records import Modality, ShardInfo
from ferroload_format._rs011 import refuse_write
from ferroload_format._types import TypeConflictError, merge_types, type_name
from ferroload_format._versions import read_manifest
from ferroload_format._write_modes import WriteMode, check_mode, exists_error, operation
from ferroload_store import Store, open_store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagedWrite:
    """What one `Writer` wrote without committing it (`Writer.stage()`).

    Attributes:
        uri: the dataset root it wrote to.
        txn: its transaction id (it names its shards).
        name: the dataset name it would have committed.
        mode: its write mode.
        base_version: the version it started from (None: no dataset yet).
        modalities: its modalities, in column order.
        shards: its finished shards, in order.
        table: its index rows (`sample_id`, `shard`, modalities, metadata), in the order
            the samples were added.
        row_group_size: its index part's rows per row group.
    """

    uri: str
    txn: str
    name: str
    mode: WriteMode
    base_version: int | None
    modalities: tuple[Modality, ...]
    shards: tuple[ShardInfo, ...]
    table: pa.Table
    row_group_size: int = ROW_GROUP_SIZE

    @property
    def num_samples(self) -> int:
        """Samples it wrote."""
        return int(self.table.num_rows)

    def paths(self) -> list[str]:
        """Every object it left on storage, relative to the root."""
        return [p for s in self.shards for p in (s.path, s.side_index)]


def _modalities(staged: Sequence[StagedWrite], uri: str) -> tuple[Modality, ...]:
    """The union of the writes' modalities in first-seen order; the same name declared
    differently by two writes is a `SchemaConflictError`."""
    seen: dict[str, tuple[Modality, int]] = {}
    for i, s in enumerate(staged):
        for m in s.modalities:
            first = seen.setdefault(m.name, (m, i))[0]
            if (first.ext, first.kind, first.codec_hint) != (m.ext, m.kind, m.codec_hint):
                raise SchemaConflictError(
                    f"staged writes {seen[m.name][1]} and {i} declare modality {m.name!r} "
                    f"differently ({first.ext}/{first.kind}/{first.codec_hint} against "
                    f"{m.ext}/{m.kind}/{m.codec_hint})",
                    uri=uri,
                    column=m.name,
                )
    return tuple(m for m, _ in seen.values())


def _metadata(staged: Sequence[StagedWrite], uri: str) -> list[pa.Field]:
    """The metadata columns of all writes in first-seen order, each of the one type its
    values have everywhere (a column all null in one write takes the others' type, int64
    widens to float64, as within one writer); any other difference is a
    `SchemaConflictError`."""
    fields: dict[str, pa.Field] = {}
    for i, s in enumerate(staged):
        for f in list(s.table.schema)[2 + len(s.modalities) :]:
            have = fields.setdefault(f.name, f)
            try:
                fields[f.name] = have.with_type(merge_types(have.type, f.type))
            except TypeConflictError:
                raise SchemaConflictError(
                    f"metadata column {f.name!r} is {type_name(have.type)} in an earlier "
                    f"staged write and {type_name(f.type)} in staged write {i}",
                    uri=uri,
                    column=f.name,
                ) from None
    return list(fields.values())


def _conformed(s: StagedWrite, schema: pa.Schema, modalities: Sequence[str]) -> pa.Table:
    """`s.table` with `schema`: columns it lacks added (modalities absent, metadata null)."""
    n = s.table.num_rows
    columns = []
    for f in schema:
        if f.name in s.table.column_names:
            columns.append(s.table.column(f.name).cast(f.type))
        elif f.name in modalities:
            columns.append(absent_modality(n))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _combined(staged: Sequence[StagedWrite], uri: str) -> tuple[tuple[Modality, ...], pa.Table]:
    """The writes' modalities and their rows as one index table, in the order given."""
    modalities = _modalities(staged, uri)
    names = [m.name for m in modalities]
    schema = index_schema(names, _metadata(staged, uri))
    tables = [_conformed(s, schema, names) for s in staged]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    ids = table.column("sample_id")
    if len(pc.unique(ids)) != len(ids):
        counts = pc.value_counts(ids).flatten()
        repeated = pc.filter(counts[0], pc.greater(counts[1], 1))[0].as_py()
        owners = [
            i
            for i, s in enumerate(staged)
            if pc.any(pc.equal(s.table.column("sample_id"), repeated)).as_py()
        ]
        raise DuplicateSampleError(
            f"sample id {repeated!r} was written by more than one task (staged writes "
            f"{', '.join(map(str, owners))}) or twice by one; nothing was committed",
            uri=uri,
            sample_id=repeated,
        )
    return modalities, table


def _base(store: Store, mode: WriteMode, name: str | None) -> Manifest | None:
    """The version the commit starts from, checked as `Writer` checks it."""
    try:
        base: Manifest | None = read_manifest(store)
    except DatasetNotFoundError:
        base = None
    refuse_write(base, store.uri, f"writing (mode={mode!r})")
    if base is not None and mode == "create":
        raise exists_error(store.uri, base)
    if base is not None and mode == "append" and name is not None and name != base.name:
        raise DatasetNameError(
            f"{store.uri} holds dataset {base.name!r}, not {name!r}",
            uri=store.uri,
        )
    return base


def commit_staged(
    uri: str | os.PathLike[str],
    staged: Sequence[StagedWrite],
    *,
    mode: WriteMode = "append",
    name: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> int | None:
    """Commit the writes of many tasks as one new version of the dataset at `uri`.

    The rows of `staged` are committed in the order given (the dataset's sample order),
    through the same commit as `Writer.close()`: all of them or none. Their modalities and
    metadata columns are united (first seen first; a column one write lacks is null
    there, a modality it lacks absent); a column of two types, a modality declared two
    ways, or a sample id in two writes fails the commit. On any failure nothing is
    committed and the shards of `staged` are deleted.

    Args:
        uri: the dataset root the writes staged into.
        staged: what each task's `Writer.stage()` returned. An empty sequence commits an
            empty version for `create` and `overwrite`, nothing for `append`.
        mode: `create`, `append` or `overwrite`, as `Writer`'s `mode` (checked against the
            dataset at `uri` now, when the commit starts).
        name: the dataset name (default: the writes', else the last part of `uri`).
        storage_options: backend options of `uri`.

    Returns:
        The committed version, or None when an `append` had no sample to add.

    Raises:
        DatasetExistsError: `create` on an existing dataset.
        DuplicateSampleError: a sample id in two writes, or one the dataset has.
        SchemaConflictError: writes whose columns do not agree, or an append whose
            columns differ from the dataset's.
        CommitConflictError: a concurrent commit collided with this one.
        ValueError: a write staged into another root, or with another mode.
    """
    mode = check_mode(mode)
    store = open_store(uri, storage_options=storage_options)
    try:
        for i, s in enumerate(staged):
            if s.uri != store.uri:
                raise ValueError(f"staged write {i} was written to {s.uri}, not {store.uri}")
            if s.mode != mode:
                raise ValueError(f"staged write {i} was written with mode={s.mode!r}, not {mode!r}")
        base = _base(store, mode, name)
        total = sum(s.num_samples for s in staged)
        if total == 0 and mode == "append":
            discard_staged(store.uri, staged, storage_options=storage_options)
            logger.info("nothing was added to %s; no version committed", store.uri)
            return None
        modalities, table = _combined(staged, store.uri)
        if name is None:
            name = base.name if base is not None and mode == "append" else None
        if name is None:
            name = staged[0].name if staged else store.uri.rstrip("/").rsplit("/", 1)[-1]
        pending = PendingCommit(
            name=name,
            txn=new_txn_id(),
            base_version=base.version if base is not None else None,
            modalities=modalities,
            shards=[sh for s in staged for sh in s.shards],
            table=table,
            operation=operation(mode, base),
            row_group_size=staged[0].row_group_size if staged else ROW_GROUP_SIZE,
            mode=mode,
            base=base,
        )
        manifest = commit(store, pending)
    except BaseException:
        discard_staged(store.uri, staged, storage_options=storage_options)
        raise
    logger.info(
        "committed version %d of %s (%d samples from %d staged writes)",
        manifest.version,
        store.uri,
        total,
        len(staged),
    )
    return manifest.version


def discard_staged(
    uri: str | os.PathLike[str],
    staged: Sequence[StagedWrite],
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Delete what `staged` wrote (writes that will not be committed). Never raises for
    storage errors: what it cannot delete waits for `gc`."""
    paths = [p for s in staged for p in s.paths()]
    if not paths:
        return
    try:
        open_store(uri, storage_options=storage_options).delete(paths)
    except OSError:
        logger.warning("could not delete %d staged objects of %s; gc will", len(paths), uri,
                       exc_info=True)  # fmt: skip
