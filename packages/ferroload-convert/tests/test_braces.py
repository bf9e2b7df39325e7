"""Hostile brace patterns: parsing stays linear, nesting and size are bounded, and every
refusal is a `ConvertOptionError` naming the pattern (the ordinary cases are in
test_wds_sources.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from ferroload_convert import ConvertOptionError, _braces
from ferroload_convert._braces import (
    MAX_EXPANDED_CHARS,
    MAX_NESTING,
    MAX_PATTERN_LENGTH,
    expand_braces,
    has_braces,
)
from ferroload_core import FerroloadError


def lines_run(fn: Callable[[str], object], pattern: str) -> int:
    """How many lines of `_braces` run while `fn(pattern)` does: an operation count."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == _braces.__file__ else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn(pattern)
    finally:
        sys.settrace(previous)
    return count


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: "{" * n,  # never closed: each `{` once searched to the end
        lambda n: "{a" * n,
        lambda n: "{" * n + "}" * n,  # nested groups that do not expand
        lambda n: "{x}" * n,
        lambda n: "{1..1}" * n,  # one name each: was a recursion per group
        lambda n: "}" * n + "{" * n,
    ],
)
@pytest.mark.parametrize("fn", [expand_braces, has_braces])
def test_brace_parsing_is_linear_in_the_pattern(
    shape: Callable[[int], str], fn: Callable[[str], object]
) -> None:
    n = 600  # the longest shape, 6 characters a step, stays under MAX_PATTERN_LENGTH
    small, large = lines_run(fn, shape(n // 2)), lines_run(fn, shape(n))
    assert small > 0 and large <= 2.5 * small, (small, large)


def test_deep_nesting_is_a_clear_error() -> None:
    ok = "{a," * MAX_NESTING + "b" + "}" * MAX_NESTING
    assert len(expand_braces(ok)) == MAX_NESTING + 1
    for depth in (MAX_NESTING + 1, 1000):
        pattern = "{a," * depth + "b" + "}" * depth
        with pytest.raises(ConvertOptionError, match=f"nests brace groups more than {MAX_NESTING}"):
            expand_braces(pattern)
    with pytest.raises(ConvertOptionError) as info:
        has_braces("{a," * 1000 + "b" + "}" * 1000)
    assert isinstance(info.value, FerroloadError) and isinstance(info.value, ValueError)
    assert info.value.path is not None and info.value.path.startswith("{a,{a,")
    # groups that do not expand nest as deep as they like: they are plain characters
    assert expand_braces("{" * 1000 + "x" + "}" * 1000) == ["{" * 1000 + "x" + "}" * 1000]


def test_long_patterns_are_refused_naming_the_pattern() -> None:
    for pattern in ("{" * 20_000, "s3://b/" + "x" * MAX_PATTERN_LENGTH + "{0..1}.tar"):
        with pytest.raises(ConvertOptionError, match=r"longer than 4,096 characters") as info:
            expand_braces(pattern)
        assert info.value.path == pattern
        assert f"({len(pattern):,} characters)" in str(info.value)
    # a long name without braces is simply not a pattern
    assert not has_braces("x" * 100_000)


def test_the_names_characters_are_counted_before_they_are_built() -> None:
    pattern = "x" * 4000 + "{0..999}{0..99}"  # 100,000 names of 4,005 characters
    assert MAX_EXPANDED_CHARS < 100_000 * 4005
    with pytest.raises(ConvertOptionError, match="characters of names"):
        expand_braces(pattern)
    # a range refused by its size alone, letters too
    with pytest.raises(ConvertOptionError, match="more than 1,000,000 names"):
        expand_braces("{\x00..\U0010ffff}")
