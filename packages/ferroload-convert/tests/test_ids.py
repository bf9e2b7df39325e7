from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ferroload_convert._ids import IdAllocator, column_name, metadata_name, sanitize_id

SAMPLE_ID = re.compile(r"[A-Za-z0-9_+=,@~#-]{1,100}")
MODALITY = re.compile(r"[a-z][a-z0-9_]{0,31}")


@given(st.text(max_size=300))
def test_sanitized_ids_are_valid(name: str) -> None:
    sid = sanitize_id(name)
    assert SAMPLE_ID.fullmatch(sid) and len(sid) <= 50
    assert sanitize_id(name) == sid  # deterministic
    if SAMPLE_ID.fullmatch(name) and len(name) <= 50:
        assert sid == name  # valid names stay as they are


@given(
    st.lists(st.sampled_from(["a", "a#2", "b/c", "b~c", "x" * 60, "x" * 61, "é", "_"]), max_size=40)
)
def test_allocated_ids_are_unique_valid_and_deterministic(names: list[str]) -> None:
    ids = IdAllocator()
    first = [ids.take(n) for n in names]
    again = IdAllocator()
    assert [again.take(n) for n in names] == first
    assert len(set(first)) == len(first)
    assert all(SAMPLE_ID.fullmatch(i) and len(i) <= 50 for i in first)


def test_allocator_respects_ids_taken_before() -> None:
    ids = IdAllocator(["a", "a#2"])
    assert [ids.take("a"), ids.take("a")] == ["a#3", "a#4"]


@given(st.text(max_size=80), st.sets(st.sampled_from(["jpg", "jpg_2", "x", "m0", "seg_png"])))
def test_column_names_are_valid_and_free(name: str, taken: set[str]) -> None:
    col = column_name(name, taken)
    assert MODALITY.fullmatch(col)
    assert col not in taken and col not in ("sample_id", "shard")


def test_metadata_names_yield_to_reserved_and_taken_names() -> None:
    assert metadata_name("shard", set()) == "src_shard"
    assert metadata_name("image", {"image", "src_image"}) == "src_image_2"
    assert metadata_name("_ferroload_x", set()) == "src__ferroload_x"
