from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from ferroload_format._tar import BLOCK, ShardWriter, ustar_header
from ferroload_store import open_store


def test_header_is_valid_ustar() -> None:
    raw = ustar_header(b"s0001.image.jpg", 1234) + bytes(1234) + bytes(-1234 % 512) + bytes(1024)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        (member,) = tf.getmembers()
    assert member.name == "s0001.image.jpg"
    assert member.size == 1234
    assert member.isfile()
    assert (member.mode, member.uid, member.gid, member.mtime) == (0o644, 0, 0, 0)
    assert member.offset_data == BLOCK


def test_header_rejects_long_names_and_huge_sizes() -> None:
    with pytest.raises(ValueError, match="longer than 100"):
        ustar_header(b"x" * 101, 1)
    with pytest.raises(ValueError, match="8 GiB"):
        ustar_header(b"x", 8**11)


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z0-9]{1,20}\.[a-z]{1,5}", fullmatch=True), st.binary(max_size=2000)
        ),
        min_size=1,
        max_size=20,
        unique_by=lambda t: t[0],
    ),
    st.integers(1, 4096),
)
def test_recorded_offsets_are_exact(members: list[tuple[str, bytes]], buffer_size: int) -> None:
    store = open_store("memory://tar-tests/shards")
    writer = ShardWriter(store.open_writer("x.tar"), "x.tar", buffer_size=buffer_size)
    recorded = [writer.add(name, data) for name, data in members]
    size = writer.close()
    raw = store.get("x.tar")
    assert len(raw) == size
    assert size % BLOCK == 0
    for (_, data), (offset, length, checksum) in zip(members, recorded, strict=True):
        assert raw[offset : offset + length] == data
        assert checksum == xxhash.xxh3_64_intdigest(data)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        found = [(m.name, m.offset_data, m.size) for m in tf.getmembers()]
    assert found == [(n, o, ln) for (n, _), (o, ln, _) in zip(members, recorded, strict=True)]


def test_member_header_carries_long_and_unicode_names_in_pax(tmp_path: Path) -> None:
    # the one tar writer: the exporters' member names can be longer than USTAR's 100 bytes
    from ferroload_format._tar import END_OF_ARCHIVE, member_header, padding

    names = ["a.jpg", "k" * 100, "k" * 101 + ".json", "dir/" + "é" * 80 + ".txt"]
    out = io.BytesIO()
    for i, name in enumerate(names):
        data = bytes([i]) * (700 * i + 3)
        out.write(member_header(name, len(data)) + data + bytes(padding(len(data))))
    out.write(END_OF_ARCHIVE)
    assert len(member_header("k" * 100, 1)) == 512  # fits: no PAX header
    (tmp_path / "t.tar").write_bytes(out.getvalue())
    with tarfile.open(tmp_path / "t.tar") as tf:
        got = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]  # type: ignore[union-attr]
    assert [n for n, _ in got] == names
    assert all(data == bytes([i]) * (700 * i + 3) for i, (_, data) in enumerate(got))
