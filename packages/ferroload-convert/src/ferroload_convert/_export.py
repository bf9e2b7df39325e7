"""What the exporters share: the source dataset, the destination folder, reading in
chunks, safe relative paths, and deterministic tar files written atomically."""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_convert._errors import OutputExistsError
from ferroload_convert._report import Progress
from ferroload_format import Dataset

#: Samples read per `get_many` call (reads of one chunk are coalesced per shard).
READ_CHUNK = 256
_UNSAFE_PART = re.compile(r"[\x00-\x1f\\]")


def open_source(
    src: str | os.PathLike[str] | Dataset,
    where: str | None,
    storage_options: Mapping[str, Any] | None,
) -> Dataset:
    """The dataset to export (`src` opened, or given), filtered by `where`."""
    ds = src if isinstance(src, Dataset) else Dataset.open(src, storage_options=storage_options)
    return ds.subset(where) if where is not None else ds


def prepare_dst(dst: str | os.PathLike[str]) -> Path:
    """Create the destination folder; refuse one that holds anything.

    Raises:
        OutputExistsError: if `dst` is a file, or a folder that is not empty.
    """
    out = Path(dst)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(
            f"{out} is not an empty folder; exporters never overwrite: choose a new or "
            "empty folder",
            path=str(out),
        )
    out.mkdir(parents=True, exist_ok=True)
    return out


def read_chunks(
    ds: Dataset,
    columns: Sequence[str],
    progress: Progress | None,
    *,
    order: npt.NDArray[np.int64] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Samples of `ds` (positions `order`, default all in order) in chunks, with progress."""
    positions = np.arange(len(ds), dtype=np.int64) if order is None else order
    total = len(positions)
    for start in range(0, total, READ_CHUNK):
        part = positions[start : start + READ_CHUNK]
        yield ds.get_many(part, list(columns))
        if progress is not None:
            progress(start + len(part), total)
    if progress is not None and total == 0:
        progress(0, 0)


def safe_relative(name: str) -> PurePosixPath | None:
    """`name` as a relative path that stays inside a folder, or None if it could escape
    it (absolute, `..`, empty parts, control characters, backslashes)."""
    if not name or name.startswith("/") or _UNSAFE_PART.search(name):
        return None
    path = PurePosixPath(name)
    if any(part in ("", ".", "..") for part in path.parts) or ":" in path.parts[0]:
        return None
    return path


def safe_part(name: str) -> str:
    """`name` as a single path component: separators and control characters become `_`,
    and `.` / `..` / empty become `_`."""
    out = re.sub(r"[\x00-\x1f/\\]", "_", name)
    return "_" if out in ("", ".", "..") else out


class TarOut:
    """A tar file written member by member, deterministically (mode 0644, mtime 0, owner
    0, no user names), under a temporary name renamed into place by `close()`."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._tmp = path.with_name(f".{path.name}.partial")
        self._tar = tarfile.open(self._tmp, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.names: set[str] = set()

    def add(self, name: str, data: bytes) -> None:
        """Add a regular file member."""
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        self._tar.addfile(info, io.BytesIO(data))
        self.names.add(name)

    def close(self) -> None:
        """Finish the archive and move it into place."""
        self._tar.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial archive."""
        self._tar.close()
        self._tmp.unlink(missing_ok=True)
