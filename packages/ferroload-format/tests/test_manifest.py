from __future__ import annotations

import json

import pyarrow as pa
import pytest

from ferroload_format import (
    Dataset,
    ManifestError,
    UnsupportedFormatVersionError,
    Writer,
)
from ferroload_format._manifest import Manifest
from ferroload_format._paths import version_path
from ferroload_store import open_store

from .conftest import WriteFn


def test_manifest_round_trips(uri: str, write: WriteFn) -> None:
    ds = write(uri, 5)
    m = ds.manifest
    again = Manifest.from_bytes(m.to_bytes())
    assert again == m
    assert again.to_json() == m.to_json()
    assert m.metadata == (
        pa.field("label", pa.int64()),
        pa.field("caption", pa.string()),
        pa.field("score", pa.float64()),
    )


def test_whether_payloads_carry_checksums_is_read_in_one_place(uri: str, write: WriteFn) -> None:
    """`Dataset.read`, `verify` and the Ray read task all ask `has_checksums`: the Ray
    task asked `== "xxh3_64"` and would have skipped the checks of another algorithm's
    name, which the others check."""
    import dataclasses

    m = write(uri, 2).manifest
    assert m.has_checksums
    assert dataclasses.replace(m, checksum_algorithm="xxh3_128").has_checksums
    assert not dataclasses.replace(m, checksum_algorithm="none").has_checksums  # 0.1.1


def test_unknown_fields_and_extensions_survive_a_new_commit(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    store = open_store(uri)
    raw = json.loads(store.get(version_path(1)))
    raw["extensions"] = {"acme": {"owner": "vision-team"}}
    raw["future_top_level"] = [1, 2, 3]
    raw["modalities"][0]["future_modality_field"] = "x"
    raw["schema"]["future_schema_field"] = True
    raw["shards"][0]["future_shard_field"] = 7
    store.put(version_path(1), json.dumps(raw).encode())

    write(uri, 3, start=3)  # an append: a read-modify-write of the manifest
    raw2 = json.loads(store.get(version_path(2)))
    assert raw2["version"] == 2
    assert raw2["extensions"] == {"acme": {"owner": "vision-team"}}
    assert raw2["future_top_level"] == [1, 2, 3]
    assert raw2["modalities"][0]["future_modality_field"] == "x"
    assert raw2["schema"]["future_schema_field"] is True
    assert raw2["shards"][0]["future_shard_field"] == 7
    assert len(Dataset.open(uri)) == 6


def test_unknown_major_version_is_refused_clearly(uri: str, write: WriteFn) -> None:
    write(uri, 1)
    store = open_store(uri)
    raw = json.loads(store.get(version_path(1)))
    raw["format_version"] = 3
    store.put(version_path(1), json.dumps(raw).encode())
    with pytest.raises(UnsupportedFormatVersionError, match="format version 3") as info:
        Dataset.open(uri)
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnsupportedFormatVersionError):
        Writer(uri)


def test_newer_minor_version_is_read(uri: str, write: WriteFn) -> None:
    write(uri, 2)
    store = open_store(uri)
    raw = json.loads(store.get(version_path(1)))
    raw["format_minor"] = 7
    store.put(version_path(1), json.dumps(raw).encode())
    assert len(Dataset.open(uri)) == 2


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"format": "other"}',
        b'{"format": "ferroload", "format_version": "1"}',
        b'{"format": "ferroload", "format_version": 1}',
    ],
)
def test_malformed_manifests(uri: str, write: WriteFn, content: bytes) -> None:
    write(uri, 1)
    open_store(uri).put(version_path(1), content)
    with pytest.raises(ManifestError):
        Dataset.open(uri)
