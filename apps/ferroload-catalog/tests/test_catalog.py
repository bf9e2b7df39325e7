from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from ferroload_catalog import (
    Catalog,
    CatalogEntryExistsError,
    CatalogEntryNotFoundError,
    CatalogError,
    CatalogFileError,
    CatalogLockedError,
    CatalogSecretError,
    InvalidCatalogNameError,
    default_catalog_path,
    resolve_options,
    storable_options,
    validate_name,
)
from ferroload_core import FerroloadError
from ferroload_format import Dataset, DatasetNotFoundError, Writer
from ferroload_store import StorageOptionsError
from ferroload_testing import MotoServer

MakeDataset = Callable[..., str]


def test_add_reads_version_and_sizes(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset("a", samples=4)
    entry = catalog.add("a", uri, description="first", tags=["img", "train", "img"])
    ds = Dataset.open(uri)
    expected = ds.manifest.size_bytes  # the one count: `ferroload info` reports it too
    assert expected > sum(s.size for s in ds.manifest.shards) + sum(
        p.size for p in ds.manifest.index_parts
    )  # the manifest file counts
    assert entry.name == "a"
    assert entry.uri == ds.uri
    assert entry.version == 1
    assert entry.num_samples == 4
    assert entry.size_bytes == expected > 0
    assert entry.tags == ("img", "train")
    assert entry.description == "first"
    assert entry.created_at.tzinfo is UTC
    assert entry.created_at == entry.updated_at
    assert entry.catalog_uri == "catalog:a"
    assert catalog.get("a") == entry
    assert catalog.path.is_file()


def test_add_existing_needs_replace(catalog: Catalog, make_dataset: MakeDataset) -> None:
    first = catalog.add("a", make_dataset("a"))
    with pytest.raises(CatalogEntryExistsError, match="replace=True") as info:
        catalog.add("a", make_dataset("b"))
    assert isinstance(info.value, FileExistsError)
    assert isinstance(info.value, FerroloadError)
    second = catalog.add("a", make_dataset("c", samples=7), replace=True)
    assert second.num_samples == 7
    assert second.uri != first.uri
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    assert [e.name for e in catalog.list()] == ["a"]


def test_add_missing_dataset(catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError):
        catalog.add("nothing", str(tmp_path / "nowhere"))
    assert catalog.list() == []


@pytest.mark.parametrize(
    "bad", ["", "Upper", "has space", "-lead", ".hidden", "slash/x", "colon:x", "x" * 129]
)
def test_invalid_names(catalog: Catalog, make_dataset: MakeDataset, bad: str) -> None:
    with pytest.raises(InvalidCatalogNameError, match="invalid catalog name") as info:
        catalog.add(bad, make_dataset())
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, CatalogError)


def test_valid_names() -> None:
    for good in ("a", "0", "imagenet-1k", "laion_400m.v2", "x" * 128):
        assert validate_name(good) == good


