"""`Sink` and `write`: a Ray Data dataset written as one dataset version, each write task
staging its own shards and the driver committing them all at once."""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

# (`_read`, imported first, says how to install Ray when it is missing)
import pyarrow as pa
import ray.data
from ray.data.block import BlockAccessor
from ray.data.datasource import Datasink, WriteResult

from ferroload.ray._read import MODALITY_KEY
from ferroload_convert import kind_of
from ferroload_core import sniff_ext
from ferroload_format import (
    DEFAULT_SHARD_SIZE,
    InvalidModalityError,
    Modality,
    StagedWrite,
    WriteMode,
    Writer,
    check_modality,
    commit_staged,
)
from ferroload_format._write_modes import check_mode

logger = logging.getLogger(__name__)

#: Extension of a modality whose bytes are of no known format.
UNKNOWN_EXT = "bin"

ModalitySpec = str | Modality | Mapping[str, str]


def _declared(name: str, spec: ModalitySpec) -> Modality:
    """A `Modality` from a `modalities=` value: an extension, a `Modality` or a mapping
    with `ext` (and `kind`, `codec_hint`), checked (`InvalidModalityError` naming `name`)."""
    if isinstance(spec, Modality):
        m = Modality(name, spec.ext, spec.kind, spec.codec_hint)
    else:
        fields = {"ext": spec} if isinstance(spec, str) else dict(spec)
        ext = fields.get("ext", "")
        kind, hint = kind_of(ext) if isinstance(ext, str) else ("bytes", "raw")  # checked below
        m = Modality(name, ext, fields.get("kind", kind), fields.get("codec_hint", hint))
    check_modality(m.name, m.ext, m.kind, m.codec_hint)
    return m


def _field_spec(f: pa.Field) -> ModalitySpec:
    """The modality a column's `ferroload.modality` field metadata declares (as `read`
    writes it), checked: `InvalidModalityError` naming the column."""
    try:
        spec = json.loads(f.metadata[MODALITY_KEY])
    except ValueError:
        spec = None
    if not isinstance(spec, str | dict):
        raise InvalidModalityError(
            f"column {f.name!r} has {MODALITY_KEY.decode()!r} field metadata that is not a "
            "modality (an extension, or an object with ext, kind, codec_hint)",
            column=f.name,
        )
    return spec


def _refuse_arrays(schema: pa.Schema | None) -> None:
    """Refuse tensor columns (decoded arrays): a dataset stores encoded payloads."""
    for f in schema or ():
        if isinstance(f.type, pa.ExtensionType):
            raise ValueError(
                f"column {f.name!r} holds {f.type} values (decoded arrays?): a dataset "
                "stores encoded payloads; write the bytes (ferroload.ray.read with "
                "decode=False) or encode them (PNG, JPEG, …) in a map first"
            )


class _Task:
    """One write task: a `Writer` staging the rows of its blocks."""

    def __init__(self, sink: Sink, task_idx: int) -> None:
        self.sink = sink
        self.task_idx = task_idx
        self.writer = sink._writer()
        self.modalities: dict[str, Modality] = {}
        self.rows = 0

    def _modality_columns(self, table: pa.Table) -> dict[str, Modality]:
        """The block's modality columns: those of earlier blocks (also when all null
        here), `modalities=`, else binary columns marked by `read`, else binary columns
        named after the format of their first value."""
        _refuse_arrays(table.schema)
        found: dict[str, Modality] = {}
        for f in table.schema:
            if f.name in self.modalities:
                found[f.name] = self.modalities[f.name]
            elif f.name in self.sink.modalities:
                found[f.name] = self.sink.modalities[f.name]
            elif f.name == self.sink.id_column or not (
                pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
            ):
                continue
            elif f.metadata and MODALITY_KEY in f.metadata:
                found[f.name] = _declared(f.name, _field_spec(f))
            else:
                present = table.column(f.name).drop_null()
                first = present[0].as_py() if len(present) else None
                found[f.name] = _declared(f.name, sniff_ext(first) or UNKNOWN_EXT)
        return found

    def add(self, table: pa.Table) -> None:
        modalities = self._modality_columns(table)
        for m in modalities.values():
            if m.name not in self.modalities:
                self.modalities[m.name] = m
                self.writer.declare(m.name, m.ext, m.kind, m.codec_hint)
        ids = (
            table.column(self.sink.id_column).to_pylist()
            if self.sink.id_column in table.column_names
            else None
        )
        meta_names = [
            n for n in table.column_names if n not in modalities and n != self.sink.id_column
        ]
        data = {n: table.column(n).to_pylist() for n in modalities}
        meta = {n: table.column(n).to_pylist() for n in meta_names}
        for r in range(table.num_rows):
            sid = ids[r] if ids is not None else self.sink.auto_id(self.task_idx, self.rows)
            self.writer.add(
                sid,
                {n: v[r] for n, v in data.items() if v[r] is not None},
                {n: v[r] for n, v in meta.items()},
            )
            self.rows += 1


