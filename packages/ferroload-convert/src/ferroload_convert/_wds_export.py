"""`export_webdataset`: a dataset to WebDataset tars."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
from ferroload_convert._sniff import same_format
from ferroload_convert._wds_lift import LIFTED
from ferroload_convert._wds_meta import MARKER, ModalityMembers, dumps, marker, to_json
from ferroload_convert._webdataset import WDS_COLUMNS
from ferroload_core import MEDIA_EXTS, sniff_ext
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
    metadata: Literal["json", "none"] = "json",
    metadata_columns: Sequence[str] | None = None,
) -> ExportReport:
    """Export a dataset as WebDataset tars.

    A dataset imported by `import_webdataset` (it has the `wds_key`, `wds_shard` and
    `wds_members` columns) comes back as it was: each sample's members are written
    under their original names (`<wds_key>.<ext>`), in their original order, with the
    original bytes, and, unless `samples_per_shard` is given, into tars named like the
    originals (relative to `dst`; a `.tar.gz` comes back uncompressed as `.tar`).
    Members kept as metadata columns (`label`, `text`, `json_text`) are written back
    from them, byte for byte.

    Any other dataset is written as `shard-000000.tar`, … of `samples_per_shard`
    samples (default 10,000), self-contained: each sample as `<sample_id>.<ext>` per
    present modality (`<sample_id>.<modality>.<ext>` for modalities that share an
    extension; for `image`, `audio` and `video` modalities the extension of the
    payload's format, read from its bytes: a PNG in a `jpg` modality is `.png`, or
    `.<modality>.png` where another modality's members are `.png`), an int `label` as
    `<sample_id>.cls` (its decimal, as
    `webdataset.TarWriter` writes it; none where it is null), and the other metadata
    columns as one JSON object `<sample_id>.json` (every column, null included; `bytes`
    in base64). Each tar opens with a `__ferroload__` member (WebDataset's readers skip
    `__…__` members) naming the columns and their types and the modalities with their
    member extensions, from which `import_webdataset` restores the same modalities and
    the same columns with the same types. Tars are deterministic
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
        metadata: `"json"` writes the metadata (`.cls` and `.json` members, the
            `__ferroload__` member); `"none"` writes modalities only.
        metadata_columns: the metadata columns written (default: all); a dataset
            imported from WebDataset writes its original members whatever this says.

    Returns:
        What was written.

    Raises:
        OutputExistsError: if `dst` is not empty (and not `overwrite`), or is a dataset.
        UnsafeNameError: for a member name that is not a safe relative path (absolute,
            with `..`, a control character: a `wds_key` or `wds_members` entry not as
            `import_webdataset` wrote it), naming the sample.
        ConvertOptionError: for a bad `samples_per_shard`, `metadata` or
            `metadata_columns` (a name that is not a metadata column), or when
            re-sharding would put
            two members of the same name in one tar (keys repeated across the original
            tars: export with `samples_per_shard=None`).

    Examples:
        >>> import tempfile, pathlib
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/export-wds", "demo") as w:
        ...     w.declare("image", "jpg", "tensor", "image")
        ...     w.add("s0", {"image": b"\\xff\\xd8\\xff jpeg bytes"}, {"label": 3, "w": 0.5})
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "wds"
        >>> export_webdataset("memory://docs/export-wds", out).num_files
        1
        >>> import tarfile
        >>> tarfile.open(out / "shard-000000.tar").getnames()
        ['__ferroload__', 's0.jpg', 's0.cls', 's0.json']
    """
    start = time.perf_counter()
    if samples_per_shard is not None and (
        not isinstance(samples_per_shard, int) or samples_per_shard < 1
    ):
        raise ConvertOptionError(
            f"samples_per_shard must be an int >= 1 or None, got {samples_per_shard!r}",
            column="samples_per_shard",
        )
    if metadata not in ("json", "none"):
        raise ConvertOptionError(
            f"metadata must be 'json' or 'none', got {metadata!r}", column="metadata"
        )
    ds = open_source(src, where, storage_options)
    chosen = _chosen_columns(ds, metadata, metadata_columns)
    out = prepare_dst(dst, overwrite=overwrite)
    staged = StagedDir(out, overwrite=overwrite)
    writer: _Tars | None = None
    try:
        if set(WDS_COLUMNS) <= set(ds.metadata_columns):
            writer = _Original(ds, staged.path, samples_per_shard, chosen)
        else:
            per_shard = samples_per_shard or DEFAULT_SAMPLES_PER_SHARD
            writer = _Generic(ds, staged.path, per_shard, chosen, marked=metadata == "json")
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

    def _mark(self, tar: TarOut, data: bytes) -> None:
        """Write the `__ferroload__` member into `tar`, once."""
        if MARKER not in tar.names:
            tar.add(MARKER, data)

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

    def __init__(
        self, ds: Dataset, out: Path, samples_per_shard: int | None, chosen: list[str]
    ) -> None:
        super().__init__(ds, out)
        self.per_shard = samples_per_shard
        meta = [c for c in ds.metadata_columns if c not in WDS_COLUMNS]
        self.columns = ["sample_id", *WDS_COLUMNS, *(m.name for m in ds.modalities), *meta]
        # what the metadata member of an exported ferroload dataset holds: the chosen
        # columns that no member of the sample holds itself (a `.cls` holds `label`)
        self.json_columns = chosen
        types = {f.name: f.type for f in ds.schema}
        cls = "cls" if _int_label(ds) else None
        # as an export of the dataset this one was imported from wrote it (the members
        # keep their names, which an export of a ferroload dataset chose so)
        self.marker = marker(
            "json", cls, {c: types[c] for c in chosen}, _MemberNames(ds).modalities
        )
        # the marker opens each original tar with a sample that has a metadata member to
        # write (every tar, when re-sharding, if any sample has one)
        self.marked = _with_metadata_member(ds) if chosen else set()
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
        if self.marked and (self.per_shard is not None or sample["wds_shard"] in self.marked):
            self._mark(tar, self.marker)
        sid, key = sample["sample_id"], sample["wds_key"]
        members = sample["wds_members"] or ()
        held = {m["modality"] for m in members}
        for member in members:
            modality = member["modality"]
            data: bytes | None
            if modality is None:  # the metadata member of a ferroload export
                cols = [
                    c
                    for c in self.json_columns
                    if c not in held and not (c in _LIFTED and sample[c] is None)
                ]
                if not cols:
                    continue
                data = dumps({c: to_json(sample[c]) for c in cols})
            elif modality in self.ds.metadata_columns:  # kept as a metadata column
                data = _column_bytes(sample[modality], modality)
            else:
                data = sample.get(modality)
            if data is None:
                raise ConvertError(
                    f"sample {sid!r} of {self.ds.uri} lists member {key}.{member['ext']} but "
                    f"has no {modality!r} payload or value; the dataset is not as "
                    "import_webdataset wrote it",
                    uri=self.ds.uri,
                    column=modality,
                )
            self._add(tar, sid, f"{key}.{member['ext']}", data)
            self.num_bytes += len(data)
        self.num_samples += 1


#: Columns that members become (`.cls`, `.txt`, `.json`): left out of the metadata member
#: where a sample has no value (it had no such member).
_LIFTED = frozenset(column for column, _ in LIFTED.values())


def _with_metadata_member(ds: Dataset) -> set[str | None]:
    """The `wds_shard` of every sample with a ferroload metadata member (modality null)."""
    members = ds.column("wds_members")
    if isinstance(members, pa.ChunkedArray):
        members = members.combine_chunks()
    if not len(members):
        return set()
    modality = pc.struct_field(pc.list_flatten(members), "modality")
    rows = pc.list_parent_indices(members).filter(pc.is_null(modality))
    return set(ds.column("wds_shard").take(pc.unique(rows)).to_pylist())


def _column_bytes(value: Any, column: str) -> bytes | None:
    """The member a lifted column came from: `str(label)`, or the text, as UTF-8."""
    if value is None:
        return None
    return str(value).encode("utf-8")


def _int_label(ds: Dataset) -> bool:
    """Whether `ds` has an integer `label` column (exported as `<key>.cls`)."""
    if "label" not in ds.metadata_columns:
        return False
    return bool(pa.types.is_integer(ds.schema.field("label").type))


def _chosen_columns(
    ds: Dataset, metadata: str, metadata_columns: Sequence[str] | None
) -> list[str]:
    """The metadata columns to export (`metadata_columns` checked), none for `"none"`."""
    available = [c for c in ds.metadata_columns if c not in WDS_COLUMNS]
    if metadata == "none":
        return []
    if metadata_columns is None:
        return available
    if isinstance(metadata_columns, str):
        metadata_columns = [metadata_columns]
    for column in metadata_columns:
        if column not in available:
            raise ConvertOptionError(
                f"metadata_columns names {column!r}, which is not a metadata column of "
                f"{ds.uri}; its columns are {', '.join(available) or 'none'}",
                uri=ds.uri,
                column=column,
            )
    return list(dict.fromkeys(metadata_columns))


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


class _MemberNames:
    """The member extensions of an exported dataset's modalities: `<ext>`, or
    `<modality>.<ext>` for modalities that share an extension (`suffix`); for a payload
    whose bytes are another format than its modality's extension (a PNG in a `jpg`
    modality), that format's extension where no other member takes it, else
    `<modality>.<format>` (`other`, per modality and format: fixed up front for every
    format of the modality's codec family, so each tar's marker names them all); the
    metadata member's extension (`json`); and what the marker says of the modalities
    (`modalities`)."""

    def __init__(self, ds: Dataset) -> None:
        exts = [m.ext.lower() for m in ds.modalities]
        self.suffix = {
            m.name: m.ext if exts.count(m.ext.lower()) == 1 else f"{m.name}.{m.ext}"
            for m in ds.modalities
        }
        self.taken = {s.lower() for s in self.suffix.values()}
        self.json = next(s for s in ("json", "meta.json", "ferroload.json") if s not in self.taken)
        taken = self.taken | {self.json, "cls"}
        self.other: dict[str, dict[str, str]] = {}
        for m in ds.modalities:
            own = self.other[m.name] = {}
            for fmt in MEDIA_EXTS.get(m.codec_hint, ()):
                if not same_format(fmt, m.ext):
                    plain = "." not in self.suffix[m.name] and fmt not in taken
                    own[fmt] = fmt if plain else f"{m.name}.{fmt}"
                    taken.add(own[fmt].lower())
        self.modalities = {
            m.name: ModalityMembers(
                m.ext, m.kind, m.codec_hint, (self.suffix[m.name], *self.other[m.name].values())
            )
            for m in ds.modalities
        }


class _Generic(_Tars):
    """Any dataset: `<sample_id>.<ext>` per modality, the extension of the payload's
    format, an int `label` as `<sample_id>.cls`, the other metadata columns as
    `<sample_id>.json`, and a `__ferroload__` member per tar naming the columns with
    their types and the modalities with their member extensions."""

    def __init__(
        self, ds: Dataset, out: Path, samples_per_shard: int, chosen: list[str], *, marked: bool
    ) -> None:
        super().__init__(ds, out)
        self.per_shard = samples_per_shard
        names = _MemberNames(ds)
        self.suffix, self.other, self.json = names.suffix, names.other, names.json
        self.cls = "label" in chosen and _int_label(ds) and "cls" not in names.taken
        self.meta = [c for c in chosen if not (self.cls and c == "label")]
        types = {f.name: f.type for f in ds.schema}
        self.marker = (
            marker(
                self.json,
                "cls" if self.cls else None,
                {c: types[c] for c in chosen},
                names.modalities,
            )
            if marked
            else None
        )
        self.columns = ["sample_id", *self.suffix, *chosen]

    def write(self, sample: dict[str, Any]) -> None:
        tar = self._switch(f"shard-{self.num_samples // self.per_shard:06d}.tar")
        if self.marker is not None:
            self._mark(tar, self.marker)
        sid = sample["sample_id"]
        for modality, suffix in self.suffix.items():
            data = sample[modality]
            if data is not None:
                # `other` has the formats named otherwise than the modality's extension
                suffix = self.other[modality].get(sniff_ext(data) or "", suffix)
                self._add(tar, sid, f"{sid}.{suffix}", data)
                self.num_bytes += len(data)
        if self.cls and sample["label"] is not None:
            self._add(tar, sid, f"{sid}.cls", str(sample["label"]).encode())
        if self.meta:
            text = dumps({c: to_json(sample[c]) for c in self.meta})
            self._add(tar, sid, f"{sid}.{self.json}", text)
        self.num_samples += 1
