"""The input files of an importer: a file, a folder, a glob, or a list of them."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from ferroload_convert._errors import InputNotFoundError
from ferroload_convert._files import inside

#: What `src` may be for the file-based importers.
Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def input_files(
    src: Source, *, suffixes: tuple[str, ...], what: str
) -> list[tuple[str, str, str | None]]:
    """(path, name, root) of every input file, in order; `name` is relative to the folder
    given (or to the common folder of the files given), with `/` separators; `root` is the
    folder it was found in by a search (None for a file named or globbed): a reader must
    not follow a symlink out of it (`open_regular(path, root=root)`).

    A folder is searched recursively for names ending in one of `suffixes` (any case),
    in sorted order; a glob (`*`, `?`, `[`; `**` recurses) is expanded and sorted; a list
    keeps its order. A file given by name is taken whatever its suffix. A symlinked
    folder that leads out of the folder searched is not searched: it is listed as an
    input, which its reader then refuses.

    Raises:
        InputNotFoundError: if an entry matches nothing, or nothing is found at all.
    """
    entries = [src] if isinstance(src, str | os.PathLike) else list(src)
    if not entries:
        raise InputNotFoundError(f"no {what} given (an empty list)")
    found: list[tuple[str, str | None]] = []
    bases: list[str] = []
    for entry in entries:
        path = os.fspath(entry)
        root: str | None = None
        if os.path.isdir(path):
            files = _walk(path, suffixes)
            bases.append(path)
            root = path
        elif os.path.isfile(path):
            files = [path]
            bases.append(os.path.dirname(path) or ".")
        elif glob.has_magic(path):
            files = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
            bases.extend(os.path.dirname(p) or "." for p in files)
        else:
            raise InputNotFoundError(f"{path} does not exist (expected {what})", path=path)
        if not files:
            raise InputNotFoundError(
                f"no {what} found at {path} (looked for names ending in {', '.join(suffixes)})",
                path=path,
            )
        found.extend((f, root) for f in files)
    base = os.path.commonpath([os.path.abspath(b) for b in bases])
    out: dict[str, tuple[str, str | None]] = {}
    for f, root in found:
        out.setdefault(f, (Path(os.path.relpath(os.path.abspath(f), base)).as_posix(), root))
    return [(f, rel, root) for f, (rel, root) in out.items()]


def _walk(root: str, suffixes: tuple[str, ...]) -> list[str]:
    lowered = tuple(s.lower() for s in suffixes)
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for d in [d for d in dirnames if not inside(os.path.join(dirpath, d), root)]:
            dirnames.remove(d)
            files.append(os.path.join(dirpath, d))
        files.extend(
            os.path.join(dirpath, f)
            for f in filenames
            if f.lower().endswith(lowered) and not f.startswith(".")
        )
    return sorted(files, key=lambda p: Path(os.path.relpath(p, root)).parts)