class Sink(Datasink[tuple[int, StagedWrite]]):
    """A `ray.data.Datasink` that writes a Ray dataset as one new version of a ferroload
    dataset: `ds.write_datasink(Sink(uri))`.

    Every write task writes its own shards through a `Writer` and stages them
    (`Writer.stage`); when all have finished, the driver commits every task's samples as
    one version (`commit_staged`), in task order. Readers see all of them or nothing: a
    job that fails commits nothing. A task that Ray retries (a worker killed mid-write)
    stages again; only the attempt that returned is committed, so no sample is written
    twice, and the shards of the lost attempt are leftovers that `ferroload gc` deletes.
    Concurrent writers are handled as for any `Writer` (put-if-absent of the version).

    Columns: `id_column` (default `sample_id`) gives the sample ids; without it each row
    gets `<job>-<task>-<row>`. Binary columns are modalities: those named in `modalities`,
    those `ferroload.ray.read` returned as bytes (it marks them), and any other binary
    column, named after the format of its first value (`jpg`, `png`, `flac`, …, else
    `bin`). Every other column is metadata, with ferroload's type rules.

    Args:
        uri: the dataset root (local path, `s3://…`, `gs://…`, `az://…`), reachable from
            every worker.
        mode: `create` (default: refuse an existing dataset), `append` or `overwrite`.
        name: the dataset name (default: the last part of `uri`, or the existing one's).
        modalities: column -> extension (`"jpg"`), `Modality`, or `{"ext", "kind",
            "codec_hint"}`, for binary columns to declare explicitly.
        id_column: the column of sample ids (used when present).
        shard_size: target bytes per shard.
        storage_options: backend options of `uri`.
        min_rows_per_write: rows Ray gives each write task at least (fewer, larger
            tasks: fewer shards); None lets Ray choose.

    Attributes:
        version: the version the write committed (None before, or when an `append`
            had no rows).

    Raises:
        DatasetExistsError: `mode="create"` on an existing dataset (before any task runs).
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        mode: WriteMode = "create",
        name: str | None = None,
        modalities: Mapping[str, ModalitySpec] | None = None,
        id_column: str = "sample_id",
        shard_size: int = DEFAULT_SHARD_SIZE,
        storage_options: Mapping[str, Any] | None = None,
        min_rows_per_write: int | None = None,
    ) -> None:
        self.uri = os.fspath(uri)
        self.mode: WriteMode = check_mode(mode)
        self.name = name
        self.modalities = {k: _declared(k, v) for k, v in (modalities or {}).items()}
        self.id_column = id_column
        self.shard_size = shard_size
        self.storage_options = dict(storage_options) if storage_options else None
        self._min_rows = min_rows_per_write
        self._job = secrets.token_hex(4)  # auto ids: unique to this sink
        self.version: int | None = None

    def __repr__(self) -> str:
        return f"Sink({self.uri!r}, mode={self.mode!r})"

    def auto_id(self, task_idx: int, row: int) -> str:
        """The id of a row without `id_column`: `<job>-<task>-<row>`."""
        return f"{self._job}-{task_idx:05d}-{row:08d}"

    @property
    def min_rows_per_write(self) -> int | None:
        return self._min_rows

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """Refuse a `create` on an existing dataset, and the like, a bad `shard_size`, and
        columns of decoded arrays, before tasks run."""
        _refuse_arrays(schema)
        self._writer().abort()

    def _writer(self) -> Writer:
        """A `Writer` with this sink's options: each write task's, and the one that checks
        them (and the destination) on the driver before any task runs."""
        return Writer(
            self.uri,
            self.name,
            mode=self.mode,
            shard_size=self.shard_size,
            storage_options=self.storage_options,
        )

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[int, StagedWrite]:
        """Stage the task's blocks; return its index and its `StagedWrite`."""
        task = _Task(self, ctx.task_idx)
        try:
            for block in blocks:
                task.add(BlockAccessor.for_block(block).to_arrow())
        except BaseException:
            task.writer.abort()
            raise
        return ctx.task_idx, task.writer.stage()

    def on_write_complete(self, write_result: WriteResult[tuple[int, StagedWrite]]) -> None:
        """Commit every task's staged write as one version, in task order."""
        staged = [s for _, s in sorted(write_result.write_returns, key=lambda r: r[0])]
        self.version = commit_staged(
            self.uri,
            staged,
            mode=self.mode,
            name=self.name,
            storage_options=self.storage_options,
        )

    def on_write_failed(self, error: Exception) -> None:
        logger.warning(
            "writing %s failed (%s); nothing was committed, and the shards its tasks "
            "staged are left for `ferroload gc`",
            self.uri,
            error,
        )


def write(ds: ray.data.Dataset, uri: str | os.PathLike[str], **options: Any) -> int | None:
    """Write the Ray dataset `ds` as one new version of the dataset at `uri` (a `Sink`).

    Args:
        ds: the Ray dataset.
        uri: the dataset root, reachable from every worker.
        **options: `Sink`'s (`mode`, `name`, `modalities`, `id_column`, `shard_size`,
            `storage_options`, `min_rows_per_write`).

    Returns:
        The committed version (None: an `append` of no rows).

    Examples:
        >>> import ray, ferroload.ray  # doctest: +SKIP
        >>> ds = ray.data.from_items([{"sample_id": "a", "image": b"...", "label": 1}])
        >>> ferroload.ray.write(ds, "s3://bucket/photos", mode="append")  # doctest: +SKIP
        3
    """
    sink = Sink(uri, **options)
    ds.write_datasink(sink)
    return sink.version
