"""ferroload-rs 0.1.1's command line under 0.2: its commands run as deprecated aliases of
the 0.2 ones, its catalog file is imported once, and its module `ferroload.cli` runs the
0.2 command (`python -m ferroload_cli`, run for real, as the other CLI tests do)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from ferroload.compat import RemovedIn02Error
from ferroload.compat._catalog import (
    IMPORTED_TAG,
    Rs011CatalogError,
    catalog_name,
    import_rs011_catalog,
    marker_path,
    read_rs011_catalog,
)
from ferroload_catalog import Catalog
from ferroload_format import Dataset, Writer
from ferroload_testing import rs011_dataset


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferroload_cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200", **env},
    )


def ok(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = run(*args, env=env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def said(old: str, new: str) -> str:
    """The line a 0.1.1 command prints on stderr."""
    return (
        f"ferroload {old} is ferroload-rs 0.1.1's command, deprecated (removed in 0.4): "
        f"use `ferroload {new}`"
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Both catalogs in the test's folder; no Hugging Face download."""
    return {
        "FERROLOAD_HOME": str(tmp_path / "rs011-home"),
        "FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def pets(root: Path, n: int = 6) -> Path:
    with Writer(root, "pets") as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(n):
            w.add(f"s{i}", {"image": b"\x89PNG fake"}, {"label": i % 3})
    return root


def write_rs011_catalog(env: dict[str, str], entries: list[dict[str, Any]]) -> Path:
    path = Path(env["FERROLOAD_HOME"]) / "catalog.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"datasets": entries}, indent=2))
    return path


# --------------------------------------------------------------------------- commands


@pytest.mark.slow
def test_inspect_runs_info_and_says_so(tmp_path: Path, env: dict[str, str]) -> None:
    root = str(rs011_dataset("mixed", tmp_path / "mixed"))
    proc = ok("inspect", root, env=env)
    assert proc.stderr.strip() == said("inspect", f"info {root}")
    assert proc.stdout == ok("info", root, env=env).stdout
    assert "ferroload-rs 0.1.1" in proc.stdout and "30" in proc.stdout
    # options of `info` follow 0.1.1's arguments
    proc = ok("inspect", root, "--json", env=env)
    assert json.loads(proc.stdout)["num_samples"] == 30
    assert said("inspect", f"info {root} --json") in proc.stderr


@pytest.mark.slow
def test_aliases_are_hidden_but_answer_help(env: dict[str, str]) -> None:
    listing = ok("--help", env=env).stdout
    for old in ("inspect", "import-hf", "import-files", " list ", " add "):
        assert old not in listing, old
    for old, shown in (
        ("inspect", "ferroload info"),
        ("list", "ferroload catalog ls"),
        ("add", "ferroload catalog add"),
        ("import-hf", "ferroload import hf"),
        ("import-files", "ferroload import hf"),
    ):
        proc = ok(old, "--help", env=env)
        assert f"Usage: ferroload {old}" in proc.stdout and "deprecated" in proc.stdout
        assert shown in proc.stdout and "Examples" in proc.stdout
        assert proc.stderr == ""  # help runs nothing: no message, no catalog import


@pytest.mark.slow
def test_verify_is_the_same_command(tmp_path: Path, env: dict[str, str]) -> None:
    root = str(rs011_dataset("mixed", tmp_path / "mixed"))
    proc = ok("verify", root, env=env)
    assert proc.stdout.startswith("ok: ") and proc.stderr == ""
    assert run("verify", str(tmp_path / "nothing"), env=env).returncode == 1


@pytest.mark.slow
def test_subset_without_out_counts_the_matches(tmp_path: Path, env: dict[str, str]) -> None:
    root = str(pets(tmp_path / "pets"))
    proc = ok("subset", root, "--where", "label = 1", env=env)
    query = "SELECT count(*) AS matched FROM samples WHERE label = 1"
    assert said("subset ROOT --where …", f"sql {root} '{query}'") in proc.stderr
    assert proc.stdout.split()[:3] == ["matched", "───────", "2"]
    proc = ok("subset", root, "--where=label = 1", "--json", env=env)
    assert json.loads(proc.stdout) == [{"matched": 2}]
    assert not (tmp_path / "pets" / "subsets").exists()  # nothing written


@pytest.mark.slow
def test_subset_out_writes_a_new_dataset(tmp_path: Path, env: dict[str, str]) -> None:
    root = str(rs011_dataset("mixed", tmp_path / "mixed"))
    dst = f"{root}/subsets/big"
    proc = ok("subset", root, "--where", "label >= 3", "--out", "big", env=env)
    assert said(
        "subset ROOT --where … --out NAME", f"subset {root} {dst} --where 'label >= 3'"
    ) in (proc.stderr)
    assert "subsets/big.json" in proc.stderr  # what 0.1.1 wrote instead
    big, source = Dataset.open(dst), Dataset.open(root)
    matched = source.subset("label >= 3", return_indices=True).tolist()
    assert len(big) == len(matched) > 0
    assert big.to_table(["sample_id"]).column(0).to_pylist() == [
        source[i]["sample_id"] for i in matched
    ]
    # the same again: 0.2 refuses to write over it unless told to
    again = run("subset", root, "--where", "label >= 3", "--out", "big", env=env)
    assert again.returncode == 1 and "--overwrite" in again.stderr
    ok("subset", root, "--where", "label >= 4", "--out=big", "--overwrite", env=env)
    assert len(Dataset.open(dst)) == len(source.subset("label >= 4", return_indices=True))
    # --out has no place next to 0.2's DST
    proc = run("subset", root, str(tmp_path / "x"), "--where", "label > 1", "--out", "y", env=env)
    assert proc.returncode == 2 and "ferroload subset SRC DST --where CONDITION" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_add_and_list(tmp_path: Path, env: dict[str, str]) -> None:
    root = str(pets(tmp_path / "pets"))
    proc = ok("add", root, env=env)
    assert said("add", f"catalog add pets {root}") in proc.stderr
    proc = ok("add", root, env=env)  # 0.1.1 replaced the entry of a URI added again
    assert said("add", f"catalog add pets {root} --replace") in proc.stderr
    proc = ok("add", root, "--name", "My Pets!", "--json", env=env)  # made a valid name
    assert json.loads(proc.stdout)["name"] == "my-pets"
    other = str(pets(tmp_path / "other"))
    proc = run("add", other, "--name", "pets", env=env)
    assert proc.returncode == 1
    assert "already has an entry 'pets' for another dataset" in proc.stderr
    assert f"ferroload catalog add OTHER-NAME {other}" in proc.stderr
    proc = ok("list", env=env)
    assert said("list", "catalog ls") in proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()[3:5]] == ["my-pets", "pets"]
    listed = json.loads(ok("list", "--json", env=env).stdout)
    assert [e["name"] for e in listed] == ["my-pets", "pets"]


