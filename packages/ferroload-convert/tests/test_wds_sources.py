"""WebDataset sources: brace patterns, lists, `::`, and tars in object stores."""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _convert_data import image_bytes

from ferroload_convert import (
    BadInputError,
    ConvertOptionError,
    InputNotFoundError,
    export_webdataset,
    import_webdataset,
)
from ferroload_convert._braces import MAX_EXPANSION, expand_braces
from ferroload_format import Dataset
from ferroload_store import open_store
from ferroload_testing import MotoServer


def tar_bytes(members: list[tuple[str, bytes]], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:  # type: ignore[call-overload]
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def shard(i: int) -> list[tuple[str, bytes]]:
    return [(f"s{i}/k{j}.png", image_bytes(i * 10 + j)) for j in range(2)]


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("train-{0000..0003}.tar", [f"train-{i:04d}.tar" for i in range(4)]),
        ("{a,b}-{1..2}", ["a-1", "a-2", "b-1", "b-2"]),
        ("{008..011}", ["008", "009", "010", "011"]),
        ("{-01..1}", ["-01", "000", "001"]),  # braceexpand pads negatives the same way
        ("{3..1}", ["3", "2", "1"]),
        ("{0..10..5}", ["0", "5", "10"]),
        ("{a..c}", ["a", "b", "c"]),
        ("{a,b{c,d}}e", ["ae", "bce", "bde"]),
        ("{x{1,2}}", ["{x1}", "{x2}"]),  # a group that does not expand stays
        ("x{}y{z}", ["x{}y{z}"]),
        (r"a\{1,2\}", ["a{1,2}"]),
        (r"{a\,b,c}", ["a,b", "c"]),
    ],
)
def test_brace_expansion_matches_braceexpand(pattern: str, names: list[str]) -> None:
    assert expand_braces(pattern) == names


def test_brace_expansion_is_bounded() -> None:
    with pytest.raises(ConvertOptionError, match="more than"):
        expand_braces("{0..999999999}")
    with pytest.raises(ConvertOptionError, match="more than"):
        expand_braces("{0..999}{0..999}{0..9}")
    assert len(expand_braces("{0..999}{0..999}")) == MAX_EXPANSION


def test_brace_patterns_lists_and_double_colons_locally(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"train-{i:04d}.tar").write_bytes(tar_bytes(shard(i)))
    import_webdataset(str(src / "train-{0001..0003}.tar"), tmp_path / "a")
    ds = Dataset.open(tmp_path / "a")
    assert ds.column("wds_shard").to_pylist() == [f"train-{i:04d}.tar" for i in (1, 1, 2, 2, 3, 3)]
    assert ds.column("wds_key").to_pylist()[:2] == ["s1/k0", "s1/k1"]
    # a list of patterns and paths; WebDataset's `::` joins
    import_webdataset([str(src / "train-{0000,0002}.tar"), src / "train-0003.tar"], tmp_path / "b")
    assert Dataset.open(tmp_path / "b").column("wds_shard").unique().to_pylist() == [
        "train-0000.tar",
        "train-0002.tar",
        "train-0003.tar",
    ]
    import_webdataset(f"{src}/train-0003.tar::{src}/train-0000.tar", tmp_path / "c")
    assert Dataset.open(tmp_path / "c").column("wds_key").to_pylist()[0] == "s3/k0"
    # a file whose name holds braces is taken as written
    literal = src / "odd-{0..1}.tar"
    literal.write_bytes(tar_bytes(shard(9)))
    assert import_webdataset(str(literal), tmp_path / "d").num_samples == 2
    # each name a pattern stands for must exist
    with pytest.raises(InputNotFoundError, match=r"train-0004\.tar"):
        import_webdataset(str(src / "train-{0003..0004}.tar"), tmp_path / "e")


def test_tars_in_a_memory_store_by_url_pattern_glob_and_prefix(tmp_path: Path) -> None:
    root = f"memory://wds-src-{uuid.uuid4().hex}"
    store = open_store(root)
    for i in range(3):
        store.put(f"data/train-{i:04d}.tar", tar_bytes(shard(i)))
    store.put("data/train-0003.tar.gz", tar_bytes(shard(3), "w:gz"))
    store.put("data/.hidden.tar", b"not read")
    report = import_webdataset(f"{root}/data/train-{{0000..0002}}.tar", tmp_path / "a")
    assert report.num_samples == 6
    ds = Dataset.open(tmp_path / "a")
    assert ds.column("wds_shard").unique().to_pylist() == [f"train-{i:04d}.tar" for i in range(3)]
    assert ds.get(2, ["png"])["png"] == image_bytes(10)
    # a glob; a prefix (searched, hidden names skipped, the compressed tar too)
    import_webdataset(f"{root}/data/train-000[12].tar", tmp_path / "b")
    assert len(Dataset.open(tmp_path / "b")) == 4
    import_webdataset(f"{root}/data", tmp_path / "c")
    assert Dataset.open(tmp_path / "c").column("wds_shard").unique().to_pylist() == [
        "train-0000.tar",
        "train-0001.tar",
        "train-0002.tar",
        "train-0003.tar.gz",
    ]
    # local and remote together: names relative to nothing in common (the full names)
    local = tmp_path / "local.tar"
    local.write_bytes(tar_bytes(shard(5)))
    import_webdataset([f"{root}/data/train-0000.tar", local], tmp_path / "d")
    assert Dataset.open(tmp_path / "d").column("wds_shard").unique().to_pylist() == [
        f"{root}/data/train-0000.tar",
        str(local),
    ]
    with pytest.raises(InputNotFoundError, match="train-0009"):
        import_webdataset(f"{root}/data/train-{{0000,0009}}.tar", tmp_path / "e")
    with pytest.raises(InputNotFoundError, match="matches no object"):
        import_webdataset(f"{root}/data/*.zip", tmp_path / "e")
    with pytest.raises(InputNotFoundError, match="no WebDataset tars found"):
        import_webdataset(f"{root}/nothing", tmp_path / "e")


