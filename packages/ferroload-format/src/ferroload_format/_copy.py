"""Materializing a dataset or a view of one as a new dataset (`Dataset.copy_to`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ferroload_core import ProgressArg, progress_reporter
from ferroload_format._errors import DatasetNotFoundError
from ferroload_format._versions import read_manifest
from ferroload_format._write_modes import WriteMode, check_mode
from ferroload_format._writer import DEFAULT_SHARD_SIZE, Writer
from ferroload_store import open_store

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
    mode: WriteMode = "create",
    progress: ProgressArg = None,
) -> int | None:
    """Write the samples of `ds` (in its order) into the dataset at `uri` as `mode` says
    (see `Dataset.copy_to`).

    Payload bytes are copied as they are (checksums verified on the way when `ds` verifies
    them); metadata columns keep their Arrow types. Returns the committed version, None
    when `ds` is empty and is appended to an existing dataset (nothing to commit).
    """
    mode = check_mode(mode)
    manifest = ds.manifest
    modalities = [m.name for m in manifest.modalities]
    meta = [f.name for f in manifest.metadata]
    total = len(ds)
    if total == 0 and mode == "append" and not _exists(uri, storage_options):
        mode = "create"  # an empty view still makes a (empty) dataset
    with (
        Writer(
            uri,
            name if name is not None or mode != "create" else manifest.name,
            shard_size=shard_size,
            storage_options=storage_options,
            mode=mode,
        ) as w,
        progress_reporter(progress, desc="copy", unit="sample", total=total) as report,
    ):
        if name is None and w.base_version is None:
            w.name = manifest.name
        for m in manifest.modalities:
            w.declare(m.name, m.ext, m.kind, m.codec_hint)
        for f in manifest.metadata:
            w.declare_column(f.name, f.type)
        ids = ds.column("sample_id").to_pylist()
        report(0, total)
        for start in range(0, total, COPY_CHUNK):
            positions = np.arange(start, min(start + COPY_CHUNK, total))
            for sid, sample in zip(
                ids[start : start + COPY_CHUNK],
                ds.get_many(positions, [*meta, *modalities]),
                strict=True,
            ):
                data = {m: sample[m] for m in modalities if sample[m] is not None}
                w.add(sid, data, {k: sample[k] for k in meta})
            report(int(positions[-1]) + 1, total)
    return w.version


def _exists(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None) -> bool:
    try:
        read_manifest(open_store(uri, storage_options=storage_options))
    except DatasetNotFoundError:
        return False
    return True