# --------------------------------------------------------------------------- the catalog


def rs011_entries(tmp_path: Path) -> list[dict[str, Any]]:
    mixed = rs011_dataset("mixed", tmp_path / "mixed")
    odd = rs011_dataset("oddkeys", tmp_path / "odd")
    root = pets(tmp_path / "pets")
    return [
        {"uri": str(mixed), "location": "local", "name": "mixed", "rows": 30, "version": 3},
        {
            "uri": str(odd),
            "location": "local",
            "name": "Odd Keys!",
            "last_seen": "2025-01-02T00:00:00Z",
        },
        {"uri": f"file://{root}", "location": "local", "name": "mixed"},  # a name twice
        {"uri": "s3://bucket/remote-ds", "location": "remote", "name": "remote-ds"},
        {"uri": "./relative", "location": "local", "name": "rel"},
        {"uri": str(tmp_path / "gone"), "location": "local", "name": "gone"},
        {"location": "local", "name": "no uri"},
    ]


@pytest.mark.slow
def test_the_rs011_catalog_is_imported_once(tmp_path: Path, env: dict[str, str]) -> None:
    source = write_rs011_catalog(env, rs011_entries(tmp_path))
    before = (source.read_bytes(), source.stat().st_mtime_ns)
    proc = ok("list", env=env)
    head = proc.stderr.splitlines()[0]
    assert head.startswith(f"ferroload: ferroload-rs 0.1.1's catalog {source} (left as it is)")
    assert "3 entries imported" in head
    assert f"catalog:odd-keys (0.1.1's name 'Odd Keys!') -> {tmp_path / 'odd'}" in proc.stderr
    assert f"catalog:mixed-2 (0.1.1's name 'mixed') -> {tmp_path / 'pets'}" in proc.stderr
    assert "s3://bucket/remote-ds: a remote dataset" in proc.stderr
    assert "ferroload catalog add remote-ds s3://bucket/remote-ds" in proc.stderr
    assert "./relative: a relative path" in proc.stderr
    assert f"{tmp_path / 'gone'}: no ferroload dataset" in proc.stderr
    assert proc.stderr.count("ferroload-rs 0.1.1's catalog") == 1
    assert said("list", "catalog ls") in proc.stderr
    assert (source.read_bytes(), source.stat().st_mtime_ns) == before  # never written
    listed = json.loads(ok("catalog", "ls", "--json", env=env).stdout)
    assert [(e["name"], e["num_samples"], e["tags"]) for e in listed] == [
        ("mixed", 30, [IMPORTED_TAG]),
        ("mixed-2", 6, [IMPORTED_TAG]),
        ("odd-keys", 7, [IMPORTED_TAG]),
    ]
    assert "where it was named 'Odd Keys!', last registered 2025-01-02" in listed[2]["description"]
    # once: no message, nothing added again, by any command that uses the catalog
    for args in (("list",), ("catalog", "ls"), ("info", "catalog:mixed")):
        assert "0.1.1's catalog" not in ok(*args, env=env).stderr
    assert len(json.loads(ok("catalog", "ls", "--json", env=env).stdout)) == 3
    # an entry removed from the 0.2 catalog stays removed
    ok("catalog", "rm", "mixed-2", env=env)
    assert "0.1.1's catalog" not in ok("list", env=env).stderr
    # a 0.1.1 catalog that changed since (another environment's 0.1.1 added an entry):
    # its new entry alone
    more = pets(tmp_path / "more")
    entries = json.loads(source.read_text())["datasets"]
    write_rs011_catalog(env, [*entries, {"uri": str(more), "location": "local", "name": "more"}])
    proc = ok("catalog", "ls", env=env)
    assert "1 entry imported" in proc.stderr and "catalog:more ->" in proc.stderr
    assert "not imported" not in proc.stderr
    names = [e["name"] for e in json.loads(ok("catalog", "ls", "--json", env=env).stdout)]
    assert names == ["mixed", "more", "odd-keys"]


