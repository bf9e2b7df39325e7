from __future__ import annotations

import pytest

from ferroload_core import FerroloadError, UnsafePathError, check_relative_path


@pytest.mark.parametrize(
    "path",
    [
        "shards/a-00000.tar",
        "index/part-0000000001.parquet",
        "layers/x/_staging/i/p.parquet",
        "dir/a:b",
    ],
)
def test_safe_paths_pass_unchanged(path: str) -> None:
    assert check_relative_path(path, what="test") == path


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../secret.txt", ".."),
        ("shards/../../x", ".."),
        ("shards//x", "normalized"),
        ("./x", "normalized"),
        ("shards/", "normalized"),
        ("s3://bucket/x", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("C:/x", "drive"),
        ("shards\\..\\x", "backslash"),
        ("a\x00b", "control"),
        ("a\nb", "control"),
    ],
)
def test_unsafe_paths_are_refused_naming_path_and_origin(path: str, reason: str) -> None:
    with pytest.raises(UnsafePathError, match=reason) as info:
        check_relative_path(path, what="shard path in manifest v1")
    assert isinstance(info.value, FerroloadError)
    assert isinstance(info.value, ValueError)
    assert info.value.path == path
    assert "shard path in manifest v1" in str(info.value)


def test_non_strings_are_refused() -> None:
    with pytest.raises(UnsafePathError, match="not a string"):
        check_relative_path(3, what="x")
