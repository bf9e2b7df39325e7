"""What the exporters share: source, destination, chunked reads, safe paths, atomic tars.

The source dataset, the destination folder, reading in chunks, safe relative paths, and
deterministic tar files written atomically.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_convert._errors import OutputExistsError, UnsafeNameError
from ferroload_convert._report import Progress
from ferroload_core import UnsafePathError, check_relative_path, progress_reporter
from ferroload_format import Dataset
from ferroload_format._tar import END_OF_ARCHIVE, member_header, padding

#: Samples read per `get_many` call (reads of one chunk are coalesced per shard).
READ_CHUNK = 256


def open_source(
    src: str | os.PathLike[str] | Dataset,
    where: str | None,
    storage_options: Mapping[str, Any] | None,
) -> Dataset:
    """The dataset to export (`src` opened, or given), filtered by `where`."""
    ds = src if isinstance(src, Dataset) else Dataset.open(src, storage_options=storage_options)
    return ds.subset(where) if where is not None else ds


def prepare_dst(dst: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Check the destination folder: it must not exist, or be an empty folder, or (with
    `overwrite`) a folder that is not a ferroload dataset.

    Raises:
        OutputExistsError: if `dst` is a file, a folder that is not empty (unless
            `overwrite`), or a ferroload dataset (always).
    """
    out = Path(dst)
    if not out.exists() and not out.is_symlink():
        return out
    if out.is_symlink() or not out.is_dir():
        raise OutputExistsError(
            f"{out} is a file or a link, not a folder; exporters write a folder: choose a "
            "new or empty folder",
            path=str(out),
        )
    held = _dataset_below(out) if overwrite else (out if (out / "_ferroload").exists() else None)
    if held is not None:
        raise OutputExistsError(
            f"{out} holds a ferroload dataset ({held}); exporters never replace one (even "
            "with overwrite=True / --overwrite): choose another folder",
            path=str(out),
        )
    if not overwrite and any(out.iterdir()):
        raise OutputExistsError(
            f"{out} is not an empty folder: choose a new or empty folder, or pass "
            "overwrite=True (CLI: --overwrite) to replace its content once the export "
            "is complete",
            path=str(out),
        )
    return out


def _dataset_below(folder: Path) -> Path | None:
    """The first ferroload dataset root at or below `folder` (symlinks not followed)."""
    for root, dirs, _ in os.walk(folder):
        if "_ferroload" in dirs:
            return Path(root)
    return None


class StagedDir:
    """A temporary folder next to the destination `dst` that an export writes into, and
    that `commit()` renames to `dst` once the export is complete; `abort()` removes it,
    so a failed export leaves nothing behind. With `overwrite`, `commit()` first moves an
    existing `dst` aside and deletes it only once the new folder is in place: a failed
    export leaves the old content as it was."""

    def __init__(self, dst: Path, *, overwrite: bool = False) -> None:
        self.dst = dst
        self.overwrite = overwrite
        dst.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(
            tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent)
        )

    def commit(self) -> None:
        """Move the finished folder into place (replacing `dst` if it is an empty folder,
        or any folder with `overwrite`)."""
        old: Path | None = None
        if self.overwrite and self.dst.is_dir() and not self.dst.is_symlink():
            prepare_dst(self.dst, overwrite=True)  # still not a dataset
            old = Path(
                tempfile.mkdtemp(prefix=f".{self.dst.name}.", suffix=".old", dir=self.dst.parent)
            )
            os.replace(self.dst, old / "content")
        try:
            os.replace(self.path, self.dst)
        except OSError as exc:
            if old is not None:
                os.replace(old / "content", self.dst)
                old.rmdir()
            self.abort()
            raise OutputExistsError(
                f"{self.dst} appeared or filled up during the export: choose a new or "
                f"empty folder, or pass overwrite=True (CLI: --overwrite) "
                f"({exc.strerror or exc})",
                path=str(self.dst),
            ) from exc
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Remove everything written."""
        shutil.rmtree(self.path, ignore_errors=True)


def read_chunks(
    ds: Dataset,
    columns: Sequence[str],
    progress: Progress,
    *,
    order: npt.NDArray[np.int64] | None = None,
    desc: str = "export",
) -> Iterator[list[dict[str, Any]]]:
    """Samples of `ds` (positions `order`, default all in order) in chunks, reporting
    samples done through `progress_reporter(progress)`."""
    positions = np.arange(len(ds), dtype=np.int64) if order is None else order
    total = len(positions)
    with progress_reporter(progress, desc=desc, unit="sample", total=total) as report:
        for start in range(0, total, READ_CHUNK):
            part = positions[start : start + READ_CHUNK]
            yield ds.get_many(part, list(columns))
            report(start + len(part), total)
        if total == 0:
            report(0, 0)


def safe_relative(name: str) -> PurePosixPath | None:
    """`name` as a relative path that stays inside a folder, or None if it could escape
    it (`ferroload_core.check_relative_path` refuses it)."""
    try:
        return PurePosixPath(check_relative_path(name, what="exported name"))
    except UnsafePathError:
        return None


def check_member(name: str, *, sample_id: str, uri: str) -> str:
    """`name` if it is a safe tar member name, else `UnsafeNameError` naming the sample."""
    try:
        return check_relative_path(name, what=f"tar member of sample {sample_id!r}")
    except UnsafePathError as exc:
        raise UnsafeNameError(
            f"sample {sample_id!r} of {uri} would be exported as tar member {name!r}: "
            f"{exc.reason}; a member name must be a relative, normalized path without "
            "'..' or control characters (the dataset's wds_key / wds_members or sample "
            "ids are not as import_webdataset wrote them)",
            uri=uri,
            member=name,
            sample_id=sample_id,
        ) from exc


def safe_part(name: str) -> str:
    """`name` as a single path component: separators and control characters become `_`,
    and `.` / `..` / empty become `_`."""
    out = re.sub(r"[\x00-\x1f\x7f/\\]", "_", name)
    return "_" if out in ("", ".", "..") else out


class TarOut:
    """A tar file written member by member with format's tar writer (`member_header`:
    mode 0644, mtime 0, owner 0; PAX only for names over 100 bytes), so its bytes depend
    only on its members, under a temporary name renamed into place by `close()`."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._tmp = path.with_name(f".{path.name}.partial")
        self._out = open(self._tmp, "wb")  # noqa: SIM115
        self.names: set[str] = set()

    def add(self, name: str, data: bytes) -> None:
        """Add a regular file member."""
        self._out.write(member_header(name, len(data)))
        self._out.write(data)
        self._out.write(bytes(padding(len(data))))
        self.names.add(name)

    def close(self) -> None:
        """Finish the archive and move it into place."""
        self._out.write(END_OF_ARCHIVE)
        self._out.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial archive."""
        self._out.close()
        self._tmp.unlink(missing_ok=True)
