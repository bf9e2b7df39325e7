"""The input files of an importer: a file, a folder, a glob, or a list of them.

For the WebDataset importer also brace patterns and object-store URLs.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferroload_convert._braces import expand_braces, has_braces
from ferroload_convert._errors import InputNotFoundError
from ferroload_convert._files import inside
from ferroload_convert._report import PassedOver
from ferroload_store import ObjectNotFoundError, Store, open_store, parse_uri

#: What `src` may be for the file-based importers.
Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def input_files(
    src: Source,
    *,
    suffixes: tuple[str, ...],
    what: str,
    ignored: PassedOver | None = None,
) -> list[tuple[str, str, str | None]]:
    """(path, name, root) of every input file, in order; `name` is relative to the folder
    given (or to the common folder of the files given), with `/` separators; `root` is the
    folder it was found in by a search (None for a file named or globbed): a reader must
    not follow a symlink out of it (`open_regular(path, root=root)`).

    A folder is searched recursively for names ending in one of `suffixes` (any case),
    in sorted order; a glob (`*`, `?`, `[`; `**` recurses) is expanded and sorted; a list
    keeps its order. A file given by name is taken whatever its suffix. A symlinked
    folder that leads out of the folder searched is not searched: it is listed as an
    input, which its reader then refuses. The other files a folder search finds (another
    suffix, hidden) are added to `ignored`, each with the reason, when it is given.

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
            files = _walk(path, suffixes, what, ignored)
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


def _left_out(name: str, suffixes: tuple[str, ...], what: str) -> str | None:
    """Why a file a search found is not an input (None: it is one); `suffixes` in
    lowercase."""
    if any(part.startswith(".") for part in name.split("/")):
        return "a hidden file"
    if not name.lower().endswith(suffixes):
        return f"not one of the {what} (names ending in {', '.join(suffixes)})"
    return None


def _walk(root: str, suffixes: tuple[str, ...], what: str, ignored: PassedOver | None) -> list[str]:
    suffixes = tuple(s.lower() for s in suffixes)
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for d in [d for d in dirnames if not inside(os.path.join(dirpath, d), root)]:
            dirnames.remove(d)
            files.append(os.path.join(dirpath, d))
        for f in filenames:
            reason = _left_out(f, suffixes, what)
            if reason is None:
                files.append(os.path.join(dirpath, f))
            elif ignored is not None:
                ignored.add(os.path.join(dirpath, f), reason)
    return sorted(files, key=lambda p: Path(os.path.relpath(p, root)).parts)


@dataclass(frozen=True)
class InputFile:
    """One input file: a local file, or an object of a store.

    Attributes:
        path: the local path, or the object's URL (what messages name).
        name: the name recorded in the dataset: relative to the folder or prefix given
            (or to the common folder of the files given), with `/` separators.
        root: the local folder it was found in by a search (its reader must not follow a
            symlink out of it); None otherwise.
        store: the store holding the object (None for a local file).
        key: the object's key in `store`.
        size: the object's size in bytes (0 for a local file).
    """

    path: str
    name: str
    root: str | None = None
    store: Store | None = None
    key: str = ""
    size: int = 0