@pytest.mark.slow
def test_a_catalog_uri_imports_first(tmp_path: Path, env: dict[str, str]) -> None:
    write_rs011_catalog(env, rs011_entries(tmp_path)[:2])
    proc = ok("info", "catalog:odd-keys", "--json", env=env)
    assert json.loads(proc.stdout)["num_samples"] == 7
    assert "2 entries imported" in proc.stderr
    # commands that do not use the catalog leave it alone
    (Path(env["FERROLOAD_CATALOG"]).parent / "unused").mkdir()
    other = {**env, "FERROLOAD_CATALOG": str(tmp_path / "unused" / "catalog.duckdb")}
    ok("info", str(tmp_path / "mixed"), env=other)
    assert not Path(other["FERROLOAD_CATALOG"]).exists()


@pytest.mark.slow
def test_an_unreadable_rs011_catalog_is_said_once(tmp_path: Path, env: dict[str, str]) -> None:
    source = Path(env["FERROLOAD_HOME"]) / "catalog.json"
    source.parent.mkdir()
    source.write_text("{not json")
    proc = ok("catalog", "ls", env=env)
    assert "nothing imported" in proc.stderr and "is not JSON" in proc.stderr
    assert "0.1.1's catalog" not in ok("catalog", "ls", env=env).stderr
    assert source.read_text() == "{not json"


# --------------------------------------------------------------------------- importers


def image_folder(root: Path) -> Path:
    from PIL import Image

    for label, color in (("cat", (200, 0, 0)), ("dog", (0, 200, 0))):
        (root / label).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), color).save(root / label / f"{label}{i}.png")
    return root


