"""Image folders to a dataset, and back.

The folders are laid out as torchvision's `ImageFolder` reads them:
`root/<class>/<…>/file.ext`.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ferroload_convert._cluster import Executor, SessionOptions, StatelessJob, run_job
from ferroload_convert._errors import BadInputError, ConvertOptionError, InputNotFoundError
from ferroload_convert._export import (
    StagedDir,
    open_source,
    prepare_dst,
    read_chunks,
    safe_part,
    safe_relative,
)
from ferroload_convert._files import (
    DEFAULT_MAX_FILE_BYTES,
    check_max_bytes,
    check_utf8_name,
    inside,
    read_regular,
)
from ferroload_convert._pipeline import Failed, ordered_map
from ferroload_convert._report import (
    DEFAULT_WORKERS,
    ExportReport,
    ImportReport,
    OnError,
    PassedOver,
    Progress,
    SkippedInput,
    check_common,
)
from ferroload_convert._session import ImportSession
from ferroload_convert._sniff import IMAGE_EXTS, check_image, true_ext
from ferroload_format import DEFAULT_SHARD_SIZE, Dataset, WriteMode


def import_image_folder(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    mode: WriteMode = "create",
    executor: Executor | None = None,
    chunk_size: int | None = None,
    splits: bool | None = None,
) -> ImportReport:
    """Import an image folder: one class per subfolder of `src`, images at any depth below.

    A folder split in the Hugging Face way, `src/<split>/<class>/<images>` (every
    subfolder of `src` named as a split: `train`, `val`, `validation`, `test`, …, see
    `SPLIT_NAMES`), is read so by default: the classes are the subfolders of the splits
    (numbered over all splits, so a class has one label everywhere), and a `split`
    column holds each image's split. `splits=False` reads the split folders as classes
    (torchvision's `ImageFolder` on `src`), `splits=True` requires the split layout.

    Every image file (`jpg`, `jpeg`, `jpe`, `jfif`, `png`, `gif`, `webp`, `bmp`, `dib`,
    `tif`, `tiff`, any case) becomes a sample with modality `image` (its bytes as they
    are) and metadata `label` (the index of its class among the sorted class names, as
    torchvision numbers them), `class_name` and `path` (its path relative to `src`, with
    `/`). The sample id is the path without its extension, sanitized (`cat/001.jpg` ->
    `cat~001`). Other files, hidden files and files directly in `src` are left out, each
    named with its reason in the report's `ignored`. The modality's extension is the most
    common one among the files; files with another keep theirs in `path` (the decoders
    read the format from the bytes).

    Each image is checked without decoding (its header parses, it is not cut short);
    `workers` threads read and check while the calling thread writes in sorted path order.

    Reads are bounded: only regular files are read (a FIFO, device or socket with an
    image name is a bad input, never opened), none larger than `max_file_bytes`, and
    symlinks (to files or folders) that lead out of `src` are bad inputs, not followed.

    Args:
        src: the root folder.
        dst: the dataset URI (a new dataset unless `mode` says otherwise).
        name: the dataset name (default: the last part of `dst`).
        workers: threads reading and checking files.
        on_error: a bad image raises `BadInputError` (`"raise"`, nothing is committed),
            or is left out and listed in the report (`"skip"`; `"warn"` also logs it).
        shard_size: target bytes per tar shard.
        progress: `True` draws a bar of files on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, total)` in files, from the calling thread.
        storage_options: backend options of `dst`.
        max_file_bytes: the largest image file read (default 2 GiB); a larger one is a
            bad input.
        mode: what to do with a dataset already at `dst`: `"create"` (the default)
            refuses it with `DatasetExistsError` before reading anything; `"append"` adds
            to it (same modality; an id it already has gets a `#2` suffix);
            `"overwrite"` replaces its content in a new version (history kept, see
            `ferroload_format.Writer`).
        executor: run the import as tasks on a cluster (`ferroload_map.RayExecutor()`),
            each staging `chunk_size` files (default 2,000), with one commit: the same
            dataset as on this machine, sample for sample (docs/convert.md). The
            destination and the files must be reachable from every worker.
        chunk_size: files per task with an `executor`.
        splits: read `src/<split>/<class>/…` (True), `src/<class>/…` (False), or
            decide by the subfolders' names (None, the default).

    Returns:
        What was imported, skipped and ignored.

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `dst`.
        InputNotFoundError: if `src` is not a folder, or holds no class folder with images
            (with `splits=True`: a subfolder that is not named as a split).
        BadInputError: for an unreadable or damaged image, a file that is not a regular
            file, one over `max_file_bytes`, or a symlink out of `src` (with
            `on_error="raise"`), or a file or class folder whose name is not UTF-8.
        ConvertOptionError: for a bad `on_error`, `workers` or `max_file_bytes`.

    Examples:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> png = (b"\\x89PNG\\r\\n\\x1a\\n" + b"\\x00\\x00\\x00\\x0dIHDR" + bytes(17)
        ...        + b"\\x00\\x00\\x00\\x00IEND" + bytes(4))
        >>> for cls in ("cat", "dog"):
        ...     (root / cls).mkdir()
        ...     _ = (root / cls / "001.png").write_bytes(png)
        >>> report = import_image_folder(root, "memory://docs/image-folder")
        >>> report.num_samples, report.version
        (2, 1)
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/image-folder").get(1, ["label", "class_name", "path"])
        {'label': 1, 'class_name': 'dog', 'path': 'dog/001.png'}
    """
    check_common(on_error, workers)
    check_max_bytes(max_file_bytes)
    root = Path(src)
    if not root.is_dir():
        raise InputNotFoundError(
            f"{root} is not a folder (expected root/<class>/<images>)", path=str(root)
        )
    if splits not in (None, True, False):
        raise ConvertOptionError(
            f"splits must be True, False or None, got {splits!r}", column="splits"
        )
    ignored = PassedOver()
    folders = _subfolders(root, "root/<class>/<images>", ignored)
    split_of = _splits(root, folders, splits, ignored)
    classes = sorted({c for cs in split_of.values() for c in cs}) if split_of else folders
    files: list[tuple[str, str, int]] = []
    for label, cls in enumerate(classes):
        for split in split_of or [None]:
            if split is not None and cls not in split_of[split]:
                continue
            found = _class_files(root, cls if split is None else f"{split}/{cls}", ignored)
            files.extend((path, rel, label) for path, rel in found)
    files.sort(key=lambda f: PurePosixPath(f[1]).parts)
    if not files:
        raise InputNotFoundError(
            f"{root} holds no images in class folders (expected root/<class>/<images> with "
            f"extensions {', '.join(sorted(IMAGE_EXTS))}; found {len(classes)} class folders)",
            path=str(root),
        )
    exts = Counter(_suffix(rel) for _, rel, _ in files)
    ext = min(exts, key=lambda e: (-exts[e], e))
    job = _FolderJob(
        files, classes, str(root), ext, workers, max_file_bytes, ignored, bool(split_of)
    )
    options = SessionOptions(
        os.fspath(dst), name, shard_size, storage_options, on_error, mode,
        "import imagefolder", "file", total=len(files),
    )  # fmt: skip
    return run_job(job, options, progress=progress, executor=executor, chunk_size=chunk_size)


@dataclass(frozen=True)
class _FolderJob(StatelessJob):
    """`import_image_folder` as a job: the image files in sorted path order."""

    units: list[tuple[str, str, int]]
    classes: list[str]
    root: str
    ext: str
    workers: int
    max_bytes: int
    ignored: PassedOver
    splits: bool = False  # src/<split>/<class>/…: a split column
    kind: str = "imagefolder"

    def start(self, session: ImportSession) -> None:
        session.declare("image", self.ext, "tensor", "image")

    def run(
        self, session: ImportSession, units: Sequence[tuple[str, str, int]], state: None
    ) -> None:
        read = functools.partial(_read_checked, root=self.root, max_bytes=self.max_bytes)
        for (_, rel, label), data in ordered_map(units, read, workers=self.workers):
            if isinstance(data, Failed):
                if not isinstance(data.error, BadInputError):
                    raise data.error
                session.bad(data.error)
            else:
                meta = {"label": label, "class_name": self.classes[label], "path": rel}
                if self.splits:
                    meta["split"] = rel.split("/", 1)[0]
                session.add(rel.rsplit(".", 1)[0], {"image": data}, meta)
            session.advance()

    def report_columns(self, state: None) -> dict[str, str]:
        split = {"<split folder>": "split"} if self.splits else {}
        return {"<image file>": "image", **split, "<class folder>": "class_name",
                "<relative path>": "path"}  # fmt: skip


#: Folder names read as splits (any case): `root/<split>/<class>/<images>`, as Hugging
#: Face's `imagefolder` builder reads them.
SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "dev", "test",
                         "testing", "eval", "evaluation"})  # fmt: skip


def _subfolders(folder: Path, layout: str, ignored: PassedOver) -> list[str]:
    """The sorted non-hidden subfolders of `folder`; its files go to `ignored`."""
    folders = []
    with os.scandir(folder) as it:
        for e in it:
            if e.is_dir():
                if not e.name.startswith("."):
                    folders.append(e.name)
            else:
                ignored.add(str(folder / e.name), f"not in a class folder ({layout})")
    return sorted(folders)


def _splits(
    root: Path, folders: list[str], splits: bool | None, ignored: PassedOver
) -> dict[str, list[str]]:
    """Split folder -> its class folders, when `root` is read as split (else empty)."""
    named = bool(folders) and all(f.lower() in SPLIT_NAMES for f in folders)
    if splits is False or (splits is None and not named):
        return {}
    if not named:
        other = [f for f in folders if f.lower() not in SPLIT_NAMES] or ["none"]
        raise InputNotFoundError(
            f"splits=True reads {root}/<split>/<class>/<images>, but {other[0]!r} is not "
            f"named as a split ({', '.join(sorted(SPLIT_NAMES))})",
            path=str(root),
        )
    loose = PassedOver()  # files beside the class folders of a split
    found = {f: _subfolders(root / f, "root/<split>/<class>/<images>", loose) for f in folders}
    if splits is None and not all(found.values()):  # a split with no class: not the layout
        return {}
    ignored.extend(loose)
    return found


def _suffix(rel: str) -> str:
    return rel.rsplit(".", 1)[-1].lower()


def _class_files(root: Path, cls: str, ignored: PassedOver) -> list[tuple[str, str]]:
    """(path, path relative to root) of the images under root/cls, sorted; the other
    files go to `ignored`, each with the reason it is not an image.

    A symlinked folder that leads out of `root` is not walked: it is listed with the
    images, and reading it refuses it.
    """
    found: list[tuple[str, str]] = []
    if not inside(str(root / cls), str(root)):
        return [(str(root / cls), cls)]
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root / cls, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a symlink loop
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for d in [d for d in dirnames if not inside(os.path.join(dirpath, d), str(root))]:
            dirnames.remove(d)
            path = os.path.join(dirpath, d)
            found.append((path, Path(os.path.relpath(path, root)).as_posix()))
        for f in filenames:
            path = os.path.join(dirpath, f)
            rel = Path(os.path.relpath(path, root)).as_posix()
            reason = _not_an_image(f)
            if reason is not None:
                ignored.add(path, reason)
            else:
                found.append((path, rel))
    found.sort(key=lambda pr: PurePosixPath(pr[1]).parts)
    return found


def _not_an_image(name: str) -> str | None:
    """Why the file `name` is not imported as an image (None: it is)."""
    if name.startswith("."):
        return "a hidden file"
    if "." not in name:
        return "no extension: not an image file"
    if _suffix(name) not in IMAGE_EXTS:
        return (
            f"not an image format ferroload reads (.{name.rsplit('.', 1)[-1]}; it reads "
            f".{', .'.join(sorted(IMAGE_EXTS))})"
        )
    return None


def _read_checked(item: tuple[str, str, int], *, root: str, max_bytes: int) -> bytes:
    path, rel, _ = item
    check_utf8_name(path, rel)
    data = read_regular(path, max_bytes=max_bytes, root=root)
    problem = check_image(data)
    if problem is not None:
        raise BadInputError(
            f"{path} is not a usable image: {problem}; fix or remove it, or pass "
            "on_error='skip' to leave it out",
            path=path,
        )
    return data


# --------------------------------------------------------------------------- export


def export_image_folder(
    src: str | os.PathLike[str] | Dataset,
    dst: str | os.PathLike[str],
    *,
    modality: str | None = None,
    where: str | None = None,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Export a dataset's images as an image folder: `dst/<class>/<file>`.

    The class folder is the sample's `class_name`, else its `label`, else none (files go
    straight into `dst`); a sample with a `split` has its class folder in a folder of its
    split (`dst/<split>/<class>/<file>`, the layout `import_image_folder` reads splits
    from). The file keeps its original name when the sample has a `path`
    (as `import_image_folder` records it): under its class folder, the rest of that path
    (so an imported folder comes back byte for byte, same relative paths). Otherwise, or
    when that name is taken or unsafe, it is `<sample_id>.<ext>` with the extension of the
    bytes' format. A recorded path that is a file of one sample and a folder of another
    (`cat/x` and `cat/x/y.png`) keeps the first and names the second by its sample id.
    Payload bytes are written as stored, never re-encoded. Files are written into a
    temporary folder next to `dst`, renamed to `dst` only once the export is complete:
    a failed export leaves nothing behind.

    Args:
        src: the dataset: a URI, or an open `Dataset` (a view works too).
        dst: a new or empty local folder.
        modality: the modality to write (default: the dataset's only image modality).
        where: a SQL filter over the index (see `Dataset.subset`), e.g. `"label < 10"`.
        progress: `True` draws a bar of samples on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, total)` in samples.
        storage_options: backend options of `src`.
        overwrite: replace a `dst` folder that is not empty: the export is written next
            to it and swapped in once complete (the old content is deleted only then; a
            failed export leaves it as it was). A folder holding a ferroload dataset is
            never replaced.

    Returns:
        What was written; samples without the modality are listed as skipped.

    Raises:
        OutputExistsError: if `dst` is not empty (and not `overwrite`), or is a dataset.
        ConvertOptionError: if `modality` is not a modality of the dataset, or there is no
            single image modality to choose.

    Examples:
        >>> import tempfile, pathlib
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/export-images", "demo") as w:
        ...     w.declare("image", "jpg", "tensor", "image")
        ...     w.add("s0", {"image": b"\\xff\\xd8\\xff jpeg bytes"}, {"class_name": "cat"})
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "images"
        >>> export_image_folder("memory://docs/export-images", out).num_files
        1
        >>> [p.relative_to(out).as_posix() for p in out.rglob("*.jpg")]
        ['cat/s0.jpg']
    """
    start = time.perf_counter()
    ds = open_source(src, where, storage_options)
    mod = _image_modality(ds, modality)
    out = prepare_dst(dst, overwrite=overwrite)
    meta = [c for c in ("class_name", "label", "path", "split") if c in ds.metadata_columns]
    declared = next(m.ext for m in ds.modalities if m.name == mod)
    targets = _Targets()
    skipped: list[SkippedInput] = []
    num_bytes = 0
    staged = StagedDir(out, overwrite=overwrite)
    try:
        for chunk in read_chunks(
            ds, ["sample_id", mod, *meta], progress, desc="export imagefolder"
        ):
            for sample in chunk:
                data = sample[mod]
                if data is None:
                    skipped.append(SkippedInput(sample["sample_id"], f"has no {mod!r}"))
                    continue
                rel = targets.take(sample, true_ext(declared, data))
                target = staged.path / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as f:
                    f.write(data)
                num_bytes += len(data)
    except BaseException:
        staged.abort()
        raise
    staged.commit()
    written = targets.files
    return ExportReport(
        dst=str(out),
        num_samples=len(written),
        num_files=len(written),
        num_bytes=num_bytes,
        skipped=tuple(skipped),
        seconds=time.perf_counter() - start,
    )


