"""Brace patterns, as WebDataset's shard lists write them (the `braceexpand` package).

`train-{0000..0003}.tar`, `{train,val}.tar`, nested and combined, `\\{` for a literal brace.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ferroload_convert._errors import ConvertOptionError

#: The most names one pattern may expand to (a typo like `{0..999999999}` is refused).
MAX_EXPANSION = 1_000_000

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^(.)\.\.(.)(?:\.\.(-?\d+))?$", re.DOTALL)


def has_braces(pattern: str) -> bool:
    """Whether `pattern` holds a brace group that expands (`{a,b}` or `{0..3}`)."""
    return _first_group(pattern) is not None


def expand_braces(pattern: str) -> list[str]:
    """Every name `pattern` stands for, in order, as `braceexpand` (and bash) expand it.

    `{a,b,c}` is each alternative (each may hold groups itself); `{0..3}` an integer
    range, zero-padded to the longer bound when a bound has a leading zero
    (`{008..010}` -> `008`, `009`, `010`); `{a..e}` a character range; a third part is
    the step (`{0..10..5}`); a range may run down (`{3..1}`). Groups combine left to
    right (`{a,b}{1..2}` -> `a1 a2 b1 b2`). A group that is neither (`{}`, `{x}`) stays
    as written; `\\{`, `\\}` and `\\,` are literal characters.

    Raises:
        ConvertOptionError: if the pattern stands for more than `MAX_EXPANSION` names.

    Examples:
        >>> expand_braces("train-{0000..0002}.tar")
        ['train-0000.tar', 'train-0001.tar', 'train-0002.tar']
        >>> expand_braces("{train,val}/{a..b}.tar")
        ['train/a.tar', 'train/b.tar', 'val/a.tar', 'val/b.tar']
    """
    out = _expand(pattern, pattern)
    if len(out) > MAX_EXPANSION:
        raise _too_many(pattern)
    return out


def _too_many(pattern: str) -> ConvertOptionError:
    return ConvertOptionError(
        f"the brace pattern {pattern!r} stands for more than {MAX_EXPANSION:,} names; "
        "check its ranges",
        path=pattern,
    )


def _expand(text: str, pattern: str) -> list[str]:
    group = _first_group(text)
    if group is None:
        return [_unescape(text)]
    start, end, items = group
    prefix = _unescape(text[:start])
    expanded: list[str] = []
    for item in items if isinstance(items, list) else _split(text[start + 1 : end]):
        if isinstance(items, list):
            expanded.append(item)
        else:
            expanded.extend(_expand(item, pattern))
        if len(expanded) > MAX_EXPANSION:
            raise _too_many(pattern)
    rests = _expand(text[end + 1 :], pattern)
    if len(expanded) * len(rests) > MAX_EXPANSION:
        raise _too_many(pattern)
    return [prefix + item + rest for item in expanded for rest in rests]


def _first_group(text: str) -> tuple[int, int, list[str] | None] | None:
    """(start, end, the range's items or None for alternatives) of the first group that
    expands, or None."""
    for i, c, _ in _scan(text):
        if c != "{" or (end := _matching(text, i)) is None:
            continue
        body = text[i + 1 : end]
        items = _range(body)
        if items is not None:
            return i, end, items
        if len(_split(body)) > 1:
            return i, end, None
    return None


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """(index, character, brace depth after it) of `text` from `start`, skipping escaped
    characters (a backslash and the one after it)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        yield i, c, depth
        i += 1


def _matching(text: str, start: int) -> int | None:
    """Where the brace opened at `start` closes, or None."""
    return next((i for i, c, depth in _scan(text, start) if c == "}" and depth == 0), None)


def _split(body: str) -> list[str]:
    """`body` split at its top-level commas."""
    cuts = [i for i, c, depth in _scan(body) if c == "," and depth == 0]
    return [body[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(body)], strict=True)]


def _range(body: str) -> list[str] | None:
    match = _INT_RANGE.match(body)
    if match is not None:
        left, right, incr = match.groups()
        step = abs(int(incr or "1")) or 1
        lo, hi = int(left), int(right)
        if abs(hi - lo) // step >= MAX_EXPANSION:
            raise _too_many(body)
        padded = any(s.lstrip("-").startswith("0") and s.lstrip("-") != "0" for s in (left, right))
        width = max(len(left), len(right)) if padded else 0
        numbers = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [f"{n:0{width}d}" for n in numbers]
    match = _CHAR_RANGE.match(body)
    if match is not None:
        left, right, incr = match.groups()
        step = abs(int(incr or "1")) or 1
        lo, hi = ord(left), ord(right)
        codes = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [chr(c) for c in codes]
    return None


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)
