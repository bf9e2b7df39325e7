"""`ferroload catalog …` with stored storage options, run for real (`python -m ferroload_cli`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ferroload_format import Dataset, Writer

pytestmark = pytest.mark.slow  # subprocesses; the main suite runs them, the package alone not


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferroload_cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )


def ok_json(*args: str, env: dict[str, str]) -> Any:
    proc = run(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_catalog_json_vocabulary_and_stored_options(tmp_path: Path) -> None:
    root = tmp_path / "pets"
    with Writer(root, "pets") as w:
        w.add("a", None, {"x": 1})
    env = {"FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb"), "PETS_SECRET": "s3cr3t"}
    added = ok_json(
        "catalog", "add", "pets", str(root), "-o", "region=eu-west-3", "-o",
        "secret=env:PETS_SECRET", env=env,
    )  # fmt: skip
    manifest = Dataset.open(root).manifest
    assert added["uri"] == str(root.resolve())  # an absolute path, as every command gives it
    assert (added["name"], added["version"], added["num_samples"]) == ("pets", 1, 1)
    assert added["size_bytes"] == manifest.size_bytes  # the one byte count
    assert added["storage_options"] == {"region": "eu-west-3", "secret": "env:PETS_SECRET"}
    assert "samples" not in added and "bytes" not in added
    listed = ok_json("catalog", "ls", env=env)
    assert [(e["name"], e["size_bytes"], e["storage_options"]) for e in listed] == [
        ("pets", manifest.size_bytes, added["storage_options"])
    ]
    shown = ok_json("catalog", "show", "pets", env=env)  # refreshes with the stored options
    assert shown["num_samples"] == 1 and shown["storage_options"] == added["storage_options"]
    human = run("catalog", "show", "pets", "--no-refresh", env=env).stdout
    assert "region=eu-west-3, secret=env:PETS_SECRET" in human and "s3cr3t" not in human
    assert ok_json("catalog", "rm", "pets", env=env) == {"name": "pets", "removed": True}


def test_a_literal_secret_is_refused_saying_how_to_pass_it(tmp_path: Path) -> None:
    root = tmp_path / "pets"
    with Writer(root, "pets") as w:
        w.add("a", None, {"x": 1})
    env = {"FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb")}
    line = error_line(
        run("catalog", "add", "pets", str(root), "-o", "secret_access_key=abc", env=env)
    )
    assert "storage option 'secret_access_key' is a secret" in line
    assert "as secret_access_key=env:MY_VAR (read when the entry is opened)" in line
    assert "abc" not in (tmp_path / "catalog.duckdb").read_bytes().decode("latin-1")
    assert ok_json("catalog", "ls", env=env) == []
    line = error_line(
        run("catalog", "add", "pets", str(root), "-o", "region=env:NOT_SET_ANYWHERE", env=env)
    )
    assert "NOT_SET_ANYWHERE, which is not set" in line


@pytest.mark.s3
def test_catalog_name_needs_no_options_on_a_custom_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o` once at `catalog add`; then `info catalog:NAME` reaches the endpoint by itself."""
    from ferroload_testing import MotoServer

    with MotoServer() as moto:
        moto.create_bucket("cli-cat")
        uri = "s3://cli-cat/pets"
        with Writer(uri, "pets", storage_options=moto.storage_options()) as w:
            w.add("a", None, {"x": 1})
            w.add("b", None, {"x": 2})
        for name in ("AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP", "AWS_ACCESS_KEY_ID"):
            monkeypatch.delenv(name, raising=False)  # nothing else points at the endpoint
        env = {"FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb"), "CLI_CAT_KEY": "testing"}
        env["CLI_CAT_SECRET"] = "testing"
        added = ok_json(
            "catalog", "add", "pets", uri,
            "-o", f"endpoint_url={moto.endpoint}",  # fsspec's spelling: translated
            "-o", f"region={moto.region}",
            "-o", "key=env:CLI_CAT_KEY",
            "-o", "secret=env:CLI_CAT_SECRET",
            env=env,
        )  # fmt: skip
        assert (added["uri"], added["num_samples"]) == (uri, 2)
        info = ok_json("info", "catalog:pets", env=env)  # no -o
        assert info["num_samples"] == 2
        assert ok_json("catalog", "show", "pets", env=env)["num_samples"] == 2
        del env["CLI_CAT_SECRET"]
        line = error_line(run("info", "catalog:pets", env=env))
        assert "'secret' from the environment variable CLI_CAT_SECRET, which is not set" in line