def _image_modality(ds: Dataset, modality: str | None) -> str:
    names = [m.name for m in ds.modalities]
    if modality is not None:
        if modality not in names:
            raise ConvertOptionError(
                f"{ds.uri} has no modality {modality!r}; modalities: {names or 'none'}",
                uri=ds.uri,
                column=modality,
            )
        return modality
    images = [m.name for m in ds.modalities if m.codec_hint == "image"]
    if len(images) != 1:
        raise ConvertOptionError(
            f"{ds.uri} has {len(images) or 'no'} image modalities ({images or names or 'none'}); "
            "pass modality= to choose the one to export",
            uri=ds.uri,
        )
    return images[0]


class _Targets:
    """The files an export writes, relative to `dst`, each checked before it is written:
    a safe relative path, not taken by another file (compared case-insensitively), not
    a folder of another file's path, and no part of it a file already."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self._dirs: set[str] = set()

    def _free(self, rel: str) -> bool:
        key = rel.lower()
        if key in self.files or key in self._dirs:
            return False
        parts = key.split("/")
        return not any("/".join(parts[:i]) in self.files for i in range(1, len(parts)))

    def _claim(self, rel: str) -> str:
        key = rel.lower()
        self.files.add(key)
        parts = key.split("/")
        self._dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return rel

    def take(self, sample: dict[str, Any], ext: str) -> str:
        """The file's path for `sample`: its recorded path when that is safe and free,
        else `[<split>/]<class>/<sample_id>.<ext>` (`~2`, `~3`, … until free)."""
        cls = sample.get("class_name")
        if cls is None and sample.get("label") is not None:
            cls = str(sample["label"])
        split = sample.get("split")
        folders = [safe_part(str(f)) for f in (split or None, cls) if f is not None]
        prefix = "".join(f"{f}/" for f in folders)
        path = sample.get("path")
        original = safe_relative(path) if isinstance(path, str) else None
        if original is not None:
            parts = original.parts
            if folders:  # under the folders: the rest of the path, else just the name
                n = len(folders)
                parts = parts[n:] if len(parts) > n and list(parts[:n]) == folders else parts[-1:]
            rel = prefix + "/".join(parts)
            if self._free(rel):
                return self._claim(rel)
        sid = safe_part(str(sample["sample_id"]))
        rel, n = f"{prefix}{sid}.{ext}", 1
        while not self._free(rel):
            n += 1
            rel = f"{prefix}{sid}~{n}.{ext}"
        return self._claim(rel)