def test_invalid_tag(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset()
    with pytest.raises(InvalidCatalogNameError, match="invalid tag 'Bad Tag'"):
        catalog.add("a", uri, tags=["Bad Tag"])
    catalog.add("a", uri)
    with pytest.raises(InvalidCatalogNameError):
        catalog.tag("a", "no!")


def test_get_missing_suggests_close_names(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset()
    for name in ("imagenet", "imagewoof", "librispeech"):
        catalog.add(name, uri)
    with pytest.raises(CatalogEntryNotFoundError) as info:
        catalog.get("imagnet")
    err = info.value
    assert isinstance(err, KeyError)
    assert isinstance(err, FerroloadError)
    assert err.name == "imagnet"
    assert err.suggestions[0] == "imagenet"
    assert "librispeech" not in err.suggestions
    assert "'imagnet'" in str(err)
    assert "did you mean 'imagenet'" in str(err)
    with pytest.raises(KeyError):
        catalog.get("zzz")
    assert "imagenet" in catalog
    assert "imagnet" not in catalog


def test_list_and_tags(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset()
    catalog.add("b", uri, tags=["vision"])
    catalog.add("a", uri)
    catalog.add("c", uri, tags=["audio"])
    assert [e.name for e in catalog.list()] == ["a", "b", "c"]
    assert [e.name for e in catalog.list(tag="vision")] == ["b"]
    entry = catalog.tag("a", "vision", "small")
    assert entry.tags == ("small", "vision")
    assert [e.name for e in catalog.list(tag="vision")] == ["a", "b"]
    entry = catalog.tag("a", "vision", "absent", remove=True)
    assert entry.tags == ("small",)
    assert catalog.list(tag="nope") == []
    with pytest.raises(CatalogEntryNotFoundError):
        catalog.tag("zzz", "x")


def test_remove(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset()
    catalog.add("a", uri)
    catalog.remove("a")
    assert catalog.list() == []
    assert Dataset.open(uri).num_samples == 3  # the dataset stays
    with pytest.raises(CatalogEntryNotFoundError):
        catalog.remove("a")


def test_refresh_reads_the_latest_version(catalog: Catalog, make_dataset: MakeDataset) -> None:
    uri = make_dataset(samples=2)
    before = catalog.add("a", uri)
    with Writer(uri, "demo") as w:  # a second commit appends
        w.declare("image", "jpg", "tensor", "image")
        w.add("s9999", {"image": b"more"}, {"label": 9})
    assert catalog.get("a").version == 1  # stored, not live
    after = catalog.refresh("a")
    assert after.version == 2
    assert after.num_samples == Dataset.open(uri).num_samples
    assert after.size_bytes > before.size_bytes
    assert after.created_at == before.created_at
    assert catalog.get("a") == after
    with pytest.raises(CatalogEntryNotFoundError):
        catalog.refresh("zzz")


def test_resolve_and_open_dataset(
    catalog: Catalog, make_dataset: MakeDataset, tmp_path: Path
) -> None:
    uri = make_dataset()
    entry = catalog.add("a", uri)
    assert catalog.resolve("catalog:a") == entry.uri
    assert catalog.resolve("s3://bucket/x") == "s3://bucket/x"
    assert catalog.resolve(uri) == uri
    with pytest.raises(CatalogEntryNotFoundError):
        catalog.resolve("catalog:b")
    assert len(catalog.open_dataset("catalog:a")) == 3
    assert len(catalog.open_dataset("a")) == 3
    assert len(catalog.open_dataset(uri)) == 3
    assert len(catalog.open_dataset(Path(uri), version=1)) == 3
    # adding through another entry resolves it
    assert catalog.add("b", "catalog:a").uri == entry.uri


def test_env_var_and_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "env" / "cat.duckdb"
    monkeypatch.setenv("FERROLOAD_CATALOG", str(target))
    assert default_catalog_path() == target
    assert Catalog().path == target
    assert Catalog().list() == []
    assert target.is_file()
    assert Catalog(tmp_path / "explicit.duckdb").path == tmp_path / "explicit.duckdb"
    monkeypatch.delenv("FERROLOAD_CATALOG")
    default = default_catalog_path()
    assert default.name == "catalog.duckdb"
    assert "ferroload" in default.parts


def test_the_catalog_connection_draws_no_progress_bar(catalog: Catalog) -> None:
    """DuckDB draws a progress bar on standard output past 2 s when it takes the session
    for an interactive one (`python -c`, a REPL: its default is on there, off under
    pytest); no connection a library opens may write there."""
    catalog.list()  # the file made
    code = (
        "import sys\n"
        "from ferroload_catalog import Catalog\n"
        "with Catalog(sys.argv[1])._connect() as con:\n"
        "    print(con.execute(\"SELECT current_setting('enable_progress_bar')\").fetchone()[0])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(catalog.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]


def test_not_a_catalog_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"this is not a duckdb file" * 100)
    with pytest.raises(CatalogFileError) as info:
        Catalog(bad).list()
    assert isinstance(info.value, OSError)
    # a catalog whose lock file cannot be made (here: a folder stands in its place)
    (tmp_path / "dir.duckdb.lock").mkdir()
    with pytest.raises(CatalogFileError, match="lock file"):
        Catalog(tmp_path / "dir.duckdb").list()
    # a symlink planted in its place is not followed: no file appears where it points
    (tmp_path / "link.duckdb.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CatalogFileError, match=r"lock file.*symbolic link"):
        Catalog(tmp_path / "link.duckdb").list()
    assert not (tmp_path / "elsewhere").exists()
    os.mkfifo(tmp_path / "pipe.duckdb")  # the catalog itself: DuckDB would wait for ever
    with pytest.raises(CatalogFileError, match=r"pipe\.duckdb.*not a regular file"):
        Catalog(tmp_path / "pipe.duckdb").list()
    os.mkfifo(tmp_path / "fifo.duckdb.lock")  # would block an open for reading
    with pytest.raises(CatalogFileError, match=r"lock file.*not a regular file"):
        Catalog(tmp_path / "fifo.duckdb").list()


@pytest.mark.timeout(60)
def test_files_duckdb_writes_beside_the_catalog_must_be_ours(
    tmp_path: Path, make_dataset: MakeDataset
) -> None:
    """DuckDB writes `<catalog>.wal` (and spills into `<catalog>.tmp/`) beside the file:
    a symlink planted there made `add` overwrite its target with the WAL, a FIFO would
    block; each is a CatalogFileError naming it, and the target stays unchanged."""
    uri = make_dataset()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    for name in ("link", "fifo", "new"):  # an existing catalog (DuckDB then writes a WAL)
        assert Catalog(tmp_path / f"{name}.duckdb").list() == []
    (tmp_path / "link.duckdb.wal").symlink_to(outside)
    with pytest.raises(CatalogFileError, match=r"link\.duckdb\.wal.*symbolic link"):
        Catalog(tmp_path / "link.duckdb").add("a", uri)
    assert outside.read_bytes() == b"precious"
    assert (tmp_path / "link.duckdb.wal").is_symlink()
    (tmp_path / "new.duckdb.wal").symlink_to(tmp_path / "made-elsewhere")  # dangling
    with pytest.raises(CatalogFileError, match=r"new\.duckdb\.wal.*symbolic link"):
        Catalog(tmp_path / "new.duckdb").add("a", uri)
    assert not (tmp_path / "made-elsewhere").exists()
    os.mkfifo(tmp_path / "fifo.duckdb.wal")
    with pytest.raises(CatalogFileError, match=r"fifo\.duckdb\.wal.*not a regular file"):
        Catalog(tmp_path / "fifo.duckdb").add("a", uri)
    (tmp_path / "tmpdir.duckdb.tmp").symlink_to(tmp_path)
    with pytest.raises(CatalogFileError, match=r"tmpdir\.duckdb\.tmp.*symbolic link"):
        Catalog(tmp_path / "tmpdir.duckdb").list()
    (tmp_path / "file.duckdb.tmp").write_bytes(b"")
    with pytest.raises(CatalogFileError, match=r"file\.duckdb\.tmp.*not a directory"):
        Catalog(tmp_path / "file.duckdb").list()
    # a WAL DuckDB left itself (a regular file) is replayed as before
    catalog = Catalog(tmp_path / "ok.duckdb")
    catalog.add("a", uri)
    (tmp_path / "ok.duckdb.tmp").mkdir()
    assert [e.name for e in catalog.list()] == ["a"]


_HOLD_LOCK = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def test_lock_timeout_then_retry_succeeds(tmp_path: Path, make_dataset: MakeDataset) -> None:
    path = tmp_path / "locked.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path), "1.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(CatalogLockedError, match="locked by another process") as info:
            Catalog(path, lock_timeout=0.2).list()
        assert isinstance(info.value, TimeoutError)
        # a longer timeout waits the holder out
        assert Catalog(path, lock_timeout=20).add("a", make_dataset()).name == "a"
    finally:
        holder.wait(timeout=30)


def test_one_operation_at_a_time_holds_the_catalog(
    tmp_path: Path, make_dataset: MakeDataset
) -> None:
    """Operations take an exclusive lock on `<catalog>.lock` for their whole session
    (DuckDB's own lock on the file let concurrent processes read it half-written): while
    another holds it, an operation waits, then times out."""
    import fcntl

    path = tmp_path / "held.duckdb"
    Catalog(path).add("a", make_dataset())
    with open(tmp_path / "held.duckdb.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CatalogLockedError, match="locked by another process"):
            Catalog(path, lock_timeout=0.2).list()
        fcntl.flock(held, fcntl.LOCK_UN)
        assert [e.name for e in Catalog(path, lock_timeout=0.2).list()] == ["a"]


_ADD_MANY = textwrap.dedent(
    """
    import sys
    from ferroload_catalog import Catalog
    catalog = Catalog(sys.argv[1], lock_timeout=60)
    worker, uri, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
    for i in range(count):
        catalog.add(f"w{worker}-{i}", uri, tags=[f"w{worker}"])
        catalog.list()
    """
)


def test_concurrent_processes_all_land(tmp_path: Path, make_dataset: MakeDataset) -> None:
    path = tmp_path / "shared.duckdb"
    uri = make_dataset()
    workers, per_worker = 4, 5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ADD_MANY, str(path), str(w), uri, str(per_worker)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, errors
    entries = Catalog(path).list()
    assert len(entries) == workers * per_worker
    assert {e.name for e in entries} == {
        f"w{w}-{i}" for w in range(workers) for i in range(per_worker)
    }
    assert len(Catalog(path).list(tag="w2")) == per_worker


def test_dataset_open_resolves_catalog_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferroload_catalog import Catalog

    root = tmp_path / "ds"
    with Writer(root, "cat-open") as w:
        w.add("s0", None, {"label": 1})
    monkeypatch.setenv("FERROLOAD_CATALOG", str(tmp_path / "cat.duckdb"))
    Catalog().add("cat-open", str(root))
    ds = Dataset.open("catalog:cat-open")
    assert len(ds) == 1 and ds.get(0, ["label"]) == {"label": 1}


def test_storage_options_are_stored_without_secrets(
    catalog: Catalog, make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = make_dataset()  # local: the options are kept, and ignored when opening
    monkeypatch.setenv("MY_S3_SECRET", "s3cr3t")
    options = {"region": "eu-west-3", "allow_http": "true", "secret": "env:MY_S3_SECRET"}
    entry = catalog.add("a", uri, storage_options=options)
    assert entry.storage_options == options
    assert catalog.get("a").storage_options == options
    assert catalog.list()[0].storage_options == options
    assert "s3cr3t" not in catalog.path.read_bytes().decode("latin-1")
    assert catalog.locate("catalog:a") == (entry.uri, {**options, "secret": "s3cr3t"})
    assert catalog.locate(uri, storage_options={"x": 1}) == (uri, {"x": 1})
    # another entry made from this one inherits its options; --replace replaces them
    assert catalog.add("b", "catalog:a").storage_options == options
    assert catalog.add("a", uri, replace=True).storage_options == {}


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"secret_access_key": "abc"}, "secret_access_key"),
        ({"AWS_SESSION_TOKEN": "abc"}, "AWS_SESSION_TOKEN"),
        ({"key": "AKIA"}, "key"),
        ({"client_kwargs": {"endpoint_url": "http://m", "aws_secret_access_key": "x"}},
         "client_kwargs['aws_secret_access_key']"),
    ],
)  # fmt: skip
def test_literal_secrets_are_refused(
    catalog: Catalog, make_dataset: MakeDataset, options: dict[str, Any], key: str
) -> None:
    with pytest.raises(CatalogSecretError) as err:
        storable_options("s3://bucket/ds", options, name="a")
    assert isinstance(err.value, ValueError) and isinstance(err.value, CatalogError)
    assert err.value.key == key
    assert f"storage option {key!r} is a secret" in str(err.value)
    assert "=env:MY_VAR" in str(err.value)
    assert storable_options(
        "az://acct/c/ds", {"account_name": "acct", "account_key": "env:AZ_KEY"}
    ) == {"account_name": "acct", "account_key": "env:AZ_KEY"}
    with pytest.raises(CatalogSecretError, match="does not name an environment variable"):
        storable_options("s3://bucket/ds", {"secret": "env:not a name"})
    with pytest.raises(CatalogSecretError, match="not set"):
        catalog.add("a", make_dataset(), storage_options={"region": "env:UNSET_VAR_FOR_TESTS"})
    assert "a" not in catalog


def test_gc_takes_catalog_uris(
    catalog: Catalog, make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferroload_format import gc

    entry = catalog.add("a", make_dataset())
    monkeypatch.setenv("FERROLOAD_CATALOG", str(catalog.path))
    assert gc("catalog:a", dry_run=True).uri == entry.uri


def test_an_unset_variable_is_named_when_the_entry_opens(
    catalog: Catalog, make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAT_REGION", "r1")
    catalog.add("a", make_dataset(), storage_options={"region": "env:CAT_REGION"})
    monkeypatch.delenv("CAT_REGION")
    with pytest.raises(CatalogSecretError) as err:
        catalog.open_dataset("catalog:a")
    assert str(err.value).startswith(
        "catalog entry 'a' takes storage option 'region' from the environment variable "
        "CAT_REGION, which is not set"
    )
    assert resolve_options({"n": {"v": 1}, "k": [1]}) == {"n": {"v": 1}, "k": [1]}


def test_an_old_catalog_file_gains_the_options_column(
    tmp_path: Path, make_dataset: MakeDataset
) -> None:
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE entries (name VARCHAR PRIMARY KEY, uri VARCHAR NOT NULL, version BIGINT "
        "NOT NULL, tags VARCHAR[] NOT NULL, description VARCHAR NOT NULL, num_samples BIGINT "
        "NOT NULL, size_bytes BIGINT NOT NULL, created_at TIMESTAMP NOT NULL, updated_at "
        "TIMESTAMP NOT NULL)"
    )
    con.execute(
        "INSERT INTO entries VALUES ('old', ?, 1, [], '', 3, 10, now()::TIMESTAMP, "
        "now()::TIMESTAMP)",
        [make_dataset()],
    )
    con.close()
    catalog = Catalog(path)
    assert catalog.get("old").storage_options == {}
    assert len(catalog.open_dataset("catalog:old")) == 3
    assert catalog.add("new", make_dataset("n"), storage_options={"region": "r"}).storage_options


@pytest.mark.s3
def test_catalog_uris_open_with_the_stored_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A custom endpoint is given once, at `add`; secrets come from the environment."""
    monkeypatch.setenv("FERROLOAD_CATALOG", str(tmp_path / "cat.duckdb"))
    for name in ("AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    with MotoServer() as moto:
        moto.create_bucket("cat")
        uri = "s3://cat/ds"
        with Writer(uri, "remote", storage_options=moto.storage_options()) as w:
            w.add("s0", None, {"label": 7})
        monkeypatch.setenv("CAT_KEY_ID", "testing")
        monkeypatch.setenv("CAT_SECRET", "testing")
        fsspec_style = {
            "client_kwargs": {"endpoint_url": moto.endpoint, "region_name": moto.region},
            "key": "env:CAT_KEY_ID",
            "secret": "env:CAT_SECRET",
        }
        with pytest.raises(CatalogSecretError):
            Catalog().add("remote", uri, storage_options={**fsspec_style, "secret": "testing"})
        entry = Catalog().add("remote", uri, storage_options=fsspec_style)
        assert entry.uri == uri and entry.num_samples == 1
        ds = Dataset.open("catalog:remote")  # no storage_options: the stored ones
        assert ds.get(0, ["label"]) == {"label": 7}
        assert Catalog().refresh("remote").size_bytes == ds.manifest.size_bytes
        # options given at open go over the stored ones
        with pytest.raises(StorageOptionsError):
            Dataset.open("catalog:remote", storage_options={"no_such_key": 1})
