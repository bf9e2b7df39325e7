"""A dataset to WebDataset tars."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ferroload_convert._errors import ConvertError, ConvertOptionError
from ferroload_convert._export import (
    StagedDir,
    TarOut,
    check_member,
    open_source,
    prepare_dst,
    read_chunks,
    safe_relative,
)
from ferroload_convert._report import ExportReport, Progress
from ferroload_convert._webdataset import WDS_COLUMNS
from ferroload_format import Dataset

#: Samples per tar when re-sharding (`samples_per_shard` not given, dataset not imported
#: from WebDataset).
DEFAULT_SAMPLES_PER_SHARD = 10_000


def export_webdataset(
    src: str | os.PathLike[str] | Dataset,
    dst: str | os.PathLike[str],
    *,
    where: str | None = None,
    samples_per_shard: int | None = None,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Export a dataset as WebDataset tars.

    A dataset imported by `import_webdataset` (it has the `wds_key`, `wds_shard` and
    `wds_members` columns) comes back as it was: each sample's members are written
    under their original names (`<wds_key>.<ext>`), in their original order, with the
    original bytes, and, unless `samples_per_shard` is given, into tars named like the
    originals (relative to `dst`; a `.tar.gz` comes back uncompressed as `.tar`).

    Any other dataset is written as `shard-000000.tar`, … of `samples_per_shard`
    samples (default 10,000), each sample as `<sample_id>.<ext>` per present modality
    (`<sample_id>.<modality>.<ext>` for modalities that share an extension) plus its
    metadata as `<sample_id>.json` (`bytes` values in base64). Tars are deterministic
    (mode 0644, mtime 0, owner 0). Everything is written into a temporary folder next to
    `dst`, renamed to `dst` only once the export is complete: a failed export leaves
    nothing behind.

    Args:
        src: the dataset: a URI, or an open `Dataset` (a view works too).
        dst: a new or empty local folder.
        where: a SQL filter over the index (see `Dataset.subset`).
        samples_per_shard: samples per tar (re-shards a dataset imported from WebDataset).
        progress: `True` draws a bar of samples on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, total)` in samples.
        storage_options: backend options of `src`.
        overwrite: replace a `dst` folder that is not empty, once the export is complete
            (see `export_image_folder`); a ferroload dataset is never replaced.

    Returns:
        What was written.

    Raises:
        OutputExistsError: if `dst` is not empty (and not `overwrite`), or is a dataset.
        UnsafeNameError: for a member name that is not a safe relative path (absolute,
            with `..`, a control character: a `wds_key` or `wds_members` entry not as
            `import_webdataset` wrote it), naming the sample.
        ConvertOptionError: for a bad `samples_per_shard`, or when re-sharding would put
            two members of the same name in one tar (keys repeated across the original
            tars: export with `samples_per_shard=None`).

    Examples:
        >>> import tempfile, pathlib
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/export-wds", "demo") as w:
        ...     w.declare("image", "jpg", "tensor", "image")
        ...     w.add("s0", {"image": b"\\xff\\xd8\\xff jpeg bytes"}, {"label": 3})
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "wds"
        >>> export_webdataset("memory://docs/export-wds", out).num_files
        1
        >>> import tarfile
        >>> tarfile.open(out / "shard-000000.tar").getnames()
        ['s0.jpg', 's0.json']
    """
    start = time.perf_counter()
    if samples_per_shard is not None and (
        not isinstance(samples_per_shard, int) or samples_per_shard < 1
    ):
        raise ConvertOptionError(
            f"samples_per_shard must be an int >= 1 or None, got {samples_per_shard!r}",
            column="samples_per_shard",
        )
    ds = open_source(src, where, storage_options)
    out = prepare_dst(dst, overwrite=overwrite)
    staged = StagedDir(out, overwrite=overwrite)
    writer: _Tars | None = None
    try:
        if set(WDS_COLUMNS) <= set(ds.metadata_columns):
            writer = _Original(ds, staged.path, samples_per_shard)
        else:
            writer = _Generic(ds, staged.path, samples_per_shard or DEFAULT_SAMPLES_PER_SHARD)
        for chunk in read_chunks(
            ds, writer.columns, progress, order=writer.order, desc="export wds"
        ):
            for sample in chunk:
                writer.write(sample)
        writer.finish()
    except BaseException:
        if writer is not None:
            writer.abort()  # closes the open tar
        staged.abort()
        raise
    staged.commit()
    return ExportReport(
        dst=str(out),
        num_samples=writer.num_samples,
        num_files=writer.num_files,
        num_bytes=writer.num_bytes,
        seconds=time.perf_counter() - start,
    )


