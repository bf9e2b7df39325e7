"""A fast generator of large ferroload datasets for `bench_scale.py`.

`Writer.add` costs about 7 µs of Python per sample without a payload and 15 µs with one
(2-core machine); this module does that per-sample work with numpy (2 and 9 µs per sample,
the rest being the commit and the disk) and produces **the same bytes the Writer would**
for a regular set of samples:

* sample ids `s0000000000`, `s0000000001`, … (11 characters);
* metadata `label` (int64, `(i * 7919) % 1000`: spread, so no row group can be pruned)
  and `ts` (int64, `i`: a timestamp-like column, sorted, so row groups prune on it);
* optionally one modality `image` (ext `png`, kind `tensor`, hint `image`): sample `i`
  holds PNG number `i % 256` of a fixed set of 4x4 RGB PNGs (about 70-80 bytes each, so
  the loader decodes real images). A USTAR member is then 1 KiB (a 512-byte header, the
  data padded to 512), so 10^7 samples are 10 GB of shards; without the modality a sample
  has no tar member at all.

Tar shards are laid out as one (samples, 1 KiB) uint8 array per shard: the header template
of `_tar.ustar_header`, the member names and checksums filled in column-wise. Shards split
where the Writer splits them for `shard_size`. Side indexes are written with
`_index.write_part` like `Writer.write_side_index`; the index table is the Writer's
`IndexBuilder.table` schema, built from numpy arrays; and the commit is the Writer's own
`_commit.commit` (manifest, index part, sample-id run, publication). A dataset of more than
`session_rows` samples is written as several appends of `session_rows` samples (one index
part each), as a job writing its data in sessions would: one commit of a 10^8-row table
would hold ~10 GB of Arrow strings in memory.

`check_twin(n)` writes `n` samples both ways and checks that `verify()` passes and every
row and payload read back is equal.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from ferroload_format._commit import commit
from ferroload_format._index import index_schema, write_part
from ferroload_format._manifest import Manifest
from ferroload_format._names import new_txn_id
from ferroload_format._paths import shard_paths
from ferroload_format._pending import PendingCommit
from ferroload_format._records import Modality, ShardInfo
from ferroload_format._tar import _TEMPLATE, _TEMPLATE_SUM, BLOCK, END_OF_ARCHIVE
from ferroload_format._versions import read_manifest
from ferroload_store import Store, open_store

ID_WIDTH = 10  # digits of a sample id: s + 10 digits covers 10^10 samples
NUM_PAYLOADS = 256
MODALITY = Modality("image", "png", "tensor", "image")
METADATA = (pa.field("label", pa.int64()), pa.field("ts", pa.int64()))
DEFAULT_SHARD_SIZE = 256 << 20
SESSION_ROWS = 10_000_000
_TABLE: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def sample_id(i: int) -> str:
    return f"s{i:0{ID_WIDTH}d}"


def _payload_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes (k, 512) uint8 zero-padded, lengths, xxh3 checksums) of the k PNGs."""
    global _TABLE
    if _TABLE is None:
        import io

        from PIL import Image

        rng = np.random.default_rng(16)
        data = np.zeros((NUM_PAYLOADS, BLOCK), dtype=np.uint8)
        lengths = np.zeros(NUM_PAYLOADS, dtype=np.int64)
        sums = np.zeros(NUM_PAYLOADS, dtype=np.uint64)
        for k in range(NUM_PAYLOADS):
            pixels = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels, "RGB").save(buf, format="PNG")
            png = buf.getvalue()
            assert len(png) <= BLOCK
            data[k, : len(png)] = np.frombuffer(png, dtype=np.uint8)
            lengths[k] = len(png)
            sums[k] = xxhash.xxh3_64_intdigest(png)
        _TABLE = (data, lengths, sums)
    return _TABLE


def payload(i: int) -> bytes:
    """The payload of sample `i`."""
    data, lengths, _ = _payload_table()
    k = i % NUM_PAYLOADS
    return data[k, : lengths[k]].tobytes()