@pytest.mark.slow
def test_import_hf_streams_limit_rows_and_registers(tmp_path: Path, env: dict[str, str]) -> None:
    src = str(image_folder(tmp_path / "folder"))  # a local dataset: load_dataset reads it
    out = str(tmp_path / "out")
    proc = ok("import-hf", src, out, "--limit", "4", env=env)
    assert said("import-hf", f"import hf SAVED_FOLDER {out}") in proc.stderr
    assert "its first 4 rows" in proc.stderr and "not re-encoded to PNG" in proc.stderr
    ds = Dataset.open(out)
    assert len(ds) == 4 and [m.name for m in ds.modalities] == ["image"]
    assert set(ds.metadata_columns) == {"label", "label_name"}  # no path kept, as 0.1.1
    assert ds.get(0)["image"][:4] == b"\x89PNG"
    listed = json.loads(ok("catalog", "ls", "--json", env=env).stdout)
    assert [(e["name"], e["uri"], e["num_samples"]) for e in listed] == [("out", out, 4)]
    # again, replacing it: the entry follows
    ok("import-hf", src, out, "--overwrite", "--json", env=env)
    listed = json.loads(ok("catalog", "ls", "--json", env=env).stdout)
    assert [(e["name"], e["version"], e["num_samples"]) for e in listed] == [("out", 2, 6)]
    proc = run("import-hf", src, str(tmp_path / "x"), "--image-col", "nope", env=env)
    assert proc.returncode == 2 and "--image-col 'nope' is not a column" in proc.stderr
    proc = run("import-hf", src, str(tmp_path / "x"), "--limit", "0", env=env)
    assert proc.returncode == 1 and "no dataset written" in proc.stderr


def fake_hub_dataset(hf_home: Path, repo: str, files: dict[str, bytes]) -> None:
    """A dataset repository as huggingface_hub's cache holds it (read with HF_HUB_OFFLINE)."""
    folder = hf_home / "hub" / f"datasets--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    for name, data in files.items():
        path = folder / "snapshots" / ("0" * 40) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@pytest.mark.slow
def test_import_files_reads_the_manifest_and_media(tmp_path: Path, env: dict[str, str]) -> None:
    import io

    from PIL import Image

    pngs = []
    for i in range(3):
        buf = io.BytesIO()
        Image.new("RGB", (4, 4), (60 * i, 0, 0)).save(buf, "PNG")
        pngs.append(buf.getvalue())
    rows = [
        {"video_path": f"media/v{i}.png", "video_id": f"v{i}", "score": i / 2, "tags": ["a", i]}
        for i in range(3)
    ]
    rows.insert(1, {"video_path": "", "video_id": "none"})  # no media: left out, as 0.1.1
    manifest = "".join(json.dumps(r) + "\n" for r in rows).encode()
    files = {"meta.jsonl": manifest, **{f"media/v{i}.png": p for i, p in enumerate(pngs)}}
    fake_hub_dataset(Path(env["HF_HOME"]), "acme/clips", files)
    out = str(tmp_path / "clips")
    args = ("import-files", "acme/clips", out, "--jsonl", "meta.jsonl", "--codec", "image")
    proc = ok(*args, "--modality", "frame", env=env)
    assert said("import-files", f"import hf SAVED_FOLDER {out} --id-column video_id") in (
        proc.stderr
    )
    ds = Dataset.open(out)
    assert [(m.name, m.codec_hint) for m in ds.modalities] == [("frame", "image")]
    assert ds.to_table(["sample_id"]).column(0).to_pylist() == ["v0", "v1", "v2"]
    assert [ds.get(i)["frame"] for i in range(3)] == pngs
    assert ds.get(2)["tags"] == '["a", 2]'  # lists as JSON text, as 0.1.1 stored them
    listed = json.loads(ok("catalog", "ls", "--json", env=env).stdout)
    assert [(e["name"], e["num_samples"]) for e in listed] == [("clips", 3)]
    # the defaults (video) and --limit
    ok(
        "import-files",
        "acme/clips",
        str(tmp_path / "v"),
        "--jsonl",
        "meta.jsonl",
        "--limit",
        "2",
        env=env,
    )
    assert [(m.name, m.codec_hint) for m in Dataset.open(tmp_path / "v").modalities] == [
        ("video", "video")
    ]
    assert len(Dataset.open(tmp_path / "v")) == 1  # the 2nd of the first 2 rows has no file


# --------------------------------------------------------------------------- ferroload.cli