class _Tars:
    """Tars opened one after the other; counts what went in."""

    def __init__(self, ds: Dataset, out: Path) -> None:
        self.ds = ds
        self.out = out
        self.order: np.ndarray[Any, np.dtype[np.int64]] | None = None
        self.columns: list[str] = []
        self.num_samples = self.num_files = self.num_bytes = 0
        self._tar: TarOut | None = None
        self._tar_name: str | None = None

    def write(self, sample: dict[str, Any]) -> None:
        raise NotImplementedError

    def _switch(self, name: str) -> TarOut:
        if self._tar is not None and self._tar_name == name:
            return self._tar
        self.finish()
        self._tar, self._tar_name = TarOut(self.out / name), name
        self.num_files += 1
        return self._tar

    def _add(self, tar: TarOut, sid: str, name: str, data: bytes) -> None:
        check_member(name, sample_id=sid, uri=self.ds.uri)
        if name in tar.names:
            raise ConvertOptionError(
                f"two members named {name!r} in {tar.path.name} (sample {sid!r}): keys repeat "
                "across the original tars; export with samples_per_shard=None to keep each "
                "in its own tar",
                uri=self.ds.uri,
            )
        tar.add(name, data)

    def finish(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None

    def abort(self) -> None:
        if self._tar is not None:
            self._tar.abort()
            self._tar = None


class _Original(_Tars):
    """A dataset imported from WebDataset: the original members, in the original tars."""

    def __init__(self, ds: Dataset, out: Path, samples_per_shard: int | None) -> None:
        super().__init__(ds, out)
        self.per_shard = samples_per_shard
        self.columns = ["sample_id", *WDS_COLUMNS, *(m.name for m in ds.modalities)]
        self._names: dict[str | None, str] = {}
        if samples_per_shard is None:
            # each original tar's samples together, tars in first-seen order
            shards = ds.column("wds_shard").to_pylist()
            first: dict[str | None, int] = {}
            for s in shards:
                first.setdefault(s, len(first))
            self.order = np.argsort(np.array([first[s] for s in shards]), kind="stable")
            used: set[str] = set()
            for shard in first:
                self._names[shard] = _tar_name(shard, len(used), used)

    def write(self, sample: dict[str, Any]) -> None:
        if self.per_shard is None:
            tar = self._switch(self._names[sample["wds_shard"]])
        else:
            tar = self._switch(f"shard-{self.num_samples // self.per_shard:06d}.tar")
        sid, key = sample["sample_id"], sample["wds_key"]
        for member in sample["wds_members"] or ():
            data = sample.get(member["modality"])
            if data is None:
                raise ConvertError(
                    f"sample {sid!r} of {self.ds.uri} lists member {key}.{member['ext']} but "
                    f"has no {member['modality']!r} payload; the dataset is not as "
                    "import_webdataset wrote it",
                    uri=self.ds.uri,
                    column=member["modality"],
                )
            self._add(tar, sid, f"{key}.{member['ext']}", data)
            self.num_bytes += len(data)
        self.num_samples += 1


def _tar_name(shard: str | None, n: int, used: set[str]) -> str:
    """The output name of original tar `shard`: itself (uncompressed), when safe and free."""
    rel = safe_relative(shard) if shard else None
    name = str(rel) if rel is not None else f"shard-{n:06d}.tar"
    for suffix in (".tar.gz", ".tgz"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)] + ".tar"
    if name in used:
        name = f"shard-{n:06d}.tar"
    used.add(name)
    return name


class _Generic(_Tars):
    """Any dataset: `<sample_id>.<ext>` per modality and `<sample_id>.json`."""

    def __init__(self, ds: Dataset, out: Path, samples_per_shard: int) -> None:
        super().__init__(ds, out)
        self.per_shard = samples_per_shard
        exts = [m.ext.lower() for m in ds.modalities]
        self.suffix = {
            m.name: m.ext if exts.count(m.ext.lower()) == 1 else f"{m.name}.{m.ext}"
            for m in ds.modalities
        }
        self.meta = list(ds.metadata_columns)
        taken = {s.lower() for s in self.suffix.values()}
        self.json = next(s for s in ("json", "meta.json", "ferroload.json") if s not in taken)
        self.columns = ["sample_id", *self.suffix, *self.meta]

    def write(self, sample: dict[str, Any]) -> None:
        tar = self._switch(f"shard-{self.num_samples // self.per_shard:06d}.tar")
        sid = sample["sample_id"]
        for modality, suffix in self.suffix.items():
            data = sample[modality]
            if data is not None:
                self._add(tar, sid, f"{sid}.{suffix}", data)
                self.num_bytes += len(data)
        if self.meta:
            meta = {c: sample[c] for c in self.meta}
            text = json.dumps(meta, ensure_ascii=False, default=_json_value)
            self._add(tar, sid, f"{sid}.{self.json}", text.encode("utf-8"))
        self.num_samples += 1


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