def source_files(
    src: Source,
    *,
    suffixes: tuple[str, ...],
    what: str,
    storage_options: Mapping[str, Any] | None = None,
    ignored: PassedOver | None = None,
) -> list[InputFile]:
    """Every input file of `src`, in order, local or in an object store.

    `src` is one entry or a list of them; an entry is a local path (as `input_files`
    takes it: a file, a folder, a glob) or a URL `open_store` takes (`s3://…`,
    `memory://…`, …: an object, a prefix searched for names ending in one of `suffixes`,
    or a glob over one prefix, `*` and `?` not crossing `/`). A string entry that names
    nothing as written may be a brace pattern (`train-{0000..0003}.tar`, `{a,b}.tar`,
    see `expand_braces`) or several entries joined by `::` (WebDataset's spelling): each
    name it expands to is an entry and must match something. What a folder or prefix
    search finds that is not an input goes to `ignored` (as `input_files` says).

    Raises:
        InputNotFoundError: if an entry matches nothing, or nothing is given.
        ConvertOptionError: for a brace pattern that expands too far.
        StoreError: if a store cannot be opened (a bad URL or `storage_options`).
    """
    entries = [src] if isinstance(src, str | os.PathLike) else list(src)
    if not entries:
        raise InputNotFoundError(f"no {what} given (an empty list)")
    names: list[str] = []
    for entry in entries:
        text = os.fspath(entry)
        if not os.path.exists(text) and ("::" in text or has_braces(text)):
            for part in text.split("::"):
                names.extend(expand_braces(part) if has_braces(part) else [part])
        else:
            names.append(text)
    if all(parse_uri(n).kind == "local" for n in names):
        return [
            InputFile(p, rel, root)
            for p, rel, root in input_files(names, ignored=ignored, **_kw(suffixes, what))
        ]
    found: list[tuple[InputFile, str]] = []  # (file without its name, base)
    stores: dict[str, Store] = {}
    for name in names:
        if parse_uri(name).kind == "local":
            for p, rel, root in input_files([name], ignored=ignored, **_kw(suffixes, what)):
                full = os.path.abspath(p)
                found.append((InputFile(full, "", root), full[: len(full) - len(rel) - 1]))
        else:
            found.extend(_remote(name, suffixes, what, storage_options, stores, ignored))
    base = _common([b for _, b in found])
    out: dict[str, InputFile] = {}
    for f, _ in found:
        rel = f.path[len(base) + 1 :] if base else f.path
        if f.store is None:
            rel = rel.replace(os.sep, "/")
        out.setdefault(f.path, InputFile(f.path, rel, f.root, f.store, f.key, f.size))
    return list(out.values())


def _kw(suffixes: tuple[str, ...], what: str) -> dict[str, Any]:
    return {"suffixes": suffixes, "what": what}


def _remote(
    url: str,
    suffixes: tuple[str, ...],
    what: str,
    storage_options: Mapping[str, Any] | None,
    stores: dict[str, Store],
    ignored: PassedOver | None,
) -> list[tuple[InputFile, str]]:
    """(object, base URL) of every object a URL entry names."""

    def store_at(prefix: str) -> Store:
        if prefix not in stores:
            stores[prefix] = open_store(prefix, storage_options=storage_options, cache=None)
        return stores[prefix]

    scheme, sep, rest = url.rstrip("/").partition("://")
    head, _, tail = rest.partition("/")  # bucket (or memory store name), key
    magic = next((i for i, c in enumerate(tail) if c in "*?["), None)
    if magic is not None:  # a glob over one prefix
        folder = tail[: tail.rfind("/", 0, magic) + 1]
        base = f"{scheme}{sep}{head}/{folder}".rstrip("/")
        pattern = tail[len(folder) :].split("/")
        store = store_at(base)
        objects = [
            o
            for o in store.list("")
            if len(parts := o.path.split("/")) == len(pattern)
            and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern, strict=True))
        ]
        if not objects:
            raise InputNotFoundError(f"{url} matches no object (expected {what})", path=url)
        return [
            (InputFile(f"{base}/{o.path}", "", None, store, o.path, o.size), base) for o in objects
        ]
    if tail:  # an object?
        folder, _, key = tail.rpartition("/")
        base = f"{scheme}{sep}{head}/{folder}".rstrip("/")
        store = store_at(base)
        try:
            info = store.head(key)
        except ObjectNotFoundError:
            pass
        else:
            return [(InputFile(f"{base}/{key}", "", None, store, key, info.size), base)]
    base = url.rstrip("/")  # a prefix, searched
    store = store_at(base)
    objects = []
    lowered = tuple(s.lower() for s in suffixes)
    for o in store.list(""):
        reason = _left_out(o.path, lowered, what)
        if reason is None:
            objects.append(o)
        elif ignored is not None:
            ignored.add(f"{base}/{o.path}", reason)
    if not objects:
        raise InputNotFoundError(
            f"no {what} found at {url} (looked for names ending in {', '.join(suffixes)})",
            path=url,
        )
    return [(InputFile(f"{base}/{o.path}", "", None, store, o.path, o.size), base) for o in objects]


def _common(bases: list[str]) -> str:
    """The longest common folder of `bases` (local paths or URLs), "" if none."""
    split = [b.split("/") for b in bases]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return "/".join(common)