@pytest.mark.slow
def test_the_module_ferroload_cli(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sys.modules.pop("ferroload.cli", None)
    with pytest.warns(FutureWarning, match="the module ferroload.cli"):
        import ferroload.cli as cli
    root = str(pets(tmp_path / "pets"))
    capfd.readouterr()
    with pytest.warns(FutureWarning, match=r"ferroload\.cli\.main\(argv\)"):
        assert cli.main(["inspect", root, "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["num_samples"] == 6 and said("inspect", f"info {root} --json") in err
    with pytest.warns(FutureWarning), pytest.raises(SystemExit) as exc:
        cli.main(["verify", str(tmp_path / "nothing")])
    assert exc.value.code == 1
    with pytest.warns(FutureWarning, match=r"ferroload\.cli\.cmd_add\(args\)"):
        assert cli.cmd_add(argparse.Namespace(uri=root, name=None)) == 0
    with pytest.warns(FutureWarning, match=r"cmd_subset"):
        assert cli.cmd_subset(argparse.Namespace(root=root, where="label = 0", out="zero")) == 0
    assert len(Dataset.open(f"{root}/subsets/zero")) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert cli.cmd_list(argparse.Namespace()) == 0
        assert cli.cmd_verify(argparse.Namespace(root=root)) == 0
    out, err = capfd.readouterr()
    assert "pets" in out and said("list", "catalog ls") in err
    for name, new in (
        ("CATALOG", "ferroload_catalog.default_catalog_path()"),
        ("catalog_register", "ferroload_catalog.Catalog().add(name, uri)"),
    ):
        with pytest.raises(
            RemovedIn02Error, match=f"use {new.replace('(', '.').replace(')', '.')}"
        ):
            getattr(cli, name)
    with pytest.raises(AttributeError):
        cli.nothing  # noqa: B018


# --------------------------------------------------------------------------- compat._catalog


def test_catalog_names() -> None:
    assert catalog_name("My Data (v2)") == "my-data-v2"
    assert catalog_name("Ünïcode") == "unicode"
    assert catalog_name("-_.x") == "x"
    assert catalog_name("") == catalog_name("///") == "dataset"
    assert catalog_name("a" * 200) == "a" * 128
    assert catalog_name("a" * 200, taken={"a" * 128}) == "a" * 126 + "-2"
    assert catalog_name("x", taken={"x", "x-2"}) == "x-3"


def test_reading_the_rs011_file() -> None:
    data = json.dumps(
        {"datasets": [{"uri": "/d/a/", "location": "local"}, {"uri": 3}, "x", {"name": "b"}]}
    ).encode()
    (entry,) = read_rs011_catalog(data)
    assert (entry.uri, entry.name, entry.is_remote, entry.local_path) == (
        "/d/a/",
        "a",
        False,
        "/d/a/",
    )
    (remote,) = read_rs011_catalog(b'{"datasets": [{"uri": "gs://b/x", "name": "x"}]}')
    assert remote.is_remote and remote.local_path is None
    (url,) = read_rs011_catalog(b'{"datasets": [{"uri": "file:///d/my%20x"}]}')
    assert url.local_path == "/d/my x"
    for bad in (b"[]", b'{"datasets": 1}', b"\xff", b"{"):
        with pytest.raises(Rs011CatalogError):
            read_rs011_catalog(bad)


def test_import_with_a_catalog_of_0_2(tmp_path: Path) -> None:
    """`import_rs011_catalog` with the real catalog, in process: once per content."""
    root = pets(tmp_path / "pets")
    source = tmp_path / "catalog.json"
    source.write_text(json.dumps({"datasets": [{"uri": str(root), "name": "Pets"}]}))
    catalog = Catalog(tmp_path / "c.duckdb")
    catalog.add("mine", root)  # already there under another name: left as it is
    assert import_rs011_catalog(catalog, source=source) is None
    assert [e.name for e in catalog.list()] == ["mine"]
    assert marker_path(catalog.path).is_file()
    assert import_rs011_catalog(Catalog(tmp_path / "d.duckdb"), source=source) is not None
    assert import_rs011_catalog(catalog, source=tmp_path / "none.json") is None
    fifo = tmp_path / "fifo.json"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        report = import_rs011_catalog(catalog, source=fifo)  # refused, without blocking
        assert report is not None and "not a regular file" in report.error
