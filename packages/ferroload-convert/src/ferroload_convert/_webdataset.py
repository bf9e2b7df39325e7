"""`import_webdataset`: WebDataset tars to a dataset, losslessly.

What the import records so that `export_webdataset` writes the same members back
(names and bytes): see `WDS_COLUMNS`. `.cls`, `.txt` and `.json` members are stored once,
as metadata columns, whenever their bytes come back exactly from the value (`_wds_lift`);
a ferroload export's `.json` turns back into its columns (`_wds_meta`). Reading one tar,
grouping its members into samples, is `_wds_tar`'s; this module names the modalities and
writes the samples.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ferroload_convert._cluster import Executor, SessionOptions, run_job
from ferroload_convert._errors import BadInputError, ConvertOptionError
from ferroload_convert._files import DEFAULT_MAX_FILE_BYTES, check_max_bytes
from ferroload_convert._ids import column_name
from ferroload_convert._pipeline import Failed, ordered_streams
from ferroload_convert._report import (
    DEFAULT_WORKERS,
    ImportReport,
    OnError,
    PassedOver,
    Progress,
    check_common,
)
from ferroload_convert._session import ImportSession
from ferroload_convert._sniff import kind_of
from ferroload_convert._sources import Source, source_files
from ferroload_convert._wds_lift import LIFTED, lift
from ferroload_convert._wds_meta import MarkerInfo
from ferroload_convert._wds_tar import Ignored, read_tar
from ferroload_core import FerroloadError
from ferroload_format import DEFAULT_SHARD_SIZE, WriteMode

logger = logging.getLogger(__name__)

#: Metadata of a sample imported from WebDataset: the original key, the tar it came from
#: (relative to the source folder), and its members in tar order as `{ext, modality}`:
#: the payload of each is in that modality, or in the metadata column of that name
#: (`label`, `text`, `json_text`), or, for modality None, it is a ferroload export's
#: metadata member (the other columns). Their presence marks a dataset as imported from
#: WebDataset; `export_webdataset` then writes `<wds_key>.<ext>` per member.
WDS_COLUMNS = ("wds_key", "wds_shard", "wds_members")
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: A compressed tar may inflate to this many times its size (plus 1 MiB) by default.
DEFAULT_MAX_INFLATE_RATIO = 100.0


def import_webdataset(
    src: Source,
    dst: str | os.PathLike[str],
    *,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_inflate_ratio: float = DEFAULT_MAX_INFLATE_RATIO,
    mode: WriteMode = "create",
    executor: Executor | None = None,
    chunk_size: int | None = None,
) -> ImportReport:
    """Import WebDataset tars: every member kept, byte for byte.

    Each extension becomes a modality named after it (`jpg`, `seg.png` -> `seg_png`,
    `JPG` -> `jpg_2` when `jpg` is taken), with the extension's last part as the format
    extension; image extensions get kind `tensor` / codec `image`, audio and video
    theirs, text ones kind `text`, others `bytes`. Metadata: `wds_key` (the original
    key), `wds_shard` (the tar, relative to `src`), `wds_members` (the extensions in
    tar order, each with the modality or column holding it: what lets
    `export_webdataset` write the same members back). The sample id is the key,
    sanitized (`a/b/x` -> `a~b~x`); a key seen in two tars gets `#2`.

    Stored once, as metadata columns rather than modalities: a `.cls` holding an int
    as `str(int)` writes it (what `webdataset.TarWriter` writes) becomes `label`; a
    `.txt` in UTF-8 becomes `text`; a `.json` in UTF-8 becomes `json_text` (the exact
    text, which DuckDB's JSON functions read), all up to 64 KiB; export writes their
    bytes back from the columns. Any other such member stays a payload (a `.cls` that
    reads as an int but is spelled otherwise, `" 4\\n"`, also gives `label`). In a tar
    written by `export_webdataset` (it has a `__ferroload__` member naming the columns
    and their types, and the modalities with their member extensions), each member goes
    back into the modality the marker names (declared as it was), and each `.json`
    becomes those metadata columns again, with the same types.

    Directory entries, members without an extension and WebDataset's `__…__` meta
    members are left out, each named with its reason in the report's `ignored`. Image
    members are checked without decoding; a
    damaged or truncated tar is a bad input as a whole, named by its path.

    Reads are bounded: a tar must be a regular file (a FIFO or device is never opened),
    a member larger than `max_file_bytes` is a bad input (its sample is left out, the
    rest of the tar is read), and a compressed tar (gzip, bzip2, xz) that inflates to
    more than `max_inflate_ratio` times its size (plus 1 MiB) is a bad input as a whole:
    reading stops at the limit.

    Sources are WebDataset's: a brace pattern (`train-{0000..0003}.tar`, `{a,b}.tar`,
    as `braceexpand` expands it, zero-padding kept), several joined by `::`, or a list;
    each may be local or an object-store URL (`s3://…`, `gs://…`, `az://…`,
    `memory://…`: an object, a prefix searched, or a glob over one prefix). A tar in an
    object store is streamed in 32 MiB range reads (parallel parts) into a temporary
    file, read there with the same checks and limits as a local one, and removed:
    memory stays bounded.

    Args:
        src: a tar (`.tar`, `.tar.gz`, `.tgz`), a folder (or URL prefix) searched for
            them, a glob, a brace pattern, or a list of these; local or URLs.
        dst: the dataset URI.
        name: the dataset name (default: the last part of `dst`).
        workers: tars read at once (each by one thread).
        on_error: a bad tar or member raises `BadInputError` (`"raise"`, nothing is
            committed), or is left out and listed in the report (`"skip"`, `"warn"`).
        shard_size: target bytes per ferroload shard.
        progress: `True` draws a bar of samples on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, None)` in samples (the total is not known up front).
        storage_options: backend options of `dst` and of the sources' object stores.
        max_file_bytes: the largest member read (default 2 GiB).
        mode: what to do with a dataset already at `dst`: `"create"` (the default)
            refuses it with `DatasetExistsError`; `"append"` adds to it (an id it already
            has gets a `#2` suffix); `"overwrite"` replaces its content in a new version.
        max_inflate_ratio: how many times its size a compressed tar may inflate to
            (default 100).

        executor: run the import as tasks on a cluster (`ferroload_map.RayExecutor()`),
            each staging `chunk_size` tars (default 1), with one commit: the same dataset
            as on this machine, sample for sample (docs/convert.md). The destination and
            the tars must be reachable from every worker.
        chunk_size: tars per task with an `executor`.
    Returns:
        What was imported; `columns` maps each extension to its modality (or to the
        column it became: `cls` -> `label`, `txt` -> `text`, `json` -> `json_text`).

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `dst`.
        InputNotFoundError: if `src` (or a name a pattern expands to) matches no tar.
        BadInputError: for a damaged tar, a duplicate member, a damaged image member, a
            tar that is not a regular file, a member over `max_file_bytes` or a tar that
            inflates beyond `max_inflate_ratio` (with `on_error="raise"`).
        ConvertOptionError: for a bad `on_error`, `workers`, `max_file_bytes` or
            `max_inflate_ratio`, or a brace pattern standing for over a million names.

    Examples:
        >>> import io, tarfile, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "shard-0.tar")
        >>> with tarfile.open(path, "w") as tar:
        ...     for name, data in [("a/k1.txt", b"hello"), ("a/k1.cls", b"3")]:
        ...         info = tarfile.TarInfo(name); info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> report = import_webdataset(path, "memory://docs/wds-import")
        >>> report.num_samples, dict(report.columns)
        (1, {'txt': 'text', 'cls': 'label'})
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/wds-import").get(0, ["sample_id", "label", "text"])
        {'sample_id': 'a~k1', 'label': 3, 'text': 'hello'}
    """
    check_common(on_error, workers)
    check_max_bytes(max_file_bytes)
    if not isinstance(max_inflate_ratio, int | float) or not max_inflate_ratio >= 1:
        raise ConvertOptionError(
            f"max_inflate_ratio must be a number >= 1, got {max_inflate_ratio!r}",
            column="max_inflate_ratio",
        )
    read = functools.partial(read_tar, max_bytes=max_file_bytes, ratio=max_inflate_ratio)
    ignored = PassedOver()
    tars = source_files(
        src, suffixes=TAR_SUFFIXES, what="WebDataset tars", storage_options=storage_options,
        ignored=ignored,
    )  # fmt: skip
    job = _WdsJob(tars, read, workers, ignored=ignored)
    options = SessionOptions(
        os.fspath(dst), name, shard_size, storage_options, on_error, mode, "import wds", "sample"
    )
    return run_job(job, options, progress=progress, executor=executor, chunk_size=chunk_size)


@dataclass(frozen=True)
class _WdsState:
    """What a WebDataset import decides in input order, besides the sample ids: the
    extension -> modality names, the extensions lifted into columns, the columns the
    `__ferroload__` markers declared (and the names they reserve), the columns of
    every marker a run saw (for `_WdsJob.consistent`), and the modalities the markers
    declared (name -> ext, kind, codec hint); and the extensions met as members of a
    modality (a marker names some that no tar holds: the report lists only these)."""

    assigned: dict[str, str] = field(default_factory=dict)
    lifted: dict[str, str] = field(default_factory=dict)
    declared: dict[str, pa.DataType] = field(default_factory=dict)
    reserved: frozenset[str] = frozenset()
    marker_columns: frozenset[str] = frozenset()
    specs: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    met: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _WdsJob:
    """`import_webdataset` as a job: the tars in input order."""

    units: list[Any]
    read: Any
    workers: int
    kind: str = "wds"
    ignored: PassedOver = field(default_factory=PassedOver)
    bad: tuple[BadInputError, ...] = ()

    def initial_state(self) -> _WdsState:
        return _WdsState()

    def start(self, session: ImportSession) -> None:
        pass  # modalities are named as extensions are met

    def run(self, session: ImportSession, units: Sequence[Any], state: _WdsState) -> _WdsState:
        names = _Modalities(session, state)
        declared = dict(state.declared)
        for column, dtype in declared.items():
            session.declare_column(column, dtype)
        markers: dict[str, MarkerInfo] = {}
        mapped: dict[str, set[str]] = {}  # per tar, the members its marker maps
        seen: set[str] = set()
        for tar, item in ordered_streams(units, self.read, workers=self.workers, buffer=32):
            if isinstance(item, MarkerInfo):
                seen.update(item.columns)
                if _accept_marker(item, tar.path, session, declared, names):
                    markers[tar.path] = item
                mapped[tar.path] = names.adopt(item, tar.path)
                continue
            if isinstance(item, Ignored):
                session.ignore(item.name, item.reason)
                continue
            if isinstance(item, Failed):
                if not isinstance(item.error, BadInputError):
                    raise item.error
                session.bad(item.error)
            else:
                data: dict[str, bytes] = {}
                members: list[dict[str, str | None]] = []
                meta: dict[str, Any] = {"wds_key": item.key, "wds_shard": tar.name}
                for ext, payload in item.members:
                    marker = markers.get(tar.path)
                    if ext in mapped.get(tar.path, ()):  # a modality's, as the marker says
                        kept, lifted = False, None
                    else:
                        kept, lifted = lift(ext, payload, meta, marker, declared)
                    if kept:
                        members.append({"ext": ext, "modality": lifted})
                        if lifted is not None:
                            names.lifted.setdefault(ext, lifted)
                        continue
                    modality = names.of(ext)
                    data[modality] = payload
                    members.append({"ext": ext, "modality": modality})
                meta["wds_members"] = members
                session.add(item.key, data, meta)
            session.advance()
        return _WdsState(names.assigned, names.lifted, declared, frozenset(names.reserved),
                         frozenset(seen), names.specs, frozenset(names.met))  # fmt: skip

    def consistent(self, given: _WdsState, truth: _WdsState, after: _WdsState) -> bool:
        """A run's names are what the truth gives when each extension it named anew is
        either named so in the truth, or new there too and named with no name the truth
        took since (a name is the first free candidate: only those can change it); its
        markers decided alike when the markers' state was the same and no column of
        theirs became a modality name since."""
        if given == truth:
            return True
        since = set(truth.assigned.values()) - set(given.assigned.values())
        if (given.declared, given.reserved, given.specs) != (
            truth.declared, truth.reserved, truth.specs,
        ):  # fmt: skip
            return False
        if not after.marker_columns.isdisjoint(since):
            return False
        for ext, name in after.assigned.items():
            if ext in given.assigned:
                continue
            if ext in truth.assigned and truth.assigned[ext] != name:
                return False
            if ext not in truth.assigned and name in since:
                return False
        return True

    def merge(self, given: _WdsState, truth: _WdsState, after: _WdsState) -> _WdsState:
        return _WdsState(
            {
                **truth.assigned,
                **{e: n for e, n in after.assigned.items() if e not in truth.assigned},
            },
            {**truth.lifted, **{e: c for e, c in after.lifted.items() if e not in truth.lifted}},
            {**truth.declared, **after.declared},
            truth.reserved | after.reserved,
            specs={**truth.specs, **after.specs},
            met=truth.met | after.met,
        )

    def report_columns(self, state: _WdsState) -> dict[str, str]:
        return {**state.lifted, **{e: n for e, n in state.assigned.items() if e in state.met}}


def _accept_marker(
    marker: MarkerInfo,
    path: str,
    session: ImportSession,
    declared: dict[str, pa.DataType],
    names: _Modalities,
) -> bool:
    """Declare the columns a tar's `__ferroload__` member names; False (the tar is read
    as any other: its `.json` stays `json_text`) when they cannot be columns here: a
    name of ours (`wds_*`, `sample_id`, a modality), or a type that conflicts with the
    dataset's or another tar's."""
    for column, dtype in marker.columns.items():
        if (
            column in WDS_COLUMNS
            or column == "sample_id"
            or column in names.assigned.values()
            or column in session.modalities
            or declared.get(column, dtype) != dtype
        ):
            logger.warning(
                "%s: its __ferroload__ member names column %r (%s), which cannot be one "
                "here; its .json members are kept as json_text",
                path,
                column,
                dtype,
            )
            return False
    try:
        for column, dtype in marker.columns.items():
            if column not in declared:
                session.declare_column(column, dtype)
                declared[column] = dtype
    except FerroloadError as exc:
        logger.warning("%s: its __ferroload__ member is not usable here (%s)", path, exc)
        return False
    names.reserve(marker.columns)
    return True


class _Modalities:
    """Extension -> modality, assigned at first sight (input order: deterministic), from
    the names a state already holds."""

    def __init__(self, session: ImportSession, state: _WdsState) -> None:
        self._session = session
        self.assigned: dict[str, str] = dict(state.assigned)
        self.lifted: dict[str, str] = dict(state.lifted)  # extension -> the column it became
        self._ours = {*WDS_COLUMNS, *(col for col, _ in LIFTED.values())}
        self.reserved = set(state.reserved)  # the markers' columns
        self.specs = dict(state.specs)  # modality -> (ext, kind, codec hint), from markers
        self.met = set(state.met)  # extensions of members put into a modality
        self._declared: set[str] = set()  # modalities declared in this session

    def reserve(self, columns: Iterable[str]) -> None:
        """Metadata columns no modality may be named after."""
        self.reserved |= set(columns)

    def adopt(self, marker: MarkerInfo, path: str) -> set[str]:
        """Name the modalities of a tar's `__ferroload__` member as it says (each of its
        member extensions -> its modality); the members so mapped. A modality that
        cannot be one here keeps its members named by their extensions: a name of ours
        or a marker's column, a member extension already another modality's, or a name
        already declared otherwise."""
        mapped: set[str] = set()
        for name, m in marker.modalities.items():
            spec = (m.ext, m.kind, m.codec_hint)
            taken = name in self._ours or name in self.reserved or name == "sample_id"
            other = [e for e in m.members if self.assigned.get(e, name) != name]
            if taken or other or self._spec(name) not in (None, spec):
                logger.warning(
                    "%s: its __ferroload__ member names modality %r, which cannot be one "
                    "here; its members %s are named by their extensions",
                    path,
                    name,
                    ", ".join(m.members),
                )
                continue
            self.specs[name] = spec
            for ext in m.members:
                self.assigned[ext] = name
            mapped.update(m.members)
            self.of(m.members[0], met=False)  # declared now: the marker's order is kept
        return mapped

    def _spec(self, name: str) -> tuple[str, str, str] | None:
        """How modality `name` is (or will be) declared, None if it is not one yet."""
        if name in self.specs:
            return self.specs[name]
        old = next((m for m in self._session.existing_modalities if m.name == name), None)
        if old is not None:
            return old.ext, old.kind, old.codec_hint
        ext = next((e for e, n in self.assigned.items() if n == name), None)
        return None if ext is None else (_format_ext(ext), *kind_of(ext))

    def of(self, ext: str, *, met: bool = True) -> str:
        """The modality of member extension `ext` (`met`: a member of it was read), named
        and declared at first sight."""
        if met:
            self.met.add(ext)
        modality = self.assigned.get(ext)
        if modality is not None and modality in self._declared:
            return modality
        if modality is None:
            taken = self._ours | self.reserved | set(self.assigned.values())
            modality = column_name(ext, taken, prefix="x")
        # an existing dataset (append) already has the modality: reuse it as declared
        fmt_ext, kind, hint = self._spec(modality) or (_format_ext(ext), *kind_of(ext))
        self._session.declare(modality, fmt_ext, kind, hint)
        self._declared.add(modality)
        self.assigned[ext] = modality
        return modality


def _format_ext(ext: str) -> str:
    """The format extension of a modality named after member extension `ext`: its last
    part (`seg.png` -> `png`), as the format spells extensions."""
    return re.sub(r"[^A-Za-z0-9_]", "_", ext.rsplit(".", 1)[-1].lower())[:16] or "bin"
