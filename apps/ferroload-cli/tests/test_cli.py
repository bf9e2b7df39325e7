"""The `ferroload` command, run for real: `python -m ferroload_cli` and the console script."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import ferroload_format as ferroload_errors
from ferroload_format import Dataset, LayerWriter, Writer
from ferroload_store import BlockCache

#: The console script the venv installs next to the interpreter, when it does.
SCRIPT = Path(sys.executable).with_name("ferroload")


def run(
    *args: str,
    script: bool = False,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    exe = [str(SCRIPT)] if script else [sys.executable, "-m", "ferroload_cli"]
    return subprocess.run(
        [*exe, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=None if env is None else {**os.environ, **env},
        cwd=cwd,
    )


def ok_json(*args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None) -> Any:
    proc = run(*args, "--json", env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ferroload: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """7 samples (s0003 without an image), labels 0,1,2,…, and one layer `stats`."""
    root = tmp_path_factory.mktemp("cli") / "ds"
    with Writer(root, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(7):
            payloads = {} if i == 3 else {"image": bytes([i]) * (100 + i)}
            w.add(f"s{i:04d}", payloads, {"label": i % 3, "caption": f"cat {i}"})
    lw = LayerWriter(Dataset.open(root), "stats", identity="v1", columns={"double": pa.int64()})
    lw.write_partition(0, np.arange(7), {"double": [2 * i for i in range(7)]}, {})
    lw.commit(1)
    return str(root)


# --------------------------------------------------------------------------- entry points


def test_module_and_console_script_agree(dataset: str) -> None:
    help_ = run("--help")
    assert help_.returncode == 0
    commands = "info schema head get sql subset verify log gc cache import export bench doctor"
    for command in [*commands.split(), "catalog", "demo"]:
        assert command in help_.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("ferroload ")
    if not SCRIPT.exists():
        pytest.skip("the ferroload console script is not installed in this environment")
    proc = run("info", dataset, "--json", script=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ok_json("info", dataset)


# --------------------------------------------------------------------------- reading


def test_import_imagefolder_reads_split_folders_unless_told(tmp_path: Path) -> None:
    for rel in ("train/cat/a.png", "val/cat/b.png"):
        (tmp_path / "src" / rel).parent.mkdir(parents=True)
        (tmp_path / "src" / rel).write_bytes(_png(1))
    human = run("import", "imagefolder", str(tmp_path / "src"), str(tmp_path / "a"))
    assert "read as SRC/<split>/<class>/…, with a split column" in human.stdout
    assert Dataset.open(tmp_path / "a").column("split").to_pylist() == ["train", "val"]
    flat = ok_json("import", "imagefolder", str(tmp_path / "src"), str(tmp_path / "b"),
                   "--no-splits")  # fmt: skip
    assert "<split folder>" not in flat["columns"]
    assert Dataset.open(tmp_path / "b").column("class_name").to_pylist() == ["train", "val"]


def test_a_folder_to_import_is_named_with_its_import_command(tmp_path: Path) -> None:
    """`ferroload info ~/photos` on an image folder said only that it is not a dataset."""
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "cat" / "a.JPG").write_bytes(b"\xff\xd8\xff")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "train-0.tar").write_bytes(b"")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    photos = run("info", str(tmp_path / "photos"))
    assert photos.returncode == 1
    assert photos.stderr.rstrip().endswith(
        f"it looks like an image folder: ferroload import imagefolder {tmp_path / 'photos'} DST"
    )
    assert "ferroload import wds" in run("info", str(tmp_path / "shards")).stderr
    assert "looks like" not in run("info", str(tmp_path / "other")).stderr


def test_info(dataset: str) -> None:
    info = ok_json("info", dataset)
    assert (info["name"], info["version"], info["num_samples"], info["num_shards"]) == (
        "demo", 2, 7, 1,
    )  # fmt: skip
    assert info["uri"] == dataset  # a local dataset: its absolute path, not a file:// URI
    # the one byte count (Manifest.size_bytes), and its parts adding up to it
    assert info["size_bytes"] == Dataset.open(dataset).manifest.size_bytes
    parts = ("shard_bytes", "index_bytes", "layer_bytes", "manifest_bytes")
    assert sum(info[k] for k in parts) == info["size_bytes"]
    assert info["shard_bytes"] > sum(100 + i for i in range(7) if i != 3)
    assert info["layer_bytes"] > 0 and info["manifest_bytes"] > 0
    assert info["layers"][0]["num_rows"] == 7
    assert [m["name"] for m in info["modalities"]] == ["image"]
    assert info["metadata_columns"] == [
        {"name": "label", "type": "int64"},
        {"name": "caption", "type": "string"},
        {"name": "double", "type": "int64"},
    ]
    assert [(x["name"], x["columns"]) for x in info["layers"]] == [("stats", ["double"])]
    human = run("info", dataset)
    assert human.returncode == 0
    for word in ("demo", "samples:", "image", "label", "caption", "stats"):
        assert word in human.stdout
    assert f"size: {_size(info['size_bytes'])} (" in " ".join(human.stdout.split())


def test_quiet_and_verbose_go_anywhere_before_double_dash(dataset: str) -> None:
    """`-q` / `-v` after the command act as before it (the guide writes them there)."""
    before = run("-q", "info", dataset)
    assert before.returncode == 0
    for args in (("info", dataset, "-q"), ("info", "--quiet", dataset)):
        proc = run(*args)
        assert (proc.returncode, proc.stdout) == (0, before.stdout), proc.stderr
    out = Path(dataset).parent / "quiet-verbose"
    verbose = run("subset", dataset, str(out), "--where", "label = 1", "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert "ferroload: INFO: ferroload_format._writer: committed version 1" in verbose.stderr
    # after `--` they are arguments again: here a dataset path that does not exist
    proc = run("info", "--", "-q")
    assert proc.returncode == 1 and "-q" in proc.stderr


def _size(n: int) -> str:
    from ferroload_cli._render import size

    return size(n)


def test_schema(dataset: str) -> None:
    fields = {f["name"]: f for f in ok_json("schema", dataset)}
    assert fields["image"]["role"] == "modality"
    assert fields["label"] == {
        "name": "label",
        "type": "int64",
        "nullable": True,
        "role": "metadata",
    }
    assert fields["double"]["role"] == "metadata"
    assert fields["sample_id"]["role"] == "index"
    human = run("schema", dataset)
    assert human.returncode == 0 and "caption" in human.stdout and "string" in human.stdout


def test_head(dataset: str) -> None:
    rows = ok_json("head", dataset)
    assert len(rows) == 5
    assert rows[0] == {
        "sample_id": "s0000", "image": 100, "label": 0, "caption": "cat 0", "double": 0,
    }  # fmt: skip
    assert rows[3]["image"] is None  # no payload: no size
    assert ok_json("head", dataset, "-n", "2", "--columns", "label,image") == [
        {"label": 0, "image": 100},
        {"label": 1, "image": 101},
    ]
    assert len(ok_json("head", dataset, "-n", "100")) == 7
    human = run("head", dataset, "-n", "3")
    assert human.returncode == 0
    assert "s0002" in human.stdout and "102 B" in human.stdout and "s0003" not in human.stdout


def test_head_unknown_column_is_one_line(dataset: str) -> None:
    line = one_error_line(run("head", dataset, "--columns", "nope"))
    assert "'nope'" in line


def test_get(dataset: str, tmp_path: Path) -> None:
    assert ok_json("get", dataset, "1") == {
        "sample_id": "s0001", "image": 101, "label": 1, "caption": "cat 1", "double": 2,
    }  # fmt: skip
    assert ok_json("get", dataset, "-1", "--column", "caption") == {"caption": "cat 6"}
    human = run("get", dataset, "2")
    assert human.returncode == 0 and "102 B" in human.stdout and "cat 2" in human.stdout
    out = tmp_path / "img.jpg"
    proc = run("get", dataset, "4", "--column", "image", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == bytes([4]) * 104
    raw = subprocess.run(
        [sys.executable, "-m", "ferroload_cli", "get", dataset, "5", "--column", "image",
         "--out", "-"],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert raw.returncode == 0 and raw.stdout == bytes([5]) * 105


def test_get_errors(dataset: str) -> None:
    assert "out of range" in one_error_line(run("get", dataset, "99"))
    assert "has no 'image'" in one_error_line(
        run("get", dataset, "3", "--column", "image", "--out", "x.bin")
    )
    usage = run("get", dataset, "0", "--out", "x.bin")
    assert usage.returncode == 2 and "--out needs --column" in usage.stderr


def test_sql(dataset: str) -> None:
    rows = ok_json(
        "sql", dataset, "SELECT label, count(*) AS n FROM samples GROUP BY label ORDER BY label"
    )
    assert rows == [{"label": 0, "n": 3}, {"label": 1, "n": 2}, {"label": 2, "n": 2}]
    assert ok_json("sql", dataset, "SELECT double FROM samples WHERE label = 2") == [
        {"double": 4},
        {"double": 10},
    ]
    human = run("sql", dataset, "SELECT sample_id FROM samples WHERE caption LIKE '%6'")
    assert human.returncode == 0 and "s0006" in human.stdout and "(1 row)" in human.stdout


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("DROP TABLE samples", "single SELECT"),
        ("SELECT 1; SELECT 2", "single SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", "outside the dataset's index"),
        ("SET lock_configuration = false", "single SELECT"),
        ("SELECT nope FROM samples", "nope"),
        ("SELEC 1", "invalid query"),
        ("SELECT * FROM glob('.tmp/*')", "outside the dataset's index"),
        ("SELECT * FROM duckdb_settings()", "outside the dataset's index"),
        ("SELECT current_setting('temp_directory')", "outside the dataset's index"),
    ],
)
def test_sql_refuses(dataset: str, query: str, words: str) -> None:
    assert words in one_error_line(run("sql", dataset, query))


def test_a_long_query_stops_at_the_timeout(dataset: str, tmp_path: Path) -> None:
    slow = "(SELECT count(*) FROM range(1000000000000) r WHERE r.range % 7 = 3)"
    line = one_error_line(run("sql", dataset, f"SELECT {slow}", "--timeout", "0.5"))
    assert "timeout of 0.5 s" in line
    where = f"label < {slow}"
    out = str(tmp_path / "out")
    line = one_error_line(run("subset", dataset, out, "--where", where, "--timeout", "0.5"))
    assert "timeout of 0.5 s" in line


def test_subset_where_cannot_close_the_wrappers_parenthesis(dataset: str, tmp_path: Path) -> None:
    where = "label = 1) UNION ALL SELECT -1 WHERE (true"
    line = one_error_line(run("subset", dataset, str(tmp_path / "out"), "--where", where))
    assert "single condition" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("sql", "SELECT sample_id FROM samples WHERE lable = 1"),
        ("subset", "OUT", "--where", "lable = 1"),
    ],
    ids=["sql", "subset"],
)
def test_a_typo_in_a_column_lists_the_datasets_columns(
    dataset: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    command, *rest = (str(tmp_path / "out") if a == "OUT" else a for a in args)
    line = one_error_line(run(command, dataset, *rest))
    assert 'Referenced column "lable" not found' in line
    assert "Did you mean 'label'?" in line
    assert "The dataset's columns are sample_id, shard, image, label, caption, double." in line
    assert "_ferroload" not in line
    assert not (tmp_path / "out").exists()


#: An interpreter teardown that aborts, as pyarrow's C++ thread pools now and then do
#: after a command has printed its result (exit -6: apache/arrow#34314).
TEARDOWN_ABORTS = """
import os

