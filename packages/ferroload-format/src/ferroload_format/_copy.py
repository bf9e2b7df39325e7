"""Materializing a dataset or a view of one as a new dataset (`Dataset.copy_to`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ferroload_format._writer import DEFAULT_SHARD_SIZE, Writer

if TYPE_CHECKING:
    from ferroload_format._dataset import Dataset

#: Samples read per coalesced batch read while copying.
COPY_CHUNK = 256


def copy_dataset(
    ds: Dataset,
    uri: str | os.PathLike[str],
    *,
    name: str | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    storage_options: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int | None:
    """Write the samples of `ds` (in its order) as a new dataset at `uri`.

    Payload bytes are copied as they are (checksums verified on the way when `ds` verifies
    them); metadata columns keep their Arrow types. Returns the committed version, None
    when `ds` is empty and `uri` already existed.
    """
    manifest = ds.manifest
    modalities = [m.name for m in manifest.modalities]
    meta = [f.name for f in manifest.metadata]
    total = len(ds)
    with Writer(
        uri, name or manifest.name, shard_size=shard_size, storage_options=storage_options
    ) as w:
        for m in manifest.modalities:
            w.declare(m.name, m.ext, m.kind, m.codec_hint)
        for f in manifest.metadata:
            w.declare_column(f.name, f.type)
        ids = ds.column("sample_id").to_pylist()
        for start in range(0, total, COPY_CHUNK):
            positions = np.arange(start, min(start + COPY_CHUNK, total))
            for sid, sample in zip(
                ids[start : start + COPY_CHUNK],
                ds.get_many(positions, [*meta, *modalities]),
                strict=True,
            ):
                data = {m: sample[m] for m in modalities if sample[m] is not None}
                w.add(sid, data, {k: sample[k] for k in meta})
            if progress is not None:
                progress(int(positions[-1]) + 1, total)
    return w.version
