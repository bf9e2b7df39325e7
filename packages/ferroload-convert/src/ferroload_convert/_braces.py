"""Brace patterns, as WebDataset's shard lists write them (the `braceexpand` package).

`train-{0000..0003}.tar`, `{train,val}.tar`, nested and combined, `\\{` for a literal brace.

A pattern is parsed in one pass: one scan pairs every brace with a stack, then one scan
builds a tree of literal text, ranges and alternatives, recursing only into the
alternatives of a group that expands (at most `MAX_NESTING` deep). The names the tree
stands for, and their total length, are counted before any of them is built. Parsing is
linear in the pattern's length, which is bounded too (`MAX_PATTERN_LENGTH`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ferroload_convert._errors import ConvertOptionError

#: The most names one pattern may expand to (a typo like `{0..999999999}` is refused).
MAX_EXPANSION = 1_000_000
#: The most characters all the names of one pattern may hold together.
MAX_EXPANDED_CHARS = 256 * 2**20
#: The longest pattern taken, in characters (a path or URL; Linux's `PATH_MAX` is 4096).
#: Kept under Python's 4,300-digit limit on `int()`, so a range bound always converts.
MAX_PATTERN_LENGTH = 4096
#: How deep groups that expand may sit inside the alternatives of others
#: (`{a,{b,{c,d}}}` is 3 deep).
MAX_NESTING = 64

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^(.)\.\.(.)(?:\.\.(-?\d+))?$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Braces:
    """A pattern with its braces paired: `match[i]` is where the group opened at `i`
    closes, `commas[i]` where its body splits (its top-level commas)."""

    text: str
    match: dict[int, int]
    commas: dict[int, list[int]]


#: A parsed span: literal text, and groups that expand, in order; a group is a tuple of
#: a range's names or a list of its alternatives (each parsed in turn).
_Part = str | tuple[str, ...] | list["_Seq"]
_Seq = list[_Part]


def has_braces(pattern: str) -> bool:
    """Whether `pattern` holds a brace group that expands (`{a,b}` or `{0..3}`).

    Raises:
        ConvertOptionError: for a pattern with a brace that is too long, or nests groups
            too deep, to expand (see `expand_braces`).
    """
    if "{" not in pattern:
        return False
    return any(not isinstance(part, str) for part in _parse_pattern(pattern))


def expand_braces(pattern: str) -> list[str]:
    """Every name `pattern` stands for, in order, as `braceexpand` (and bash) expand it.

    `{a,b,c}` is each alternative (each may hold groups itself); `{0..3}` an integer
    range, zero-padded to the longer bound when a bound has a leading zero
    (`{008..010}` -> `008`, `009`, `010`); `{a..e}` a character range; a third part is
    the step (`{0..10..5}`); a range may run down (`{3..1}`). Groups combine left to
    right (`{a,b}{1..2}` -> `a1 a2 b1 b2`). A group that is neither (`{}`, `{x}`) stays
    as written; `\\{`, `\\}` and `\\,` are literal characters.

    Raises:
        ConvertOptionError: if the pattern stands for more than `MAX_EXPANSION` names or
            `MAX_EXPANDED_CHARS` characters in all, is longer than `MAX_PATTERN_LENGTH`,
            or nests groups that expand more than `MAX_NESTING` deep.

    Examples:
        >>> expand_braces("train-{0000..0002}.tar")
        ['train-0000.tar', 'train-0001.tar', 'train-0002.tar']
        >>> expand_braces("{train,val}/{a..b}.tar")
        ['train/a.tar', 'train/b.tar', 'val/a.tar', 'val/b.tar']
    """
    seq = _parse_pattern(pattern)
    count, chars = _size(seq)
    if count > MAX_EXPANSION:
        raise _too_many(pattern)
    if chars > MAX_EXPANDED_CHARS:
        raise _refused(pattern, f"stands for more than {MAX_EXPANDED_CHARS:,} characters of names")
    return _names(seq)


def _shown(pattern: str) -> str:
    """The pattern for a message: whole when short, else its start and its length."""
    if len(pattern) <= 200:
        return repr(pattern)
    return f"{pattern[:200]!r}… ({len(pattern):,} characters)"


def _refused(pattern: str, why: str) -> ConvertOptionError:
    return ConvertOptionError(f"the brace pattern {_shown(pattern)} {why}", path=pattern)


def _too_many(pattern: str) -> ConvertOptionError:
    return _refused(pattern, f"stands for more than {MAX_EXPANSION:,} names; check its ranges")


def _parse_pattern(pattern: str) -> _Seq:
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise _refused(
            pattern, f"is longer than {MAX_PATTERN_LENGTH:,} characters; split it or list the names"
        )
    braces = _pair(pattern)
    return _parse(braces, 0, len(pattern), 0, pattern)


def _pair(text: str) -> _Braces:
    """Pair every brace of `text` in one scan (a backslash escapes the character after it):
    a `}` closes the innermost open `{`; a `}` with none open, and a `{` never closed, are
    plain characters. Commas are recorded against the innermost open `{`."""
    match: dict[int, int] = {}
    commas: dict[int, list[int]] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
            commas[i] = []
        elif c == "}" and stack:
            match[stack.pop()] = i
        elif c == "," and stack:
            commas[stack[-1]].append(i)
        i += 1
    return _Braces(text, match, commas)


def _parse(braces: _Braces, start: int, stop: int, depth: int, pattern: str) -> _Seq:
    """The tree of `braces.text[start:stop]`, a span whose braces pair within it.

    A `{` that is not the start of a group that expands (a range, or a body with a
    top-level comma) is a plain character, and the scan goes on inside it."""
    text = braces.text
    seq: _Seq = []
    literal: list[str] = []
    i = start
    while i < stop:
        c = text[i]
        if c == "\\" and i + 1 < stop:
            literal.append(text[i + 1])
            i += 2
            continue
        end = braces.match.get(i) if c == "{" else None
        if end is not None:
            group = _group(braces, i, end, depth, pattern)
            if group is not None:
                if literal:
                    seq.append("".join(literal))
                    literal = []
                seq.append(group)
                i = end + 1
                continue
        literal.append(c)
        i += 1
    if literal:
        seq.append("".join(literal))
    return seq


def _group(braces: _Braces, start: int, end: int, depth: int, pattern: str) -> _Part | None:
    """The group `{…}` at `start`..`end` as a range's names or its parsed alternatives,
    or None when it does not expand."""
    items = _range(braces.text[start + 1 : end], pattern)
    if items is not None:
        return items
    cuts = braces.commas[start]
    if not cuts:
        return None
    if depth >= MAX_NESTING:
        raise _refused(pattern, f"nests brace groups more than {MAX_NESTING} deep")
    bounds = zip([start, *cuts], [*cuts, end], strict=True)
    return [_parse(braces, a + 1, b, depth + 1, pattern) for a, b in bounds]


def _range(body: str, pattern: str) -> tuple[str, ...] | None:
    match = _INT_RANGE.match(body)
    if match is not None:
        left, right, incr = match.groups()
        step = abs(int(incr or "1")) or 1
        lo, hi = int(left), int(right)
        if abs(hi - lo) // step >= MAX_EXPANSION:
            raise _too_many(pattern)
        padded = any(s.lstrip("-").startswith("0") and s.lstrip("-") != "0" for s in (left, right))
        width = max(len(left), len(right)) if padded else 0
        numbers = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return tuple(f"{n:0{width}d}" for n in numbers)
    match = _CHAR_RANGE.match(body)
    if match is not None:
        left, right, incr = match.groups()
        step = abs(int(incr or "1")) or 1
        lo, hi = ord(left), ord(right)
        if abs(hi - lo) // step >= MAX_EXPANSION:
            raise _too_many(pattern)
        codes = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return tuple(chr(c) for c in codes)
    return None


def _size(seq: _Seq) -> tuple[int, int]:
    """(how many names, how many characters in all) `seq` stands for, without building
    them; both stop growing once past their bounds."""
    count, chars = 1, 0
    for part in seq:
        if isinstance(part, str):
            n, c = 1, len(part)
        elif isinstance(part, tuple):
            n, c = len(part), sum(len(s) for s in part)
        else:
            n = c = 0
            for alt in part:
                an, ac = _size(alt)
                n, c = n + an, c + ac
        # each name of the first parts is followed by each of this part's, and back
        count, chars = count * n, chars * n + c * count
        count, chars = min(count, MAX_EXPANSION + 1), min(chars, MAX_EXPANDED_CHARS + 1)
    return count, chars


def _names(seq: _Seq) -> list[str]:
    names = [""]
    for part in seq:
        options: Sequence[str]
        if isinstance(part, str):
            options = (part,)
        elif isinstance(part, tuple):
            options = part
        else:
            options = [name for alt in part for name in _names(alt)]
        if len(options) == 1:
            names = [name + options[0] for name in names]
        else:
            names = [name + option for name in names for option in options]
    return names