class _AbortAtTeardown:
    def __del__(self):
        os.abort()

_abort_at_teardown = _AbortAtTeardown()
"""


@pytest.mark.parametrize("script", [False, True], ids=["module", "script"])
def test_the_command_leaves_with_its_code_whatever_the_teardown_does(
    dataset: str, tmp_path: Path, script: bool
) -> None:
    if script and not SCRIPT.exists():
        pytest.skip("the ferroload console script is not installed in this environment")
    (tmp_path / "sitecustomize.py").write_text(TEARDOWN_ABORTS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    plain = subprocess.run([sys.executable, "-c", "print(1)"], env=env, capture_output=True)
    assert plain.returncode == -signal.SIGABRT  # the simulation works on a plain interpreter
    ok = run("verify", dataset, "--json", env=env, script=script)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True  # the whole output, flushed
    bad = run("info", str(tmp_path / "missing"), env=env, script=script)
    assert bad.returncode == 1 and bad.stderr.startswith("ferroload: error:"), bad.stderr


def test_verify(dataset: str, tmp_path: Path) -> None:
    report = ok_json("verify", dataset)
    assert report["ok"] is True and report["problems"] == [] and report["num_problems"] == 0
    assert (report["uri"], report["name"], report["version"]) == (dataset, "demo", 2)
    assert (report["num_payloads_checked"], report["num_shards_checked"]) == (6, 1)
    assert report["checked_bytes"] > 0 and report["seconds"] == round(report["seconds"], 3)
    human = run("verify", dataset)
    assert human.returncode == 0 and human.stdout.startswith("ok:")
    assert "(1 shard, 6 payloads," in human.stdout  # one shard is not "1 shards"

    root = tmp_path / "damaged"
    with Writer(root, "damaged") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.add("a", {"image": b"A" * 600}, {})
    shard = next((root / "shards").rglob("*.tar"))
    data = bytearray(shard.read_bytes())
    at = data.index(b"A" * 600)
    data[at : at + 4] = b"BBBB"
    shard.write_bytes(bytes(data))
    bad = run("verify", str(root), "--json")
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert report["ok"] is False
    assert [p["kind"] for p in report["problems"]] == ["checksum"]
    human = run("verify", str(root))
    assert human.returncode == 1
    assert "damaged" in human.stdout and "checksum" in human.stdout
    assert ": 1 problem (1 shard, 1 payload," in human.stdout


def test_verify_checks_the_index_schema_and_any_version(tmp_path: Path) -> None:
    """An index part missing a schema column passed `ferroload verify` (rc 0), and only
    the latest version could be checked."""
    import pyarrow.parquet as pq

    from ferroload_format._paths import version_path

    root = tmp_path / "parts"
    for first, count in ((0, 20), (100, 3)):  # version 2 adds a part of its own
        with Writer(root, "parts") as w:
            w.declare("image", "jpg", "tensor", "image")
            for i in range(first, first + count):
                w.add(f"s{i:03d}", {"image": bytes([i]) * 50}, {"label": i})
    ds = Dataset.open(root)
    part = ds.manifest.index_parts[1]
    path = root / part.path
    pq.write_table(pq.read_table(path).drop_columns(["label"]), path)
    mpath = root / version_path(ds.version)
    manifest = json.loads(mpath.read_bytes())
    manifest["index_parts"][1]["size"] = path.stat().st_size
    mpath.write_text(json.dumps(manifest))
    bad = run("verify", str(root), "--json")
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["version"] == 2
    assert [(p["kind"], p["shard"], p["column"]) for p in report["problems"]] == [
        ("index-schema", part.path, "label")
    ]
    human = run("verify", str(root))
    assert human.returncode == 1 and "index-schema" in human.stdout
    old = ok_json("verify", str(root), "--version", "1")
    assert (old["version"], old["ok"], old["num_payloads_checked"]) == (1, True, 20)
    assert run("verify", str(root), "--version", "1").stdout.startswith("ok:")
    missing = one_error_line(run("verify", str(root), "--version", "3"))
    assert "no version 3" in missing
    assert run("verify", str(root), "--version", "0").returncode == 2


def test_log(dataset: str) -> None:
    versions = ok_json("log", dataset)
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[0]["num_samples"] == 7 and versions[0]["operation"] == "create"
    assert [v["num_shards"] for v in versions] == [1, 1]
    # each version's own byte count, the same as info's for that version
    assert [v["size_bytes"] for v in versions] == [
        Dataset.open(dataset, version=k).manifest.size_bytes for k in (1, 2)
    ]
    assert versions[0]["size_bytes"] < versions[1]["size_bytes"]  # version 2 added a layer
    assert versions[1]["size_bytes"] == ok_json("info", dataset)["size_bytes"]
    human = run("log", dataset)
    assert human.returncode == 0 and "create" in human.stdout
    assert _size(versions[1]["size_bytes"]) in human.stdout


def test_gc(dataset: str, tmp_path: Path) -> None:
    root = tmp_path / "gc"
    with Writer(root, "gc") as w:
        w.add("a", None, {"x": 1})
    leftover = root / "shards" / "orphan-000000.tar"
    leftover.parent.mkdir(exist_ok=True)
    leftover.write_bytes(b"\0" * 1024)
    dry = ok_json("gc", str(root), "--dry-run", "--grace", "0")
    assert dry["dry_run"] is True and dry["deleted"] == ["shards/orphan-000000.tar"]
    assert (dry["uri"], dry["num_deleted"], dry["freed_bytes"]) == (str(root), 1, 1024)
    assert leftover.exists()
    young = ok_json("gc", str(root))  # default grace: the leftover is too young
    assert young["deleted"] == [] and young["num_kept_young"] == 1
    human = run("gc", str(root), "--grace", "0")
    assert human.returncode == 0 and "deleted shards/orphan-000000.tar" in human.stdout
    assert not leftover.exists()
    assert run("gc", str(root), "--grace", "-1").returncode == 2


def test_compact(tmp_path: Path) -> None:
    root = tmp_path / "grown"
    for i in range(4):
        with Writer(root, "grown") as w:
            w.add(f"s{i}", None, {"x": i})
    # appends merge small parts as they go (tiered): 4 one-sample appends leave 2 parts
    assert len(Dataset.open(root).manifest.index_parts) == 2
    got = ok_json("compact", str(root))
    _check_vocabulary(got, "compact")
    assert got == {
        "uri": str(root), "version": 5, "compacted": True, "num_parts_before": 2,
        "num_parts": 1, "num_samples": 4, "index_bytes": got["index_bytes"],
        "seconds": got["seconds"],
    }  # fmt: skip
    assert Dataset.open(root).column("x").to_pylist() == [0, 1, 2, 3]
    again = run("compact", str(root))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    with Writer(root, "grown") as w:
        w.add("s4", None, {"x": 4})
    human = run("compact", str(root))
    assert human.returncode == 0 and "compacted 2 index parts" in human.stdout
    assert run("compact", str(tmp_path / "nothing")).returncode == 1


def test_doctor(dataset: str, tmp_path: Path) -> None:
    report = ok_json("doctor", "--uri", dataset)
    assert report["packages"]["ferroload"]
    assert report["packages"]["ferroload-cli"] == version("ferroload-cli")
    assert report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "jpeg" in report["codec_backends"]
    assert report["dataset"]["reachable"] is True and report["dataset"]["num_samples"] == 7
    assert report["dataset"]["uri"] == dataset
    assert report["dataset"]["size_bytes"] == ok_json("info", dataset)["size_bytes"]
    human = run("doctor")
    assert human.returncode == 0 and "ferroload-format" in human.stdout
    missing = run("doctor", "--uri", str(tmp_path / "nothing"), "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["dataset"]["reachable"] is False


# --------------------------------------------------------------------------- errors


def test_user_error_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    line = one_error_line(run("info", missing))
    assert "no ferroload dataset" in line
    for args in (("info", missing, "--debug"), ("--debug", "info", missing)):
        proc = run(*args)
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr and "DatasetNotFoundError" in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("ferroload: error: ")


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("frobnicate",),
        ("info",),
        ("head", "x", "-n", "-1"),
        ("get", "x", "notanumber"),
        ("info", "x", "--storage-option", "novalue"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    # the usage on stderr; with no arguments at all, the whole help (rich prints it on stdout)
    assert "usage: ferroload" in (proc.stderr if args else proc.stdout).lower()


def test_storage_options_reach_the_store() -> None:
    # obstore refuses an unknown key: proof the option travelled to the store
    line = one_error_line(run("info", "s3://bucket/ds", "--storage-option", "nonsense_key=1"))
    assert "nonsense_key" in line
    # a refused connection to the given endpoint: the options configured the client
    opts = {
        "endpoint": "http://127.0.0.1:9",
        "allow_http": "true",
        "access_key_id": "a",
        "secret_access_key": "b",
        "region": "us-east-1",
    }
    args = [arg for k, v in opts.items() for arg in ("--storage-option", f"{k}={v}")]
    line = one_error_line(run("log", "s3://bucket/ds", *args))
    assert "127.0.0.1:9" in line


# --------------------------------------------------------------------------- operations


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_subset_materializes_the_matching_samples(dataset: str, tmp_path: Path) -> None:
    out = str(tmp_path / "ones")
    proc = run(
        "subset", dataset, out, "--where", "label = 1", "--json", env={"FERROLOAD_PROGRESS": "1"}
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    src, copy = Dataset.open(dataset), Dataset.open(out)
    assert result == {
        "uri": out,
        "name": "ones",  # named after DST, as an import is
        "version": 1,
        "num_samples": 2,
        "num_shards": 1,
        "size_bytes": copy.manifest.size_bytes,
        "mode": "create",
        "num_written": 2,
        "num_matched": 2,
        "source": {"uri": dataset, "version": 2, "num_samples": 7},
        "seconds": result["seconds"],
    }
    assert result["seconds"] == round(result["seconds"], 3)
    assert "2/2" in proc.stderr  # the library's progress bar (FERROLOAD_PROGRESS=1), on stderr
    assert "subset: " in proc.stderr and "copy" not in proc.stderr  # the command's name
    assert copy.column("sample_id").to_pylist() == ["s0001", "s0004"]
    assert [copy[i]["image"] for i in range(2)] == [src[1]["image"], src[4]["image"]]
    limited = ok_json(
        "subset", dataset, str(tmp_path / "few"), "-w", "label < 2", "--limit", "3", "--name", "few"
    )
    assert (limited["num_samples"], limited["num_matched"], limited["name"]) == (3, 5, "few")
    assert run("subset", dataset, str(tmp_path / "x")).returncode == 2  # --where is required
    line = one_error_line(run("subset", dataset, str(tmp_path / "y"), "--where", "nope = 1"))
    assert "nope" in line
    with pytest.raises(ferroload_errors.DatasetNotFoundError):
        Dataset.open(tmp_path / "y")


def test_cache_stats_and_clear(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "cache", max_bytes=1 << 30)
    for i in range(3):
        cache.put(
            BlockCache.key("s3://b/ds", "shards/a.tar", "v1", i, cache.block_size), b"x" * 1000
        )
    env = {"FERROLOAD_CACHE_DIR": str(tmp_path / "cache"), "FERROLOAD_CACHE_SIZE": "2GiB"}
    stats = ok_json("cache", "stats", env=env)
    assert stats["directory"] == str(tmp_path / "cache")
    assert (stats["num_entries"], stats["max_bytes"]) == (3, 2 << 30)
    assert stats["size_bytes"] == cache.size() > 3000
    assert stats["block_bytes"] == cache.block_size
    human = run("cache", "stats", env=env)
    assert human.returncode == 0 and "entries" in human.stdout and "2.0 GiB" in human.stdout
    # --dir wins over FERROLOAD_CACHE_DIR, which is not even created then
    elsewhere = {"FERROLOAD_CACHE_DIR": str(tmp_path / "unused")}
    assert (
        ok_json("cache", "stats", "--dir", str(tmp_path / "cache"), env=elsewhere)["num_entries"]
        == 3
    )
    assert not (tmp_path / "unused").exists()
    cleared = ok_json("cache", "clear", "--dir", str(tmp_path / "cache"))
    assert (cleared["num_entries"], cleared["size_bytes"]) == (3, stats["size_bytes"])
    assert cache.count() == 0
    assert ok_json("cache", "stats", env=env)["num_entries"] == 0
    bad = one_error_line(run("cache", "stats", env={"FERROLOAD_CACHE_SIZE": "lots"}))
    assert "FERROLOAD_CACHE_SIZE" in bad


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    """40 decodable PNGs of different sizes, labels 0..3."""
    from PIL import Image

    root = tmp_path_factory.mktemp("cli-images") / "ds"
    rng = np.random.default_rng(0)
    with Writer(root, "images", shard_size=32 << 10) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(40):
            pixels = rng.integers(0, 255, size=(20 + i % 5, 24, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="PNG")
            w.add(f"i{i:03d}", {"image": buf.getvalue()}, {"label": i % 4})
    return str(root)


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_bench_reports_throughput_per_epoch(images: str) -> None:
    report = ok_json(
        "bench", images, "--epochs", "2", "-b", "8", "--resize", "16x16", "--meta", "label"
    )
    assert report["images"] == ["image"] and report["resize"] == [16, 16]
    assert [e["epoch"] for e in report["epochs"]] == [0, 1]
    assert (report["uri"], report["num_samples"], report["version"]) == (images, 40, 1)
    for e in report["epochs"]:
        assert e["num_samples"] == 40 and e["samples_per_s"] > 0
        assert e["first_batch_seconds"] >= 0 and e["seconds"] == round(e["seconds"], 3)
    some = ok_json("bench", images, "--epochs", "1", "--where", "label = 1", "--limit", "4")
    assert some["num_samples"] == 4 and some["epochs"][0]["num_samples"] == 4
    assert some["resize"] == [224, 224]  # the default size when images are decoded
    human = run("bench", images, "--epochs", "1", "--resize", "16")
    assert human.returncode == 0 and "samples/s" in human.stdout
    assert run("bench", images, "--resize", "big").returncode == 2
    assert "nope" in one_error_line(run("bench", images, "--images", "nope"))


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_catalog_commands(dataset: str, tmp_path: Path) -> None:
    root = tmp_path / "cat-ds"
    with Writer(root, "catds") as w:
        w.add("a", None, {"x": 1})
    env = {"FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb")}
    added = ok_json("catalog", "add", "pets", str(root), "-t", "images", "-d", "my pets", env=env)
    assert (added["name"], added["version"], added["num_samples"], added["tags"]) == (
        "pets",
        1,
        1,
        ["images"],
    )
    ok_json("catalog", "add", "demo", dataset, env=env)
    assert [e["name"] for e in ok_json("catalog", "ls", env=env)] == ["demo", "pets"]
    assert [e["name"] for e in ok_json("catalog", "ls", "--tag", "images", env=env)] == ["pets"]
    assert ok_json("info", "catalog:pets", env=env)["num_samples"] == 1  # catalog: URIs open
    with Writer(root) as w:  # a new version: show refreshes the entry
        w.add("b", None, {"x": 2})
    assert ok_json("catalog", "show", "pets", "--no-refresh", env=env)["version"] == 1
    shown = ok_json("catalog", "show", "pets", env=env)
    assert (shown["version"], shown["num_samples"], shown["description"]) == (2, 2, "my pets")
    assert ok_json("catalog", "tag", "pets", "best", "cats", env=env)["tags"] == [
        "best",
        "cats",
        "images",
    ]
    assert ok_json("catalog", "tag", "pets", "cats", "--remove", env=env)["tags"] == [
        "best",
        "images",
    ]
    human = run("catalog", "ls", env=env)
    assert human.returncode == 0 and "pets" in human.stdout and "best, images" in human.stdout
    exists = one_error_line(run("catalog", "add", "pets", str(root), env=env))
    assert "already has an entry 'pets'" in exists and "--replace" in exists
    assert ok_json("catalog", "rm", "pets", env=env) == {"name": "pets", "removed": True}
    assert "pets" in one_error_line(run("catalog", "show", "pets", env=env))
    assert "Bad Name" in one_error_line(run("catalog", "add", "Bad Name", str(root), env=env))
    assert Dataset.open(root).version == 2  # rm leaves the dataset alone


# --------------------------------------------------------------------------- import / export


def _png(seed: int, size: tuple[int, int] = (12, 16)) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, size=(*size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_import_export_image_folder(tmp_path: Path) -> None:
    src = tmp_path / "photos"
    files = {
        f"{c}/{c}-{i}.png": _png(10 * k + i) for k, c in enumerate(["cat", "dog"]) for i in range(3)
    }
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    ds = str(tmp_path / "ds")
    proc = run(
        "import",
        "imagefolder",
        str(src),
        ds,
        "--workers",
        "3",
        "--json",
        env={"FERROLOAD_PROGRESS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["num_samples"], report["version"], report["skipped"]) == (6, 1, [])
    assert "import imagefolder" in proc.stderr and "6/6" in proc.stderr  # the library's bar
    assert ok_json("sql", ds, "SELECT label, count(*) AS n FROM samples GROUP BY 1 ORDER BY 1") == [
        {"label": 0, "n": 3},
        {"label": 1, "n": 3},
    ]
    out = tmp_path / "back"
    exported = ok_json("export", "imagefolder", ds, str(out))
    assert (exported["num_written"], exported["dst"]) == (6, str(out))
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*.png")} == files

    (src / "dog" / "broken.png").write_bytes(_png(99)[:40])  # a truncated image
    line = one_error_line(run("import", "imagefolder", str(src), str(tmp_path / "ds2")))
    assert "broken.png" in line
    with pytest.raises(ferroload_errors.DatasetNotFoundError):
        Dataset.open(tmp_path / "ds2")  # nothing was written
    (src / "cat" / "README.txt").write_text("not a photo")
    skipped = run("import", "imagefolder", str(src), str(tmp_path / "ds3"), "--on-error", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "imported 6 samples" in skipped.stdout and "broken.png" in skipped.stdout
    readme = str(src / "cat" / "README.txt")
    assert f"ignored {readme}: not an image format ferroload reads (.txt;" in skipped.stdout
    listed = ok_json("import", "imagefolder", str(src), str(tmp_path / "ds5"), "--on-error", "skip")
    assert listed["num_ignored"] == 1 and listed["ignored"][0]["where"] == readme
    assert (
        run(
            "import", "imagefolder", str(src), str(tmp_path / "x"), "--on-error", "maybe"
        ).returncode
        == 2
    )
    # a limit of the library, said as this command's flags
    line = one_error_line(
        run("import", "imagefolder", str(src), str(tmp_path / "ds4"), "--max-file-size", "100")
    )
    assert "more than --max-file-size 100;" in line and "--on-error skip" in line
    assert "max_file_bytes" not in line and "on_error" not in line
    assert run("import", "imagefolder", str(src), str(tmp_path / "ds5"), "--max-file-size",
               "lots").returncode == 2  # fmt: skip


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_import_export_webdataset_and_parquet(tmp_path: Path) -> None:
    import tarfile

    import pyarrow.parquet as pq

    tar_path = tmp_path / "in.tar"
    members = {f"k{i}.{ext}": f"{ext} {i}".encode() for i in range(4) for ext in ("txt", "cls")}
    with tarfile.open(tar_path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    wds = str(tmp_path / "wds")
    assert ok_json("import", "wds", str(tar_path), wds)["num_samples"] == 4
    gz = tmp_path / "zeros.tar.gz"  # 2 MiB of zeros in a few KiB
    with tarfile.open(gz, "w:gz") as tar:
        info = tarfile.TarInfo("z.bin")
        info.size = 2 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    line = one_error_line(
        run("import", "wds", str(gz), str(tmp_path / "gz"), "--max-inflate-ratio", "1")
    )
    assert "--max-inflate-ratio" in line and "max_inflate_ratio" not in line
    bomb = run("import", "wds", str(gz), str(tmp_path / "gz"), "--max-inflate-ratio", "1e6")
    assert bomb.returncode == 0, bomb.stderr
    out = tmp_path / "wds-out"
    assert ok_json("export", "wds", wds, str(out))["num_written"] == 4
    got = {}
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                f = tar.extractfile(m)
                assert f is not None
                got[m.name] = f.read()
    assert got == members

    table = pa.table({"key": ["a", "b"], "jpg": [_png(1), _png(2)], "score": [0.5, 1.5]})
    pq.write_table(table, tmp_path / "t.parquet")
    pds = str(tmp_path / "pq")
    assert (
        ok_json(
            "import",
            "parquet",
            str(tmp_path / "t.parquet"),
            pds,
            "--id-column",
            "key",
            "--binary",
            "jpg=png",
        )["num_samples"]
        == 2
    )
    back = Dataset.open(pds)
    assert back.column("sample_id").to_pylist() == ["a", "b"]
    assert [back[i]["jpg"] for i in range(2)] == table.column("jpg").to_pylist()
    assert back.column("score").to_pylist() == [0.5, 1.5]
    assert (
        run("import", "parquet", str(tmp_path / "t.parquet"), pds, "--binary", "jpg").returncode
        == 2
    )


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_import_hf(tmp_path: Path) -> None:
    # the hf extra; the CLI's own isolated install has no `datasets` (skips are allowed there)
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"text": datasets.Value("string"), "n": datasets.ClassLabel(names=["a", "b", "c"])}
    )
    hf = datasets.Dataset.from_dict({"text": ["x", "y", "z"], "n": [0, 1, 2]}, features=features)
    hf.save_to_disk(str(tmp_path / "hf"))
    hds = str(tmp_path / "hfds")
    report = ok_json("import", "hf", str(tmp_path / "hf"), hds)
    assert report["num_samples"] == 3
    # a class label fills two columns: a list, not a joined string
    assert report["columns"] == {"text": "text", "n": ["n", "n_name"]}
    assert Dataset.open(hds).column("text").to_pylist() == ["x", "y", "z"]

    splits = {
        name: datasets.Dataset.from_dict({"text": [f"{name} {i}" for i in range(n)]})
        for name, n in (("train", 3), ("validation", 2), ("test", 1))
    }
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "dd"))
    every = str(tmp_path / "every")
    assert ok_json("import", "hf", str(tmp_path / "dd"), every)["num_samples"] == 6
    assert sorted(set(Dataset.open(every).column("split").to_pylist())) == [
        "test", "train", "validation",
    ]  # fmt: skip
    two = str(tmp_path / "two")
    assert (
        ok_json("import", "hf", str(tmp_path / "dd"), two, "--splits", "train,test")["num_samples"]
        == 4
    )
    one = str(tmp_path / "one")
    assert (
        ok_json("import", "hf", str(tmp_path / "dd"), one, "--split", "validation")["num_samples"]
        == 2
    )
    assert "split" not in Dataset.open(one).columns
    both = run("import", "hf", str(tmp_path / "dd"), str(tmp_path / "x"), "--split", "a",
               "--splits", "b")  # fmt: skip
    assert both.returncode == 2 and "exclude each other" in both.stderr


#: Keys the commands used before one vocabulary (`num_samples`, `num_shards`, `size_bytes`).
OLD_KEYS = {"samples", "shards", "bytes", "of", "entries", "rows", "kept_young", "threads"}


def _check_vocabulary(value: Any, where: str) -> None:
    """No old key anywhere; every `uri` absolute; every `seconds` rounded to milliseconds."""
    if isinstance(value, list):
        for item in value:
            _check_vocabulary(item, where)
        return
    if not isinstance(value, dict):
        return
    assert not OLD_KEYS & set(value), (where, OLD_KEYS & set(value))
    if "uri" in value:
        assert value["uri"].startswith("/"), (where, value["uri"])
    for key, item in value.items():
        if key == "seconds" or key.endswith("_seconds"):
            assert item == round(item, 3), (where, key, item)
        _check_vocabulary(item, where)


def _photos(root: Path, classes: tuple[str, ...] = ("cat", "dog"), n: int = 3) -> Path:
    for k, c in enumerate(classes):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (root / c / f"{c}-{i}.png").write_bytes(_png(10 * k + i))
    return root


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_every_command_speaks_one_json_vocabulary(tmp_path: Path) -> None:
    """Relative paths in, absolute paths out; the same keys for the same things."""
    _photos(tmp_path / "photos")
    ds = str(tmp_path / "ds")

    def j(*args: str) -> Any:
        value = ok_json(*args, cwd=tmp_path)
        _check_vocabulary(value, " ".join(args))
        return value

    def version_of(uri: str, key: str = "uri") -> dict[str, Any]:
        d = Dataset.open(uri)
        return {
            key: uri, "name": d.name, "version": d.version, "num_samples": d.num_samples,
            "num_shards": d.num_shards, "size_bytes": d.manifest.size_bytes,
        }  # fmt: skip

    imported = j("import", "imagefolder", "photos", "ds")
    assert imported.items() >= version_of(ds).items()
    assert (imported["num_written"], imported["mode"], imported["num_skipped"]) == (6, "create", 0)
    info = j("info", "ds")
    assert info.items() >= version_of(ds).items()
    assert j("verify", "ds").items() >= {"uri": ds, "version": 1, "ok": True}.items()
    [logged] = j("log", "ds")
    assert (
        logged.items()
        >= {k: v for k, v in version_of(ds).items() if k not in ("uri", "name")}.items()
    )
    cats = str(tmp_path / "cats")
    subset = j("subset", "ds", "cats", "--where", "class_name = 'cat'")
    assert subset.items() >= version_of(cats).items()
    assert subset["source"] == {"uri": ds, "version": 1, "num_samples": 6}
    exported = j("export", "wds", "cats", "cats-wds")
    assert exported.items() >= version_of(cats).items()
    assert (exported["dst"], exported["num_written"]) == (str(tmp_path / "cats-wds"), 3)
    assert exported["num_files"] == 1 and exported["payload_bytes"] > 0
    assert j("gc", "ds", "--dry-run")["uri"] == ds
    bench = j("bench", "ds", "--epochs", "1", "--resize", "8", "-b", "4")
    assert bench.items() >= {"uri": ds, "num_samples": 6, "version": 1}.items()
    assert j("doctor", "--uri", "ds")["dataset"].items() >= version_of(ds).items()
    got = tmp_path / "one.png"
    assert j("get", "ds", "0", "--column", "image", "--out", "one.png") == {
        "column": "image", "out": str(got), "size_bytes": got.stat().st_size,
    }  # fmt: skip


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_writing_into_an_existing_dataset_is_explicit(tmp_path: Path) -> None:
    photos = str(_photos(tmp_path / "photos"))
    ds = str(tmp_path / "ds")
    assert ok_json("import", "imagefolder", photos, ds)["version"] == 1
    again = one_error_line(run("import", "imagefolder", photos, ds))
    assert f"{ds} already holds" in again
    assert "pass --append to add to it or --overwrite to replace" in again
    assert "mode=" not in again and "file://" not in again
    assert Dataset.open(ds).version == 1  # nothing written
    both = run("import", "imagefolder", photos, ds, "--append", "--overwrite")
    assert both.returncode == 2 and "exclude each other" in both.stderr

    appended = ok_json(
        "import", "imagefolder", str(_photos(tmp_path / "more", ("cow",))), ds, "--append"
    )
    assert (appended["version"], appended["num_samples"], appended["num_written"]) == (2, 9, 3)
    assert appended["mode"] == "append"
    replaced = ok_json("import", "imagefolder", photos, ds, "--overwrite")
    assert (replaced["version"], replaced["num_samples"], replaced["num_written"]) == (3, 6, 6)
    assert [v["num_samples"] for v in ok_json("log", ds)] == [6, 9, 6]  # history kept
    old = set((tmp_path / "ds" / "shards").rglob("*.tar"))
    collected = ok_json("gc", ds, "--keep-versions", "1", "--grace", "0")
    assert collected["expired"] == [1, 2] and collected["num_expired"] == 2
    assert collected["freed_bytes"] > 0 and collected["num_deleted"] >= 2
    assert [v["version"] for v in ok_json("log", ds)] == [3]
    assert len(set((tmp_path / "ds" / "shards").rglob("*.tar"))) < len(old)
    assert Dataset.open(ds).num_samples == 6

    cats = str(tmp_path / "cats")
    assert ok_json("subset", ds, cats, "-w", "class_name = 'cat'")["num_samples"] == 3
    line = one_error_line(run("subset", ds, cats, "-w", "class_name = 'dog'"))
    assert "--append" in line and "--overwrite" in line and "mode=" not in line
    more = ok_json("subset", ds, cats, "-w", "class_name = 'dog'", "--append")
    assert (more["version"], more["num_samples"], more["num_written"]) == (2, 6, 3)
    human = run("subset", ds, cats, "-w", "class_name = 'dog'", "--overwrite")
    assert human.returncode == 0, human.stderr
    assert f"overwrote with 3 of 6 samples to {cats} (version 3, 3 samples)" in human.stdout

    # a dataset of another name: the message names --name, never `name=None`
    line = one_error_line(run("subset", ds, cats, "-w", "label = 0", "--append", "--name", "x"))
    assert line.endswith(
        f"{cats} holds dataset 'cats', not 'x'; leave out --name (or pass --name 'cats') to "
        "append to it"
    ), line


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_a_subset_matching_nothing_writes_an_empty_dataset(dataset: str, tmp_path: Path) -> None:
    empty = str(tmp_path / "empty")
    human = run("subset", dataset, empty, "--where", "label = 99")
    assert human.returncode == 0, human.stderr
    assert "the filter matched no sample" in human.stdout
    assert "wrote 0" not in human.stdout and "of 7" not in human.stdout
    assert (Dataset.open(empty).num_samples, Dataset.open(empty).version) == (0, 1)
    again = ok_json("subset", dataset, empty, "--where", "label = 99", "--overwrite")
    assert (again["num_matched"], again["num_written"], again["num_samples"]) == (0, 0, 0)
    assert again["version"] == 2


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_progress_is_the_librarys_and_quiet_hides_it(tmp_path: Path) -> None:
    photos = str(_photos(tmp_path / "photos"))
    forced = {"FERROLOAD_PROGRESS": "1"}
    shown = run("import", "imagefolder", photos, str(tmp_path / "a"), env=forced)
    assert shown.returncode == 0 and "import imagefolder" in shown.stderr and "6/6" in shown.stderr
    quiet = run("-q", "import", "imagefolder", photos, str(tmp_path / "b"), env=forced)
    assert quiet.returncode == 0 and quiet.stderr == ""
    hidden = run("verify", str(tmp_path / "a"), env={"FERROLOAD_PROGRESS": "0"})
    assert hidden.returncode == 0 and hidden.stderr == ""
    verify = run("verify", str(tmp_path / "a"), env=forced)
    assert verify.returncode == 0 and "verify" in verify.stderr and "1/1" in verify.stderr


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_export_into_a_non_empty_folder_needs_overwrite(tmp_path: Path) -> None:
    ds = str(tmp_path / "ds")
    assert ok_json("import", "imagefolder", str(_photos(tmp_path / "photos")), ds)["version"] == 1
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    line = one_error_line(run("export", "imagefolder", ds, str(out)))
    assert "--overwrite" in line and "overwrite=" not in line
    assert ok_json("export", "imagefolder", ds, str(out), "--overwrite")["num_written"] == 6
    assert not (out / "old.txt").exists() and len(list(out.rglob("*.png"))) == 6


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_export_wds_then_import_wds_restores_the_columns(tmp_path: Path) -> None:
    import tarfile

    dataset = str(tmp_path / "ds")
    with Writer(dataset, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(7):
            w.add(f"s{i:04d}", {"image": _png(i)}, {"label": i % 3, "caption": f"cat {i}"})
    out = tmp_path / "wds"
    assert ok_json("export", "wds", dataset, str(out))["num_written"] == 7
    back = str(tmp_path / "back")
    # `webdataset`, the Python functions' spelling, is the same command (not listed)
    assert ok_json("import", "webdataset", str(out), back)["num_samples"] == 7
    assert "webdataset" not in run("import", "--help").stdout
    src, got = Dataset.open(dataset), Dataset.open(back)
    for column in ("label", "caption"):
        assert got.column(column).to_pylist() == src.column(column).to_pylist()
        assert got.schema.field(column).type == src.schema.field(column).type

    bare = tmp_path / "bare"
    ok_json("export", "webdataset", dataset, str(bare), "--metadata", "none")
    with tarfile.open(next(bare.glob("*.tar"))) as tar:
        # PNG bytes in a `jpg` modality: the members say what they are
        assert {n.rsplit(".", 1)[1] for n in tar.getnames()} == {"png"}
    some = tmp_path / "some"
    ok_json("export", "wds", dataset, str(some), "--metadata-columns", "caption")
    with tarfile.open(next(some.glob("*.tar"))) as tar:
        f = tar.extractfile("s0000.json")
        assert f is not None and json.loads(f.read()) == {"caption": "cat 0"}
        assert "s0000.cls" not in tar.getnames()
    assert run("export", "wds", dataset, str(tmp_path / "x"), "--metadata", "yaml").returncode == 2


@pytest.mark.slow  # many subprocesses; the main suite runs it, the package alone does not
def test_demo_command(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the demo trains with torch (the CLI alone has no torch)
    folder = tmp_path / "demo"
    proc = run(
        "demo", str(folder), "--samples", "120", "--epochs", "1", "--batch-size", "16", script=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "plain DuckDB" in proc.stdout and "epoch 1/1" in proc.stdout
    assert "val accuracy" in proc.stdout and "samples/s" in proc.stdout
    assert len(Dataset.open(folder)) == 120
    assert run("demo", str(tmp_path / "x"), "--samples", "5").returncode == 2
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert "not a ferroload demo dataset" in one_error_line(run("demo", str(tmp_path / "mine")))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_text_from_a_dataset_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A stranger's dataset name, column names and values may hold escape sequences,
    bidi overrides or rich markup: the CLI shows them, it does not obey them."""
    root = str(tmp_path / "evil")
    evil_name = "evil\x1b]0;pwned\x07\u202ename"
    with Writer(root, evil_name) as w:
        w.add("s0", None, {"label\x1b[2J": "v\x1b[31m[bold]y[/]\x9b"})
    for args in (("info", root), ("head", root), ("schema", root), ("sql", root,
                 'SELECT "label\x1b[2J" FROM samples')):  # fmt: skip
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        shown = proc.stdout + proc.stderr
        assert not any(c in shown for c in "\x1b\x07\x9b\u202e"), (args, shown)
    assert "evil\\x1b]0;pwned\\x07\\u202ename" in run("info", root).stdout
    assert "v\\x1b[31m[bold]y[/]\\x9b" in run("head", root).stdout  # markup shown, not applied
    data = run("head", root, "--json").stdout
    assert "\x1b" not in data and "\x9b" not in data
    assert json.loads(data)[0]["label\x1b[2J"] == "v\x1b[31m[bold]y[/]\x9b"  # JSON keeps them
    err = run("head", root, "--columns", "nope\x1b[2J")
    assert "\x1b" not in err.stderr


