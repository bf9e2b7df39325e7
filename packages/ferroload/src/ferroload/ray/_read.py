"""`read` and `Datasource`: a version as a Ray dataset, each read task reading its own shards.

The driver opens the dataset once: it applies `where` and the projection to the index, and
splits the selected rows into read tasks by shard (`plan_tasks`). Each task carries only
its own rows' sample ids, metadata and payload locations; it reads its payloads with one
coalesced ranged read per shard region, checks their checksums, and decodes them if asked.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_codec import AudioDecoder, ImageDecoder, decode_video
from ferroload_format import (
    ColumnNotFoundError,
    Dataset,
    Modality,
    ModalityArrays,
    arrow_array,
    read_payloads,
)
from ferroload_store import Store

try:
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.context import DataContext
    from ray.data.datasource import ReadTask
    from ray.data.extensions import ArrowTensorArray, ArrowVariableShapedTensorArray
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"ferroload.ray needs Ray Data ({exc}); install it with pip install 'ferroload[ray]'"
    ) from exc

#: The Arrow field metadata key of a bytes column read from a modality: the JSON of its
#: `ext`, `kind` and `codec_hint` (what `write` declares the column with).
MODALITY_KEY = b"ferroload.modality"
#: Payload bytes a read task holds when neither `rows_per_block` nor Ray asks for more tasks.
TASK_BYTES = 64 << 20

#: What decodes a modality: an `ImageDecoder`, an `AudioDecoder` (its audio arrays; the
#: rate is the decoder's), or a callable from the payload's bytes to a value.
Decoder = ImageDecoder | AudioDecoder | Callable[[bytes], Any]

ShardRef = tuple[str, int, str]  # path, size, cache version (`Dataset.shard_ref`)


def _utf8(data: bytes) -> str:
    return data.decode("utf-8")


def _default_decoder(m: Modality) -> Decoder | None:
    """How `decode=True` decodes modality `m` (None: it stays bytes)."""
    if m.kind == "text":
        return _utf8
    if m.codec_hint == "image":
        return ImageDecoder(threads=1)
    if m.codec_hint == "audio":
        return AudioDecoder(threads=1)
    if m.codec_hint == "video":
        return decode_video
    return None


@dataclass(frozen=True)
class _Payloads:
    """One modality of a read task: its field as bytes, its decoder (None: it stays
    bytes) and its payload locations."""

    field: pa.Field
    decoder: Decoder | None
    where: ModalityArrays

    def take(self, rows: npt.NDArray[np.int64]) -> _Payloads:
        """The payloads of `rows` only."""
        w = self.where
        return _Payloads(
            self.field,
            self.decoder,
            ModalityArrays(
                w.present[rows], w.shard[rows], w.offset[rows], w.length[rows], w.checksum[rows]
            ),
        )


def _codes(payloads: Sequence[_Payloads]) -> list[int]:
    """The shard codes that `payloads` read from, ascending."""
    codes = [p.where.shard[p.where.present] for p in payloads]
    return np.unique(np.concatenate(codes)).tolist() if codes else []


@dataclass(frozen=True)
class _Task:
    """What one read task reads: its rows' index columns, payload locations and shards."""

    store: Store
    verify: bool
    columns: tuple[str, ...]
    table: pa.Table  # sample_id and the metadata columns of the task's rows
    payloads: tuple[_Payloads, ...]
    shards: dict[int, ShardRef]