def _digits(idx: np.ndarray) -> np.ndarray:
    """(n, ID_WIDTH) uint8 ASCII digits of each index, zero-padded."""
    powers = 10 ** np.arange(ID_WIDTH - 1, -1, -1, dtype=np.int64)
    return ((idx[:, None] // powers) % 10 + 48).astype(np.uint8)


def _fixed_strings(chars: np.ndarray) -> pa.Array:
    """A pa.string array over rows of equal-width ASCII bytes (no Python objects)."""
    n, w = chars.shape
    offsets = (np.arange(n + 1, dtype=np.int64) * w).astype(np.int32)
    data = np.ascontiguousarray(chars).reshape(-1)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _id_chars(idx: np.ndarray) -> np.ndarray:
    out = np.empty((len(idx), 1 + ID_WIDTH), dtype=np.uint8)
    out[:, 0] = ord("s")
    out[:, 1:] = _digits(idx)
    return out


def _octal(values: np.ndarray, width: int) -> np.ndarray:
    powers = 8 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] // powers) % 8 + 48).astype(np.uint8)


def _shard_bytes(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A tar shard of samples `idx`: (its bytes as uint8, member names as (n, w) uint8,
    payload lengths, checksums)."""
    n = len(idx)
    table, table_len, table_sum = _payload_table()
    which = idx % NUM_PAYLOADS
    lengths, sums = table_len[which], table_sum[which]
    suffix = np.frombuffer(f".{MODALITY.name}.{MODALITY.ext}".encode(), dtype=np.uint8)
    names = np.empty((n, 1 + ID_WIDTH + len(suffix)), dtype=np.uint8)
    names[:, : 1 + ID_WIDTH] = _id_chars(idx)
    names[:, 1 + ID_WIDTH :] = suffix
    arr = np.zeros((n, 2 * BLOCK), dtype=np.uint8)  # header + data padded to a block
    arr[:, :BLOCK] = np.frombuffer(_TEMPLATE, dtype=np.uint8)
    arr[:, : names.shape[1]] = names
    size_field = np.empty((n, 12), dtype=np.uint8)
    size_field[:, :11] = _octal(lengths, 11)
    size_field[:, 11] = 0
    arr[:, 124:136] = size_field
    # the template's size field is zeros, so its sum adds to the template's (as _tar does)
    chk = _TEMPLATE_SUM + names.sum(axis=1, dtype=np.int64) + size_field.sum(axis=1, dtype=np.int64)
    arr[:, 148:154] = _octal(chk, 6)
    arr[:, 154] = 0
    arr[:, 155] = ord(" ")
    arr[:, BLOCK:] = table[which]
    tar = np.concatenate([arr.reshape(-1), np.frombuffer(END_OF_ARCHIVE, dtype=np.uint8)])
    return tar, names, lengths, sums


def _per_shard(shard_size: int) -> int:
    """Samples the Writer puts in one shard: it starts a new one when the next 1 KiB
    member plus the end-of-archive blocks would pass `shard_size`."""
    member = 2 * BLOCK
    return max(1, (shard_size - len(END_OF_ARCHIVE)) // member)


def _session(
    store: Store,
    name: str,
    base: Manifest | None,
    start: int,
    stop: int,
    *,
    payloads: bool,
    shard_size: int,
) -> Manifest:
    """One writer session: samples [start, stop) committed as one version."""
    txn = new_txn_id()
    n = stop - start
    idx = np.arange(start, stop, dtype=np.int64)
    shards: list[ShardInfo] = []
    codes = np.zeros(n, dtype=np.int32)
    offsets = np.zeros(n, dtype=np.int64)
    lengths = np.zeros(n, dtype=np.int64)
    checksums = np.zeros(n, dtype=np.uint64)
    if payloads:
        per = _per_shard(shard_size)
        for k, a in enumerate(range(0, n, per)):
            b = min(n, a + per)
            tar, names, lens, sums = _shard_bytes(idx[a:b])
            path, side = shard_paths(txn, k)
            store.put(path, memoryview(tar))
            offs = BLOCK + np.arange(b - a, dtype=np.int64) * 2 * BLOCK
            side_table = pa.table(
                {
                    "member": _fixed_strings(names),
                    "offset": pa.array(offs, type=pa.int64()),
                    "length": pa.array(lens),
                    "checksum": pa.array(sums, type=pa.uint64()),
                }
            )
            store.put(side, write_part(side_table))
            shards.append(ShardInfo(path, side, len(tar), b - a, b - a, 0))
            codes[a:b] = k
            offsets[a:b] = offs
            lengths[a:b] = lens
            checksums[a:b] = sums
    else:
        # The Writer opens a shard for the first sample even when it has no payload and
        # closes it empty: the end-of-archive blocks and an empty side index.
        path, side = shard_paths(txn, 0)
        store.put(path, END_OF_ARCHIVE)
        store.put(
            side,
            write_part(
                pa.table(
                    {
                        "member": pa.array([], type=pa.string()),
                        "offset": pa.array([], type=pa.int64()),
                        "length": pa.array([], type=pa.int64()),
                        "checksum": pa.array([], type=pa.uint64()),
                    }
                )
            ),
        )
        shards.append(ShardInfo(path, side, len(END_OF_ARCHIVE), 0, 0, 0))
    shard_names = pa.array([s.path for s in shards], type=pa.string())
    columns: list[Any] = [
        _fixed_strings(_id_chars(idx)),
        shard_names.take(pa.array(codes)),
    ]
    mods: tuple[Modality, ...] = ()
    if payloads:
        mods = (MODALITY,)
        columns.append(
            pa.StructArray.from_arrays(
                [
                    pa.array(np.ones(n, dtype=np.bool_)),
                    pa.array(offsets),
                    pa.array(lengths),
                    pa.array(checksums),
                ],
                fields=list(index_schema([MODALITY.name], []).field(MODALITY.name).type),
            )
        )
    columns.append(pa.array((idx * 7919) % 1000))
    columns.append(pa.array(idx))
    schema = index_schema([m.name for m in mods], METADATA)
    table = pa.Table.from_arrays(columns, schema=schema)
    pending = PendingCommit(
        name=name,
        txn=txn,
        base_version=base.version if base is not None else None,
        modalities=mods,
        shards=shards,
        table=table,
        operation="create" if base is None else "append",
        mode="append",
        base=base,
    )
    return commit(store, pending)


def write_dataset(
    root: str | Path,
    n: int,
    *,
    payloads: bool,
    name: str = "scale",
    shard_size: int = DEFAULT_SHARD_SIZE,
    session_rows: int = SESSION_ROWS,
    log: Any = None,
) -> dict[str, Any]:
    """Write `n` samples to a new dataset at `root` (see the module doc); returns what it
    wrote (seconds, versions, bytes of shards and of the index)."""
    store = open_store(str(root))
    t0 = time.perf_counter()
    base: Manifest | None = None
    for start in range(0, n, session_rows):
        stop = min(n, start + session_rows)
        base = _session(store, name, base, start, stop, payloads=payloads, shard_size=shard_size)
        if log is not None:
            log(f"  {root}: {stop:,} / {n:,} samples ({time.perf_counter() - t0:.0f} s)")
    manifest = base if base is not None else read_manifest(store)
    return {
        "seconds": time.perf_counter() - t0,
        "versions": manifest.version,
        "index_parts": len(manifest.index_parts),
        "shards": manifest.num_shards,
        "shard_bytes": int(manifest.statistics.get("shard_bytes", 0)),
        "index_bytes": sum(p.size for p in manifest.index_parts),
        "id_run_bytes": sum(r.size for r in manifest.id_runs),
    }


def write_with_writer(
    root: str | Path,
    n: int,
    *,
    payloads: bool,
    name: str = "scale",
    shard_size: int = DEFAULT_SHARD_SIZE,
    session_rows: int = SESSION_ROWS,
) -> None:
    """The same samples through the public `Writer` (the reference `check_twin` compares
    against)."""
    from ferroload_format import Writer

    for start in range(0, n, session_rows):
        with Writer(str(root), name, shard_size=shard_size) as w:
            if payloads:
                w.declare(MODALITY.name, MODALITY.ext, MODALITY.kind, MODALITY.codec_hint)
            for i in range(start, min(n, start + session_rows)):
                data = {MODALITY.name: payload(i)} if payloads else None
                w.add(sample_id(i), data, {"label": (i * 7919) % 1000, "ts": i})


def check_twin(workdir: str | Path, n: int = 10_000, **kw: Any) -> None:
    """Write `n` samples with the generator and with the Writer (both with and without
    payloads) and check `verify()` and that everything reads back equal.

    Raises:
        AssertionError: naming the first difference.
    """
    from ferroload_format import Dataset

    workdir = Path(workdir)
    for payloads in (True, False):
        fast, ref = workdir / f"fast-{payloads}", workdir / f"ref-{payloads}"
        write_dataset(fast, n, payloads=payloads, **kw)
        write_with_writer(ref, n, payloads=payloads, **kw)
        a, b = Dataset.open(str(fast)), Dataset.open(str(ref))
        report = a.verify()
        assert report.ok, f"verify() of the generated dataset: {report}"
        ma, mb = a.manifest, b.manifest
        assert ma.modalities == mb.modalities
        assert ma.metadata == mb.metadata, (ma.metadata, mb.metadata)
        assert len(ma.index_parts) == len(mb.index_parts)
        assert [(s.size, s.num_samples, s.num_members) for s in ma.shards] == [
            (s.size, s.num_samples, s.num_members) for s in mb.shards
        ]
        assert ma.statistics["modalities"] == mb.statistics["modalities"]
        for key in ("num_samples", "num_shards", "shard_bytes"):
            assert ma.statistics[key] == mb.statistics[key], key
        # the shard paths in the index carry each writer's random txn: zstd may differ
        # by a few bytes
        assert abs(ma.statistics["index_bytes"] - mb.statistics["index_bytes"]) <= 64 * len(
            ma.index_parts
        )
        ta, tb = a.to_table(), b.to_table()
        assert ta.schema.equals(tb.schema), (ta.schema, tb.schema)
        for col in ta.column_names:
            if col == "shard":  # the paths carry each writer's own txn
                continue
            assert ta.column(col).equals(tb.column(col)), col
        # shard bytes identical (names carry the txn; contents do not)
        for sa, sb in zip(ma.shards, mb.shards, strict=True):
            assert a.store.get(sa.path) == b.store.get(sb.path), sa.path
            assert a.store.get(sa.side_index) == b.store.get(sb.side_index), sa.side_index
        if payloads:
            pos = np.arange(n)
            got_a = a.get_many(pos, [MODALITY.name])
            got_b = b.get_many(pos, [MODALITY.name])
            assert got_a == got_b