def test_log_and_info_count_shards_without_reading_shard_lists(tmp_path: Path) -> None:
    root = tmp_path / "many"
    with Writer(str(root), "many", shard_size=1) as w:  # one shard a sample: 300 > 256 inline
        w.declare("blob", "bin")
        for i in range(300):
            w.add(f"s{i:04d}", {"blob": b"x" * 10}, {"n": i})
    lists = list((root / "_ferroload" / "shardlists").iterdir())
    assert len(lists) == 1
    size = Dataset.open(str(root)).manifest.size_bytes
    lists[0].unlink()  # log and info must not need it
    versions = ok_json("log", str(root))
    assert [(v["num_shards"], v["size_bytes"]) for v in versions] == [(300, size)]
    info = ok_json("info", str(root))
    assert (info["num_shards"], info["size_bytes"]) == (300, size)
    line = one_error_line(run("get", str(root), "0"))
    assert "shard list" in line and "is missing" in line


def test_a_ferroload_rs_0_1_1_root_inspects_and_upgrades(tmp_path: Path) -> None:
    from ferroload_testing import rs011_dataset

    root = str(rs011_dataset("mixed", tmp_path / "mixed"))
    info = ok_json("info", root)
    assert (info["num_samples"], info["version"], info["format"]) == (30, 3, "ferroload-rs 0.1.1")
    assert "ferroload upgrade" in run("info", root).stdout
    head = ok_json("head", root, "-n", "2")
    assert [r["sample_id"] for r in head] == ["s0000", "s0001"]
    rows = ok_json(
        "sql",
        root,
        "SELECT label, count(*) AS n FROM samples WHERE square > 0 GROUP BY label ORDER BY label",
    )
    assert [r["n"] for r in rows] == [3, 3, 3, 3, 3]
    assert ok_json("verify", root)["ok"] is True
    from PIL import Image

    (tmp_path / "src" / "cat").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(tmp_path / "src" / "cat" / "a.png")
    refused = one_error_line(run("import", "imagefolder", str(tmp_path / "src"), root, "--append"))
    assert "ferroload upgrade" in refused
    up = ok_json("upgrade", root)
    assert (up["status"], up["versions"], up["samples"]) == ("upgraded", 3, 30)
    assert up["bytes_read"] > 0 and up["uri"] == root
    assert ok_json("info", root)["format"] == "ferroload"
    assert "nothing to do" in run("upgrade", root).stdout
    assert ok_json("verify", root)["ok"] is True
    assert one_error_line(run("upgrade", str(tmp_path / "nothing"))).startswith(
        "ferroload: error: "
    )
