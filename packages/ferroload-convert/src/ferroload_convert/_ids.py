"""Valid, unique sample ids and column names from file paths, tar keys and column names.

A sample id obeys `[A-Za-z0-9_+=,@~#-]{1,100}` (docs/format.md §2). Importers derive it
from what names the input (a relative path, a WebDataset key, an id column):

* a path separator (`/`, `\\`) becomes `~`, every other character outside the set
  (dots, spaces, non-ASCII letters) becomes `_`: `cat/img.01.jpg` -> `cat~img_01`;
* a name longer than `MAX_ID_LENGTH` keeps its first characters and ends with `~` and 16
  hex digits of a hash of the whole name;
* a name already taken gets `#2`, `#3`, … in input order, so ids are unique and the
  same for the same input whatever the number of workers.

The original name is always kept as metadata, so nothing depends on the id being
reversible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from ferroload_format._names import SAMPLE_ID_RE, is_reserved

#: Longest id an importer makes: a member `<id>.<modality>.<ext>` must fit USTAR's 100
#: bytes, and a modality name (32) and an extension (16) may take 50 of them.
MAX_ID_LENGTH = 50
_NOT_NAME = re.compile(r"[^a-z0-9_]")


def sanitize_id(name: str, *, max_length: int = MAX_ID_LENGTH) -> str:
    """A valid sample id for `name` (not yet unique; see `IdAllocator`).

    Examples:
        >>> sanitize_id("cat/img.01.jpg")
        'cat~img_01_jpg'
        >>> sanitize_id("été 2024")
        '_t__2024'
        >>> len(sanitize_id("x" * 300))
        50
    """
    out = "".join("~" if c in "/\\" else c if SAMPLE_ID_RE.fullmatch(c) else "_" for c in name)
    if not out:
        out = "_"
    if len(out) > max_length:
        digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8)
        out = f"{out[: max_length - 17]}~{digest.hexdigest()}"
    return out


class IdAllocator:
    """Hands out unique sample ids, deterministically in call order.

    Examples:
        >>> ids = IdAllocator()
        >>> [ids.take("a"), ids.take("a"), ids.take("a#2"), ids.take("a")]
        ['a', 'a#2', 'a#2#2', 'a#3']
    """

    def __init__(self, taken: Iterable[str] = (), *, max_length: int = MAX_ID_LENGTH) -> None:
        self._taken = set(taken)
        self._next: dict[str, int] = {}
        self._max = max_length

    def take(self, name: str) -> str:
        """A unique valid id for `name` (sanitized; `#n` appended when taken)."""
        base = sanitize_id(name, max_length=self._max)
        if base not in self._taken:
            self._taken.add(base)
            return base
        n = self._next.get(base, 1)
        while True:
            n += 1
            suffix = f"#{n}"
            candidate = base[: self._max - len(suffix)] + suffix
            if candidate not in self._taken:
                break
        self._next[base] = n
        self._taken.add(candidate)
        return candidate


def column_name(name: str, taken: Iterable[str] = (), *, prefix: str = "m") -> str:
    """A valid modality name for `name`, not in `taken`.

    Lowercase; characters outside `[a-z0-9_]` become `_`; `prefix` goes in front of a
    name that does not start with a letter; at most 32 characters; `_2`, `_3`, … when
    taken (in any case: SQL cannot tell `Image` from `image`) or reserved.

    Examples:
        >>> column_name("seg.png")
        'seg_png'
        >>> column_name("JPG", {"jpg"})
        'jpg_2'
        >>> column_name("0.png")
        'm0_png'
    """
    base = _NOT_NAME.sub("_", name.lower())
    if not base or not base[0].isalpha() or not base.isascii():
        base = prefix + base
    base = base[:32]
    used = {t.lower() for t in taken}
    if base not in used and not is_reserved(base):
        return base
    n = 1
    while True:
        n += 1
        suffix = f"_{n}"
        candidate = base[: 32 - len(suffix)] + suffix
        if candidate not in used and not is_reserved(candidate):
            return candidate


def metadata_name(name: str, taken: Iterable[str]) -> str:
    """`name` as a metadata column, unless reserved or taken (in any case: SQL cannot
    tell `Image` from `image`): then `src_<name>` (and `_2`, … if that is taken too).

    Examples:
        >>> metadata_name("label", set()), metadata_name("sample_id", set())
        ('label', 'src_sample_id')
        >>> metadata_name("image", {"Image"})
        'src_image'
    """
    used = {t.lower() for t in taken}
    if name and name.lower() not in used and not is_reserved(name):
        return name
    base = f"src_{name}"
    candidate, n = base, 1
    while candidate.lower() in used or is_reserved(candidate):
        n += 1
        candidate = f"{base}_{n}"
    return candidate
