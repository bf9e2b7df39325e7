"""Every importer takes `mode="create" | "append" | "overwrite"` (default create), every
importer and exporter `progress=True | False | None | callable`, and exporters replace an
existing folder only with `overwrite=True`."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _convert_data import image_bytes

from ferroload_convert import (
    ImportReport,
    OutputExistsError,
    export_image_folder,
    export_webdataset,
    import_hf,
    import_image_folder,
    import_parquet,
    import_webdataset,
)
from ferroload_core import FerroloadError
from ferroload_format import Dataset, DatasetExistsError, Writer

datasets.disable_progress_bars()

N = 4


def _image_folder(root: Path) -> Path:
    for i in range(N):
        path = root / "src" / ("cat" if i % 2 else "dog") / f"{i:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_bytes(i))
    return root / "src"


def _tar(root: Path) -> Path:
    path = root / "src.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(N):
            data = f"text {i}".encode()
            info = tarfile.TarInfo(f"s{i:03d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _parquet(root: Path) -> Path:
    path = root / "src.parquet"
    pq.write_table(pa.table({"key": [f"k{i}" for i in range(N)], "n": list(range(N))}), path)
    return path


def _hf(root: Path) -> Any:
    return datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(N)]})


Importer = Callable[..., ImportReport]
IMPORTERS: dict[str, tuple[Callable[[Path], Any], Importer, dict[str, Any]]] = {
    "imagefolder": (_image_folder, import_image_folder, {}),
    "wds": (_tar, import_webdataset, {}),
    "parquet": (_parquet, import_parquet, {"id_column": "key"}),
    "hf": (_hf, import_hf, {}),
}


@pytest.fixture(params=sorted(IMPORTERS))
def importer(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., ImportReport]:
    """An importer bound to its source: `importer(dst, **options)`."""
    make, fn, options = IMPORTERS[request.param]
    src = make(tmp_path)

    def run(dst: Path, **kwargs: Any) -> ImportReport:
        return fn(src, dst, **options, **kwargs)

    return run


def test_importing_twice_is_refused_naming_the_flags(importer: Importer, tmp_path: Path) -> None:
    dst = tmp_path / "ds"
    assert importer(dst).version == 1
    with pytest.raises(DatasetExistsError, match="mode='append'") as info:
        importer(dst)
    assert "--append" in str(info.value) and "--overwrite" in str(info.value)
    assert info.value.uri == Dataset.open(dst).uri
    ds = Dataset.open(dst)
    assert (ds.version, len(ds)) == (1, N)  # nothing was added, no id renamed
    assert not any("#" in sid for sid in ds.column("sample_id").to_pylist())


def test_append_adds_a_version_with_renamed_repeats(importer: Importer, tmp_path: Path) -> None:
    dst = tmp_path / "ds"
    importer(dst)
    report = importer(dst, mode="append")
    assert report.version == 2 and report.num_samples == N
    ids = Dataset.open(dst).column("sample_id").to_pylist()
    assert len(ids) == 2 * N and len(set(ids)) == 2 * N
    assert all(sid.endswith("#2") for sid in ids[N:])


def test_overwrite_replaces_the_content_and_keeps_history(
    importer: Importer, tmp_path: Path
) -> None:
    dst = tmp_path / "ds"
    importer(dst)
    importer(dst, mode="append")
    report = importer(dst, mode="overwrite")
    assert report.version == 3
    ds = Dataset.open(dst)
    assert (len(ds), ds.manifest.operation) == (N, "overwrite")
    assert not any("#" in sid for sid in ds.column("sample_id").to_pylist())  # ids as new
    assert len(Dataset.open(dst, version=2)) == 2 * N


def test_importer_progress_true_false_and_callable(
    importer: Importer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    capfd.readouterr()
    importer(tmp_path / "a", progress=True)
    err = capfd.readouterr().err
    assert "import" in err and f"{N}" in err and "|" in err  # a tqdm bar
    importer(tmp_path / "b", progress=False)
    assert capfd.readouterr().err == ""
    seen: list[tuple[int, int | None]] = []
    importer(tmp_path / "c", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (N, N)
    assert capfd.readouterr().err == ""


def test_progress_none_follows_the_environment(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _image_folder(tmp_path)
    monkeypatch.setenv("FERROLOAD_PROGRESS", "1")
    capfd.readouterr()
    import_image_folder(src, tmp_path / "a")
    assert "import imagefolder: 100%|" in capfd.readouterr().err
    monkeypatch.setenv("FERROLOAD_PROGRESS", "0")
    import_image_folder(src, tmp_path / "b")
    assert capfd.readouterr().err == ""


# --------------------------------------------------------------------------- exporters


def _dataset(root: Path) -> Path:
    uri = root / "ds"
    with Writer(uri, "ds") as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(N):
            w.add(f"s{i}", {"image": image_bytes(i)}, {"label": i % 2})
    return uri


Exporter = Callable[..., Any]
EXPORTERS: dict[str, Exporter] = {
    "imagefolder": export_image_folder,
    "wds": export_webdataset,
}


@pytest.mark.parametrize("kind", sorted(EXPORTERS))
def test_export_into_a_full_folder_needs_overwrite(kind: str, tmp_path: Path) -> None:
    export = EXPORTERS[kind]
    src = _dataset(tmp_path)
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "old.txt").write_text("old")
    with pytest.raises(OutputExistsError, match="overwrite=True") as info:
        export(src, dst)
    assert "--overwrite" in str(info.value)
    assert sorted(p.name for p in dst.iterdir()) == ["old.txt"]
    report = export(src, dst, overwrite=True)
    assert report.num_samples == N
    assert not (dst / "old.txt").exists() and any(dst.rglob("*.*"))
    # nothing is left next to it (the staging and old folders are gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]


@pytest.mark.parametrize("kind", sorted(EXPORTERS))
def test_export_never_replaces_a_dataset(kind: str, tmp_path: Path) -> None:
    export = EXPORTERS[kind]
    src = _dataset(tmp_path)
    for dst in (src, tmp_path):  # the dataset itself, or a folder holding it
        with pytest.raises(OutputExistsError, match="holds a ferroload dataset"):
            export(src, dst, overwrite=True)
    assert len(Dataset.open(src)) == N


@pytest.mark.parametrize("kind", sorted(EXPORTERS))
def test_a_failed_overwrite_leaves_the_old_content(kind: str, tmp_path: Path) -> None:
    export = EXPORTERS[kind]
    src = _dataset(tmp_path)
    for shard in (src / "shards").glob("*.tar"):  # the export fails half way
        shard.write_bytes(shard.read_bytes()[:1024])
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "old.txt").write_text("old")
    with pytest.raises(FerroloadError):
        export(src, dst, overwrite=True)
    assert [p.name for p in dst.iterdir()] == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]


@pytest.mark.parametrize("kind", sorted(EXPORTERS))
def test_exporter_progress_true_false_and_callable(
    kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    export = EXPORTERS[kind]
    src = _dataset(tmp_path)
    capfd.readouterr()
    export(src, tmp_path / "a", progress=True)
    err = capfd.readouterr().err
    assert f"export {kind}" in err and f"{N}/{N}" in err
    export(src, tmp_path / "b", progress=False)
    assert capfd.readouterr().err == ""
    seen: list[tuple[int, int | None]] = []
    export(src, tmp_path / "c", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (N, N)
