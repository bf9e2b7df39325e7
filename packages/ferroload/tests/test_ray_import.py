"""Imports on a local two-CPU Ray cluster (`executor=RayExecutor()`, CLI `--ray`): one
commit, the same dataset as the one-machine import, from local disk and from S3 (moto)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import ferroload
from ferroload_map import RayExecutor
from ferroload_store import open_store

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="the ray extra is not installed")


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((6, 6, 3), i * 9 % 256, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def write_tars(root: Path, tars: int = 4, per: int = 5) -> None:
    """Tars whose keys repeat across tars (`k0` in every one), with `.cls` labels."""
    root.mkdir(parents=True, exist_ok=True)
    for t in range(tars):
        with tarfile.open(root / f"shard-{t:04d}.tar", "w") as tar:
            for i in range(per):
                key = "k0" if i == 0 else f"k{t}-{i}"
                for ext, data in (("png", png(t * per + i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def same(a: Any, b: Any) -> None:
    x, y = ferroload.Dataset.open(a[0], **a[1]), ferroload.Dataset.open(b[0], **b[1])
    assert [m.name for m in x.modalities] == [m.name for m in y.modalities]
    assert list(x) == list(y)
    assert len(x.versions()) == len(y.versions()) == 1


def test_wds_import_on_ray_equals_one_machine(ray_cluster: Any, tmp_path: Path) -> None:
    write_tars(tmp_path / "src")
    ferroload.import_webdataset(tmp_path / "src", tmp_path / "one")
    report = ferroload.import_webdataset(tmp_path / "src", tmp_path / "ray", executor=RayExecutor())
    assert report.num_samples == 20 and report.version == 1
    same((tmp_path / "one", {}), (tmp_path / "ray", {}))
    ids = ferroload.Dataset.open(tmp_path / "ray").column("sample_id").to_pylist()
    assert ids.count("k0") == 1 and "k0#4" in ids


def test_wds_import_from_and_to_s3_on_ray(
    ray_cluster: Any, tmp_path: Path, s3_uri: tuple[str, dict[str, Any]]
) -> None:
    uri, options = s3_uri
    write_tars(tmp_path / "src", tars=3)
    store = open_store(uri + "-src", storage_options=options)
    for p in sorted((tmp_path / "src").iterdir()):
        store.put(p.name, p.read_bytes())
    src = uri + "-src/"
    kw = {"storage_options": options}
    ferroload.import_webdataset(src, uri + "-one", **kw)
    ferroload.import_webdataset(src, uri + "-ray", executor=RayExecutor(), chunk_size=2, **kw)
    same((uri + "-one", kw), (uri + "-ray", kw))


def test_cli_import_with_ray(tmp_path: Path) -> None:
    write_tars(tmp_path / "src", tars=2, per=3)
    # a local cluster started by the command itself (the root conftest keeps Ray's `uv
    # run` hook off, in this process's environment, which the command inherits)
    base = [sys.executable, "-m", "ferroload_cli", "import", "wds", str(tmp_path / "src")]
    proc = subprocess.run(
        [*base, str(tmp_path / "ray"), "--ray", "--chunk-size", "1", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["num_samples"] == 6
    wrong = subprocess.run([*base, str(tmp_path / "x"), "--chunk-size", "2"],
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert wrong.returncode == 2 and "--chunk-size go with --ray" in wrong.stderr
