from __future__ import annotations

from pathlib import Path

import pytest

from ferroload_store import InvalidURIError, parse_uri


def test_plain_path_is_local_and_absolute(tmp_path: Path) -> None:
    p = parse_uri(tmp_path / "a" / ".." / "b")
    assert p.kind == "local"
    assert p.location == str(tmp_path / "b")
    assert p.uri == (tmp_path / "b").as_uri()


def test_relative_path_resolves_against_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_uri("data/ds").location == str(tmp_path / "data" / "ds")


def test_file_uri() -> None:
    p = parse_uri("file:///tmp/x%20y")
    assert (p.kind, p.location) == ("local", "/tmp/x y")


def test_memory_uri_has_name_and_prefix() -> None:
    p = parse_uri("memory://tests/some/ds/")
    assert (p.kind, p.location, p.prefix, p.uri) == (
        "memory",
        "tests",
        "some/ds/",
        "memory://tests/some/ds",
    )


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/prefix",
        "gs://b/p",
        "az://container/p",
        "abfss://c@acct.dfs.core.windows.net/p",
        "https://example.com/ds",
    ],
)
def test_object_store_uris(uri: str) -> None:
    assert parse_uri(uri).kind == "object"


@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("gcs://bucket/photos", "gs://bucket/photos"),
        ("GCS://bucket/photos/", "gs://bucket/photos"),
        ("s3a://bucket/photos", "s3a://bucket/photos"),
        ("azure://container/photos", "azure://container/photos"),
        ("adl://container/photos", "adl://container/photos"),
    ],
)
def test_fsspec_spellings_open(uri: str, canonical: str) -> None:
    """What fsspec users write opens (obstore's parser knows no `gcs://`)."""
    from ferroload_store import open_store

    assert parse_uri(uri).uri == canonical
    options = {"skip_signature": "true"}
    if canonical.startswith(("azure", "adl")):
        options["account_name"] = "acct"
    store = open_store(uri, storage_options=options)
    assert store.uri == canonical


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("ftp://host/x", "unknown scheme"),
        ("memory://", "store name"),
        ("s3://", "bucket"),
        ("file://otherhost/x", "host"),
        ("a\x00b", "NUL"),
        ("memory://a/../b", "'..' segments"),
        ("memory://a/./b", "'..' segments"),
        ("memory://a/%2e%2e/b", "'..' segments"),
        ("s3://bucket/data/../other", "'..' segments"),
        ("gs://bucket/..", "'..' segments"),
    ],
)
def test_bad_uris_are_refused_clearly(uri: str, reason: str) -> None:
    with pytest.raises(InvalidURIError, match=reason) as info:
        parse_uri(uri)
    assert isinstance(info.value, ValueError)