def test_remote_tars_keep_the_limits(tmp_path: Path) -> None:
    root = f"memory://wds-limits-{uuid.uuid4().hex}"
    store = open_store(root)
    store.put("big.tar", tar_bytes([("a.bin", b"x" * 5000), ("b.bin", b"y")]))
    bomb = tar_bytes([("z.bin", bytes(4 << 20))], "w:gz")
    store.put("bomb.tar.gz", bomb)
    store.put("cut.tar", tar_bytes(shard(1))[:700])
    with pytest.raises(BadInputError, match="max_file_bytes") as err:
        import_webdataset(f"{root}/big.tar", tmp_path / "a", max_file_bytes=1000)
    assert (err.value.path, err.value.member) == (f"{root}/big.tar", "a.bin")
    with pytest.raises(BadInputError, match="max_inflate_ratio") as err:
        import_webdataset(f"{root}/bomb.tar.gz", tmp_path / "a", max_inflate_ratio=1)
    assert err.value.path == f"{root}/bomb.tar.gz"
    with pytest.raises(BadInputError, match="not a readable tar") as err:
        import_webdataset(f"{root}/cut.tar", tmp_path / "a")
    assert err.value.path == f"{root}/cut.tar"
    report = import_webdataset(
        f"{root}/big.tar", tmp_path / "a", on_error="skip", max_file_bytes=1000
    )
    assert report.num_samples == 1


BUCKET = "ferroload-convert-tests"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.mark.s3
def test_tars_on_s3_import_with_storage_options_and_export_back(
    moto: MotoServer, tmp_path: Path
) -> None:
    options = moto.storage_options()
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex}"
    store = open_store(prefix, storage_options=options, cache=None)
    tars = {f"shards/train-{i:04d}.tar": tar_bytes(shard(i)) for i in range(4)}
    for key, data in tars.items():
        store.put(key, data)
    # a brace pattern over S3 URLs, written to a dataset on S3 with the same options
    dst = f"{prefix}/ds"
    report = import_webdataset(
        f"{prefix}/shards/train-{{0000..0003}}.tar", dst, storage_options=options, workers=2
    )
    assert report.num_samples == 8
    ds = Dataset.open(dst, storage_options=options)
    assert ds.column("wds_shard").unique().to_pylist() == [k.split("/")[1] for k in tars]
    export_webdataset(ds, tmp_path / "out")
    assert {p.name: _members(p.read_bytes()) for p in sorted((tmp_path / "out").glob("*.tar"))} == {
        k.split("/")[1]: _members(v) for k, v in tars.items()
    }
    # a list of URLs, to a local dataset
    urls = [f"{prefix}/shards/train-0002.tar", f"{prefix}/shards/train-0000.tar"]
    import_webdataset(urls, tmp_path / "local", storage_options=options)
    assert Dataset.open(tmp_path / "local").column("wds_key").to_pylist()[0] == "s2/k0"
    with pytest.raises(InputNotFoundError):
        import_webdataset(f"{prefix}/shards/none-*.tar", tmp_path / "x", storage_options=options)


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def test_a_remote_tar_that_shrinks_while_read_is_a_bad_input(tmp_path: Path) -> None:
    from ferroload_convert._sources import InputFile
    from ferroload_convert._wds_tar import read_tar as _read_tar

    root = f"memory://wds-shrink-{uuid.uuid4().hex}"
    store = open_store(root)
    data = tar_bytes(shard(0))
    store.put("a.tar", data[:1000])  # listed at its full size, then cut
    item = InputFile(f"{root}/a.tar", "a.tar", None, store, "a.tar", len(data))
    with pytest.raises(BadInputError, match=r"a\.tar") as err:
        list(_read_tar(item, max_bytes=1 << 20, ratio=100))
    assert err.value.path == f"{root}/a.tar"