def plan_tasks(shards: npt.NDArray[np.int32], rows_per_task: int) -> list[npt.NDArray[np.int64]]:
    """Split positions into read tasks, keeping each shard's rows in one task.

    The rows of a shard form a group (groups in the order of their first row); a group of
    more than `rows_per_task` rows is cut into even parts of at most that many; groups
    and parts are packed in order into tasks of at most `rows_per_task` rows.

    Args:
        shards: the shard code of every position.
        rows_per_task: the most rows of one task (at least 1).

    Returns:
        The positions of each task, ascending within each shard.
    """
    order = np.argsort(shards, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(shards[order])) + 1) if len(order) else []
    groups.sort(key=lambda g: int(g[0]))
    tasks: list[npt.NDArray[np.int64]] = []
    current: list[npt.NDArray[np.int64]] = []
    count = 0
    for group in groups:
        for part in np.array_split(group, -(-len(group) // rows_per_task)):
            if current and count + len(part) > rows_per_task:
                tasks.append(np.concatenate(current))
                current, count = [], 0
            current.append(part)
            count += len(part)
    if current:
        tasks.append(np.concatenate(current))
    return [t.astype(np.int64, copy=False) for t in tasks]


class Datasource(ray.data.Datasource):
    """A dataset version (or its rows matching `where`) as a `ray.data.Datasource`.

    `ray.data.read_datasource(Datasource(uri, ...))` is `read(uri, ...)`; see `read` for
    the arguments, the columns of the blocks and the errors. The index is read here, on
    the driver, once; `get_read_tasks` only splits what was selected.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        where: str | None = None,
        version: int | None = None,
        decode: bool | Mapping[str, Decoder] = False,
        storage_options: Mapping[str, Any] | None = None,
        rows_per_block: int | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if rows_per_block is not None and (
            not isinstance(rows_per_block, int)
            or isinstance(rows_per_block, bool)
            or rows_per_block < 1
        ):
            raise ValueError(f"rows_per_block must be a positive int, got {rows_per_block!r}")
        ds = Dataset.open(uri, version=version, storage_options=storage_options)
        if ds.uri.startswith("memory://"):
            raise ValueError(
                f"{ds.uri} is a memory:// dataset, which only this process sees: Ray's "
                "workers cannot read it. Write it to local disk or object storage"
            )
        asked = [columns] if isinstance(columns, str) else columns
        wanted = list(ds.columns if asked is None else dict.fromkeys(asked))
        if not wanted:
            raise ValueError("columns is empty: name at least one column to read")
        for name in wanted:
            if name not in ds.columns:
                raise ColumnNotFoundError(
                    f"{ds.uri} has no column {name!r}; columns are {', '.join(ds.columns)}",
                    uri=ds.uri,
                    column=str(name),
                )
        self._columns = tuple(wanted)
        modalities = {m.name: m for m in ds.modalities if m.name in self._columns}
        decoders = _decoders(ds.uri, modalities, decode)
        view = ds if where is None else ds.subset(where)
        positions = np.arange(len(view), dtype=np.int64)
        self._store = ds.store
        self._uri = ds.uri
        self._verify = ds.manifest.has_checksums
        # sample_id always: errors name the sample
        meta = [c for c in self._columns if c not in modalities and c != "sample_id"]
        self._table = view.to_table(["sample_id", *meta])
        self._shards = view.shard_of()
        self._payloads = [
            _Payloads(_field(m), decoders.get(name), view.locate(name, positions))
            for name, m in modalities.items()
        ]
        self._refs = {c: view.shard_ref(c) for c in _codes(self._payloads)}
        self._rows_per_block = rows_per_block
        self._decoded = bool(decoders)

    def __repr__(self) -> str:
        return f"Datasource({self._uri!r}, rows={self._table.num_rows}, columns={self._columns})"

    def get_name(self) -> str:
        """The name of the read operator in Ray's progress and stats."""
        return "Ferroload"

    def _row_bytes(self) -> npt.NDArray[np.int64]:
        """Payload bytes of every selected row."""
        total = np.zeros(self._table.num_rows, np.int64)
        for p in self._payloads:
            total += np.where(p.where.present, p.where.length, 0)
        return total

    def estimate_inmemory_data_size(self) -> int:
        """The selected payloads' bytes plus the metadata's (decoded media are larger)."""
        return int(self._row_bytes().sum() + self._table.nbytes)

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        """The read tasks: the selected rows split by shard (`plan_tasks`).

        Args:
            parallelism: the tasks Ray asks for (`override_num_blocks`, or its own choice
                from the size estimate and the cluster). Without `rows_per_block`, a task
                holds at most `ceil(rows / parallelism)` rows, fewer where that would be
                over `TASK_BYTES` of payload; shard boundaries may make a few more tasks.
            per_task_row_limit: read at most this many rows per task (Ray's `limit`).
            data_context: Ray's context (not needed here).

        Returns:
            One `ReadTask` per block (one that yields an empty block when nothing was
            selected, so that the schema is known).
        """
        n = self._table.num_rows
        per_task = self._rows_per_block
        if per_task is None:
            tasks = max(parallelism, math.ceil(self.estimate_inmemory_data_size() / TASK_BYTES))
            per_task = max(1, math.ceil(n / max(1, tasks)))
        plans = plan_tasks(self._shards, per_task) or [np.zeros(0, np.int64)]
        row_bytes = self._row_bytes()
        schema = None if self._decoded else self._schema()
        out = []
        for planned in plans:
            rows = planned[:per_task_row_limit]
            task = self._task(rows)
            meta = BlockMetadata(
                num_rows=len(rows),
                size_bytes=int(row_bytes[rows].sum()) + task.table.nbytes,
                input_files=tuple(sorted({path for path, _, _ in task.shards.values()})),
                exec_stats=None,
            )
            out.append(ReadTask(functools.partial(_read_block, task), meta, schema=schema))
        return out

    def _task(self, rows: npt.NDArray[np.int64]) -> _Task:
        """The slice of the selection that reads `rows` (positions of the selection)."""
        payloads = [p.take(rows) for p in self._payloads]
        return _Task(
            store=self._store,
            verify=self._verify,
            columns=self._columns,
            table=self._table.take(arrow_array(rows)),
            payloads=tuple(payloads),
            shards={c: self._refs[c] for c in _codes(payloads)},
        )

    def _schema(self) -> pa.Schema:
        """The blocks' schema, when no column is decoded."""
        fields = {f.name: f for f in self._table.schema}
        fields.update({p.field.name: p.field for p in self._payloads})
        return pa.schema([fields[c] for c in self._columns])


def read(
    uri: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    where: str | None = None,
    version: int | None = None,
    decode: bool | Mapping[str, Decoder] = False,
    storage_options: Mapping[str, Any] | None = None,
    rows_per_block: int | None = None,
    override_num_blocks: int | None = None,
) -> ray.data.Dataset:
    """A dataset version as a `ray.data.Dataset`, one row per sample.

    The index is read once, on the driver: `where` and the projection are applied there,
    and the selected rows are split into read tasks by shard, so that each task reads its
    own shards with coalesced ranged reads (as the loader does) and checks every
    payload's checksum. A block's rows keep the dataset's order; blocks come as Ray
    finishes them (in order with `DataContext.execution_options.preserve_order`).

    Blocks have the columns asked for, in that order (default: `sample_id`, the
    modalities, the metadata columns; a projection has `sample_id` only if asked).
    Metadata columns keep the index's Arrow types. A modality is a `binary` column (null
    where a sample lacks it) whose field metadata `b"ferroload.modality"` holds its `ext`,
    `kind` and `codec_hint` (so that `ferroload.ray.write` writes it back the same way),
    or decoded:

    - `decode=True`: images (`codec_hint` `image`) to uint8 HWC arrays, audio to
      `(channels, frames)` float32 arrays at the file's rate, video to 8 uniformly chosen
      THWC frames, text modalities (`kind` `text`) to `str`; other modalities stay bytes.
      Arrays of one shape form a tensor column; images of several sizes a
      variable-shaped one, which `iter_torch_batches` refuses: pass
      `decode={"image": ImageDecoder((H, W))}` to resize them.
    - `decode={modality: decoder}`: only those modalities, each with an `ImageDecoder`,
      an `AudioDecoder` or a callable from bytes to a value (an array or a scalar).

    The dataset must be readable from every Ray worker: a path all nodes share, or object
    storage (`storage_options` travel with the tasks).

    Args:
        uri: dataset root: a local path, `s3://…`, `gs://…`, `az://…` or `catalog:name`.
        columns: modalities and metadata columns to read (default: all).
        where: a SQL WHERE clause over the index, as `Dataset.subset` takes it.
        version: the version to read (default: the latest).
        decode: `False` (bytes), `True`, or a mapping modality -> decoder (see above).
        storage_options: backend options (credentials, endpoint, …).
        rows_per_block: rows of one read task and block (default: Ray's parallelism, in
            tasks of at most `TASK_BYTES` of payload); a shard's rows share a task
            whenever the shard has no more rows than that.
        override_num_blocks: the number of read tasks to ask for (Ray's option).

    Returns:
        The `ray.data.Dataset` (lazy: nothing but the index is read until it is used).

    Raises:
        ColumnNotFoundError: for a column the dataset does not have.
        QueryError: if `where` cannot run (`UnsafeQueryError` if it reaches beyond the
            index).
        DatasetNotFoundError, VersionNotFoundError: as `Dataset.open`.
        ValueError: for a `decode` naming no modality read, an `ImageDecoder` with random
            crops or flips, or a `memory://` dataset (Ray's workers cannot see it).
        TypeError: for a `decode` value that is no decoder.

    When the blocks are read, a damaged payload raises `ChecksumMismatchError`, a missing
    or short shard `ShardNotFoundError` / `ShardTruncatedError` (each naming the sample).

    Examples:
        >>> import ferroload.ray  # doctest: +SKIP
        >>> ds = ferroload.ray.read("s3://bucket/photos", columns=["image", "label"],
        ...                         where="label < 10", decode=True)  # doctest: +SKIP
        >>> ds.take(1)[0]["image"].shape  # doctest: +SKIP
        (480, 640, 3)
    """
    source = Datasource(
        uri,
        columns=columns,
        where=where,
        version=version,
        decode=decode,
        storage_options=storage_options,
        rows_per_block=rows_per_block,
    )
    ds: ray.data.Dataset = ray.data.read_datasource(source, override_num_blocks=override_num_blocks)
    return ds


# ----------------------------------------------------------------- on the driver


def _decoders(
    uri: str, modalities: Mapping[str, Modality], decode: bool | Mapping[str, Decoder]
) -> dict[str, Decoder]:
    """The decoder of each modality to decode, checked."""
    if isinstance(decode, bool):
        if not decode:
            return {}
        defaults = {name: _default_decoder(m) for name, m in modalities.items()}
        return {name: d for name, d in defaults.items() if d is not None}
    for name, decoder in decode.items():
        if name not in modalities:
            raise ValueError(
                f"decode names {name!r}, which is not a modality read from {uri} "
                f"(modalities read: {', '.join(modalities) or 'none'})"
            )
        if not isinstance(decoder, ImageDecoder | AudioDecoder) and not callable(decoder):
            raise TypeError(
                f"decode[{name!r}] must be an ImageDecoder, an AudioDecoder or a callable "
                f"taking bytes, got {type(decoder).__name__}"
            )
        if isinstance(decoder, ImageDecoder) and decoder.needs_seeds:
            raise ValueError(
                f"decode[{name!r}] draws random crops or flips, which need a seed per "
                "image: decode without them here and augment in map_batches"
            )
    return dict(decode)


def _field(m: Modality) -> pa.Field:
    """The bytes column of modality `m`: binary, with the modality's description."""
    about = {"ext": m.ext, "kind": m.kind, "codec_hint": m.codec_hint}
    return pa.field(m.name, pa.binary(), metadata={MODALITY_KEY: json.dumps(about).encode()})


# ----------------------------------------------------------------- in the read task


def _read_block(task: _Task) -> list[pa.Table]:
    """The block of one read task."""
    ids = task.table.column("sample_id")

    def sample_id(k: int) -> str:  # asked for errors and decoders only: no list of every id
        return str(ids[k].as_py())

    arrays = {name: task.table.column(name) for name in task.table.column_names}
    fields = dict(zip(task.table.column_names, task.table.schema, strict=True))
    for p in task.payloads:
        data = read_payloads(
            task.store, p.where, task.shards.__getitem__, column=p.field.name,
            verify=task.verify, sample_id=sample_id, copy=False,
        )  # fmt: skip
        if p.decoder is None:
            arrays[p.field.name] = pa.array(data, pa.binary())
            fields[p.field.name] = p.field
        else:
            arrays[p.field.name] = _decoded(data, p.decoder, p.field.name, sample_id)
            fields[p.field.name] = pa.field(p.field.name, arrays[p.field.name].type)
    schema = pa.schema([fields[c] for c in task.columns])
    return [pa.Table.from_arrays([arrays[c] for c in task.columns], schema=schema)]


def _decoded(
    data: list[memoryview | None], decoder: Decoder, column: str, sample_id: Callable[[int], str]
) -> pa.Array:
    """The decoded payloads as one column: a tensor column for arrays, else Arrow's type of
    the values; null where a payload is absent."""
    present = [k for k, d in enumerate(data) if d is not None]
    values = []
    for k in present:
        payload = data[k]
        assert payload is not None
        sid = sample_id(k)
        try:
            if isinstance(decoder, ImageDecoder):
                values.append(decoder.decode(payload, sample_id=sid))
            elif isinstance(decoder, AudioDecoder):
                values.append(decoder.decode(payload, sample_id=sid)[0])
            else:
                values.append(decoder(bytes(payload)))
        except Exception as exc:
            exc.add_note(f"decoding {column!r} of sample {sid!r}")
            raise
    if not values:
        return pa.nulls(len(data))
    arr = _tensors(values) if all(isinstance(v, np.ndarray) for v in values) else pa.array(values)
    if len(present) == len(data):
        return arr
    slots: list[int | None] = [None] * len(data)
    for j, k in enumerate(present):
        slots[k] = j
    return arr.take(pa.array(slots, pa.int64()))


def _tensors(values: list[npt.NDArray[Any]]) -> pa.Array:
    """Arrays as a Ray tensor column: fixed-shape when they share a shape and dtype."""
    if len({(v.shape, v.dtype) for v in values}) == 1:
        return ArrowTensorArray.from_numpy(np.stack(values))
    ragged = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        ragged[k] = v
    return ArrowVariableShapedTensorArray.from_numpy(ragged)
