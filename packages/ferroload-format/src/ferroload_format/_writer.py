"""`Writer`: adds samples to a new or existing dataset and commits them as one version."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import pyarrow as pa

from ferroload_format import _commit
from ferroload_format._commit import commit
from ferroload_format._errors import (
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    InvalidModalityError,
    SchemaConflictError,
    WriterClosedError,
)
from ferroload_format._index import ROW_GROUP_SIZE, IndexBuilder
from ferroload_format._manifest import Manifest
from ferroload_format._names import (
    RESERVED_COLUMNS,
    check_column_name,
    check_modality,
    check_sample_id,
    new_txn_id,
)
from ferroload_format._paths import staged_part_path
from ferroload_format._pending import PendingCommit
from ferroload_format._records import Modality
from ferroload_format._rs011 import refuse_write
from ferroload_format._shard_sequence import ShardSequence, sample_members
from ferroload_format._staged import StagedWrite
from ferroload_format._tar import BLOCK, padding
from ferroload_format._types import MAX_METADATA_DEPTH, type_depth, type_name, type_to_json
from ferroload_format._versions import read_manifest
from ferroload_format._write_modes import WriteMode, check_mode, exists_error, operation
from ferroload_store import open_store

logger = logging.getLogger(__name__)

#: Default target size of one tar shard.
DEFAULT_SHARD_SIZE = 256 << 20


class Writer:
    """Writes samples into tar shards and commits them as one new dataset version.

    `mode` says what to do with a dataset already at `uri`. `"append"` (the default) adds
    to it: the new samples become the next version, with the same modalities and metadata
    schema (without a dataset, the writer creates one). `"create"` refuses an existing
    dataset with `DatasetExistsError` before anything is written. `"overwrite"` commits a
    new version that holds only what this writer adds (any modalities and metadata): the
    older versions stay readable (`Dataset.open(uri, version=N)`) and their shards stay
    on storage until `gc(uri, keep_versions=…)` expires them. A `create` or `overwrite`
    that adds nothing commits an empty version (0 samples). Nothing is visible to
    readers until `close()` commits; an exception inside a `with` block, or `abort()`,
    commits nothing. A writer is not thread-safe; concurrent writers (threads, processes
    or machines) each use their own and either both land or one gets a
    `CommitConflictError`.

    Args:
        uri: dataset root: a local path, `memory://…`, `s3://…`, `gs://…`, `az://…`.
        name: dataset name (default: the last component of `uri`, or the existing
            dataset's). When appending, it must match the existing name (or be None).
        mode: `"append"`, `"create"` or `"overwrite"` (see above).
        shard_size: target bytes per tar shard (default 256 MiB).
        row_group_size: rows per Parquet row group of the index part.
        storage_options: backend options for obstore (credentials, endpoint, …).

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `uri`.
        DatasetNameError: when appending, if `name` differs from the existing name.
        ManifestError: if the existing dataset cannot be read.
        ValueError: for an unknown `mode`.

    Examples:
        >>> w = Writer("memory://docs/writer-example", "demo")
        >>> w.declare("image", "jpg", "tensor", "image")
        >>> w.add("s0000", {"image": b"\\xff\\xd8..."}, {"label": 3, "caption": "a cat"})
        >>> w.close()
        1
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        name: str | None = None,
        *,
        shard_size: int = DEFAULT_SHARD_SIZE,
        row_group_size: int = ROW_GROUP_SIZE,
        storage_options: Mapping[str, Any] | None = None,
        mode: WriteMode = "append",
    ) -> None:
        self.mode: WriteMode = check_mode(mode)
        """How this writer treats an existing dataset (`create`, `append`, `overwrite`)."""
        if not isinstance(shard_size, int) or shard_size <= 0:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
        if not isinstance(row_group_size, int) or row_group_size <= 0:
            raise ValueError(f"row_group_size must be a positive int, got {row_group_size!r}")
        self._store = open_store(uri, storage_options=storage_options)
        self.uri = self._store.uri
        try:
            base: Manifest | None = read_manifest(self._store)
        except DatasetNotFoundError:
            base = None
        refuse_write(base, self.uri, f"writing (mode={mode!r})")
        if base is not None and mode == "create":
            raise exists_error(self.uri, base)
        if base is not None and name is not None and name != base.name and mode == "append":
            raise DatasetNameError(
                f"{self.uri} holds dataset {base.name!r}, not {name!r}; pass name=None or "
                f"{base.name!r} to append to it",
                uri=self.uri,
            )
        self.name = base.name if base is not None else (name or _default_name(self.uri))
        if base is not None and mode == "overwrite" and name is not None:
            self.name = name
        self._base = base
        # the schema this write must keep: an overwrite starts from an empty one
        schema = base if mode == "append" else None
        self._schema_base = schema
        self.txn = new_txn_id()
        self._shard_size = shard_size
        self._row_group_size = row_group_size
        self._modalities: dict[str, Modality] = {
            m.name: m for m in (schema.modalities if schema else ())
        }
        self._builder = IndexBuilder(
            list(self._modalities),
            schema.metadata if schema else (),
            locked=schema is not None,
            uri=self.uri,
            row_group_size=row_group_size,
        )
        # every column's name (lowercased -> name), to refuse one that differs only by case
        self._columns: dict[str, str] = {
            c.lower(): c
            for c in (
                *RESERVED_COLUMNS,
                *self._modalities,
                *(f.name for f in self._builder.metadata_fields),
            )
        }
        self._known = set(self._columns.values())  # the same names, for a quick check
        self._ids: set[str] = set()
        self._shards = ShardSequence(self._store, self.txn, shard_size)
        self._closed = False
        self._failed = False
        self.version: int | None = None
        """The version `close()` committed (None before that, or when nothing was added)."""

    @property
    def base_version(self) -> int | None:
        """The version this writer started from (None when it creates the dataset)."""
        return self._base.version if self._base is not None else None

    # ----------------------------------------------------------------- declaring

    @property
    def modalities(self) -> tuple[Modality, ...]:
        """The declared modalities, in column order."""
        return tuple(self._modalities.values())

    def declare(
        self, modality: str, ext: str, kind: str = "bytes", codec_hint: str = "raw"
    ) -> None:
        """Declare a modality: payloads of it become tar members `<id>.<modality>.<ext>`.

        Declaring a modality the dataset already has, identically, does nothing.

        Args:
            modality: column name, e.g. `image` (lowercase letters, digits, `_`).
            ext: file extension WebDataset decoders key on, e.g. `jpg`, `flac`, `txt`.
            kind: what readers hand out: `tensor` (decoded), `bytes`, or `text`.
            codec_hint: decoder family: `image`, `audio`, `video` or `raw`.

        Raises:
            InvalidModalityError: for a bad name or extension, or a redeclaration that
                differs from the first one.
            SchemaConflictError: when appending, for a modality the dataset does not have.
        """
        self._check_open()
        check_modality(modality, ext, kind, codec_hint)
        new = Modality(modality, ext, kind, codec_hint)
        old = self._modalities.get(modality)
        if old is not None:
            if (old.ext, old.kind, old.codec_hint) != (ext, kind, codec_hint):
                raise InvalidModalityError(
                    f"modality {modality!r} is already declared as ({old.ext}, {old.kind}, "
                    f"{old.codec_hint}), not ({ext}, {kind}, {codec_hint})",
                    uri=self.uri,
                    column=modality,
                )
            return
        if self._schema_base is not None:
            raise SchemaConflictError(
                f"{self.uri} has modalities {list(self._modalities) or 'none'}; an append "
                f"cannot add modality {modality!r}",
                uri=self.uri,
                column=modality,
            )
        if modality in {f.name for f in self._builder.metadata_fields}:
            raise InvalidModalityError(
                f"{modality!r} is already a metadata column", uri=self.uri, column=modality
            )
        other = self._columns.get(modality.lower())
        if other is not None and other != modality:
            raise InvalidModalityError(
                f"modality {modality!r} differs from column {other!r} only by case; SQL "
                "(subset, sql) compares names without case and could not tell them apart",
                uri=self.uri,
                column=modality,
            )
        self._modalities[modality] = new
        self._builder.add_modality(modality)
        self._columns[modality.lower()] = modality
        self._known.add(modality)

    def declare_column(self, name: str, dtype: pa.DataType) -> None:
        """Declare a metadata column and its Arrow type before samples use it.

        Without a declaration a column's type is inferred from the values added (and may
        widen, int to double); a declared column keeps `dtype` exactly, even when every
        value is null, and refuses values that do not fit it. `Dataset.copy_to` declares
        the source's columns this way.

        Args:
            name: the metadata key.
            dtype: its Arrow type (see docs/format.md §6), e.g. `pa.float64()`,
                `pa.list_(pa.string())`.

        Raises:
            SchemaConflictError: for a type the format has no form for, a reserved name, a
                modality's name, a name that differs from another column's only by case, a column already of another type, or (when appending) a column the dataset does not have.
        """
        self._check_open()
        try:
            type_to_json(dtype)
        except (ValueError, AttributeError) as exc:
            raise SchemaConflictError(
                f"metadata {name!r} cannot have type {dtype!r}: metadata types are null, "
                "bool, int64, float64, string, binary and lists and structs of them",
                uri=self.uri,
                column=name,
            ) from exc
        if type_depth(dtype) > MAX_METADATA_DEPTH:
            raise SchemaConflictError(
                f"metadata {name!r} cannot have type {type_name(dtype)[:80]}…: it nests lists "
                f"and structs deeper than {MAX_METADATA_DEPTH} levels (MAX_METADATA_DEPTH); "
                "Parquet could not read such a column back",
                uri=self.uri,
                column=name,
            )
        if isinstance(name, str) and name not in self._known:
            check_column_name(name, self._columns, uri=self.uri)
        self._builder.declare_column(name, dtype)
        self._columns[name.lower()] = name
        self._known.add(name)

    # ----------------------------------------------------------------- adding

    def add(
        self,
        sample_id: str,
        data: Mapping[str, bytes | bytearray | memoryview] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Add one sample.

        Args:
            sample_id: unique id (ASCII letters, digits and `_ + = , @ ~ # -`; no dots).
            data: payload bytes per declared modality; a modality may be left out.
            meta: metadata values (bool, int, float, str, bytes, lists, dicts, None).

        Raises:
            InvalidSampleIdError: for an id that could escape the shard or confuse WebDataset.
            DuplicateSampleError: for an id this writer already added.
            UndeclaredModalityError: for a payload of a modality never declared.
            InvalidPayloadError: for a payload that is not bytes-like.
            SchemaConflictError: for metadata that conflicts with earlier samples, a reserved
                key (`sample_id`, `shard`, `_ferroload*`, `__ferroload*`), or a key that
                differs from another column's only by case (`Label` beside `label`).
        """
        self._check_open()
        sid = check_sample_id(sample_id, uri=self.uri)
        if sid in self._ids:
            raise DuplicateSampleError(
                f"sample id {sid!r} was already added to this writer", uri=self.uri, sample_id=sid
            )
        payloads = sample_members(sid, data, self._modalities, uri=self.uri) if data else []
        if meta:
            if not isinstance(meta, Mapping):
                raise SchemaConflictError(
                    f"metadata of sample {sid!r} must be a mapping, got {type(meta).__name__}",
                    uri=self.uri,
                    sample_id=sid,
                )
            known = self._known
            new = [k for k in meta if k not in known]
            if new:
                self._check_new_keys(sid, new)
            self._builder.check_meta(sid, meta)
            for key in new:
                self._columns[key.lower()] = key
                known.add(key)
        try:
            shard = self._shards.for_sample(sum(BLOCK + n + padding(n) for _, _, _, n in payloads))
            members = {m: shard.add(name, payload) for m, name, payload, _ in payloads}
            self._builder.add(sid, len(self._shards.finished), members, meta)
        except BaseException:
            self._failed = True
            raise
        self._ids.add(sid)
        if members:
            shard.num_samples += 1

    def _check_new_keys(self, sid: str, keys: list[Any]) -> None:
        """Refuse new metadata keys that are reserved or differ from a column, or from each
        other, only by case (`check_meta` refuses keys that are not strings)."""
        taken = dict(self._columns)
        for key in keys:
            if isinstance(key, str) and key:
                check_column_name(key, taken, uri=self.uri, sample_id=sid)
                taken[key.lower()] = key

    # ----------------------------------------------------------------- finishing

    def _finish_shard(self) -> None:
        """Finish the current shard now (closed, its side index written), as `close`
        does first."""
        self._shards.finish()

    def _check_open(self) -> None:
        if self._closed:
            raise WriterClosedError(f"the writer of {self.uri} is closed", uri=self.uri)
        if self._failed:
            raise WriterClosedError(
                f"the writer of {self.uri} failed earlier and can only be aborted", uri=self.uri
            )

    def close(self) -> int | None:
        """Finish the shards and commit them as a new version.

        Returns:
            The committed version, or None when no sample was added to an `append`
            (nothing is committed; a `create` or `overwrite` commits an empty version).

        Raises:
            DuplicateSampleError: a sample id the dataset already had.
            CommitConflictError: a concurrent commit collided with this one (nothing of
                this writer was committed): for an `overwrite`, any version committed
                after it started.
            DatasetExistsError: with `mode="create"`, a concurrent writer created the
                dataset first.
        """
        if self._closed:
            return self.version
        self._check_open()
        try:
            if self._builder.num_rows == 0 and self.mode == "append":
                self._shards.abort()
                self._closed = True
                logger.info("nothing was added to %s; no version committed", self.uri)
                return None
            self._finish_shard()
            _commit._checkpoint("shards-written")
            pending = PendingCommit(
                name=self.name,
                txn=self.txn,
                base_version=self._base.version if self._base else None,
                modalities=self.modalities,
                shards=self._shards.finished,
                table=self._builder.table([s.path for s in self._shards.finished]),
                operation=operation(self.mode, self._base),
                row_group_size=self._row_group_size,
                mode=self.mode,
                base=self._base,
            )
            manifest = commit(self._store, pending)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self.version = manifest.version
        logger.info(
            "committed version %d of %s (%d samples)",
            manifest.version,
            self.uri,
            pending.table.num_rows,
        )
        return manifest.version

    def stage(self) -> StagedWrite:
        """Finish the shards without committing them: what a task of a distributed write
        calls instead of `close()`, handing the result to the one `commit_staged` that
        commits every task's samples as one version.

        The shards stay invisible to readers until that commit; uncommitted, they are
        leftovers that `gc` deletes after its grace period (or `discard_staged` now).

        Returns:
            The picklable `StagedWrite`: this writer's shards and index rows.

        Raises:
            WriterClosedError: the writer was closed, aborted or staged already.
        """
        self._check_open()
        try:
            if self._builder.num_rows == 0:
                self._shards.abort()  # (an empty write has no shard to keep)
            else:
                self._finish_shard()
            staged = StagedWrite(
                uri=self.uri,
                txn=self.txn,
                name=self.name,
                mode=self.mode,
                base_version=self.base_version,
                modalities=self.modalities,
                shards=tuple(self._shards.finished),
                table=self._builder.table([s.path for s in self._shards.finished]),
                row_group_size=self._row_group_size,
            )
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return staged

    def abort(self) -> None:
        """Drop everything this writer wrote; the dataset stays as it was."""
        if self._closed:
            return
        self._closed = True
        leftovers = self._shards.abort()
        leftovers.append(staged_part_path(self.txn))
        try:
            self._store.delete(leftovers)
        except OSError:
            logger.warning("could not delete the leftovers of %s; gc will", self.txn, exc_info=True)

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Writer({self.uri!r}, {self.name!r}, {self._builder.num_rows} samples, {state})"


def _default_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or "dataset"
