"""Bounded reads of import sources (issue 13): FIFOs, devices, huge files, decompression
bombs and symlinks out of the source are bad inputs, never a hang or a MemoryError."""

from __future__ import annotations

import io
import os
import struct
import tarfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _convert_data import image_bytes

from ferroload_convert import BadInputError, ConvertOptionError, import_image_folder
from ferroload_convert._files import read_regular
from ferroload_convert._webdataset import import_webdataset
from ferroload_format import Dataset

GIB = 1 << 30


def _in_thread(fn: Callable[[], Any], timeout: float = 60) -> Any:
    """fn() in a daemon thread: a hang fails the test instead of blocking the run."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout} s (a read that blocks?)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _hostile_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """An image folder with two good images and every kind of hostile entry; returns the
    folder and the paths that must be refused."""
    root = tmp_path / "src"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "cat" / "ok.png").write_bytes(image_bytes(1))
    (root / "dog" / "ok.png").write_bytes(image_bytes(2))
    outside = tmp_path / "secret.png"
    outside.write_bytes(image_bytes(3))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "e.png").write_bytes(image_bytes(4))
    os.mkfifo(root / "cat" / "x.png")
    os.symlink("/dev/zero", root / "cat" / "zero.png")
    os.symlink("/dev/urandom", root / "dog" / "random.jpg")
    os.symlink(outside, root / "dog" / "secret.png")
    os.symlink(tmp_path / "elsewhere", root / "dog" / "linked")
    refused = ["cat/x.png", "cat/zero.png", "dog/linked", "dog/random.jpg", "dog/secret.png"]
    return root, [str(root / r) for r in refused]


def test_image_folder_skips_fifos_devices_and_links_out(tmp_path: Path) -> None:
    root, refused = _hostile_folder(tmp_path)
    report = _in_thread(
        lambda: import_image_folder(root, tmp_path / "ds", on_error="skip", workers=2)
    )
    assert report.num_samples == 2
    assert sorted(s.where for s in report.skipped) == refused
    reasons = {Path(s.where).name: s.reason for s in report.skipped}
    assert "FIFO" in reasons["x.png"]
    assert "symlink to /dev/zero, outside the folder" in reasons["zero.png"]
    assert "symlink to /dev/urandom, outside the folder" in reasons["random.jpg"]
    assert "outside the folder" in reasons["secret.png"]
    assert "outside the folder" in reasons["linked"]
    assert Dataset.open(tmp_path / "ds").num_samples == 2


@pytest.mark.parametrize("name", ["x.png", "zero.png", "secret.png"])
def test_image_folder_raises_naming_the_path(tmp_path: Path, name: str) -> None:
    root, _ = _hostile_folder(tmp_path)
    for other in {"x.png", "zero.png", "secret.png", "random.jpg", "linked"} - {name}:
        for cls in ("cat", "dog"):
            if os.path.lexists(root / cls / other):
                os.unlink(root / cls / other)
    with pytest.raises(BadInputError, match=name) as info:
        _in_thread(lambda: import_image_folder(root, tmp_path / "ds"))
    assert info.value.path is not None and info.value.path.endswith(name)


def test_image_folder_max_file_bytes(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "cat").mkdir(parents=True)
    small, big = image_bytes(1), image_bytes(2) + bytes(5000)
    (root / "cat" / "a.png").write_bytes(small)
    (root / "cat" / "b.png").write_bytes(big)
    limit = len(small) + 10
    report = import_image_folder(root, tmp_path / "ds", on_error="skip", max_file_bytes=limit)
    assert report.num_samples == 1
    assert "max_file_bytes" in report.skipped[0].reason
    with pytest.raises(ConvertOptionError, match="max_file_bytes"):
        import_image_folder(root, tmp_path / "ds2", max_file_bytes=0)


def test_read_regular_refuses_without_opening(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadInputError, match="FIFO"):
        _in_thread(lambda: read_regular(str(tmp_path / "fifo"), max_bytes=100), timeout=10)
    with pytest.raises(BadInputError, match="character device"):
        read_regular("/dev/zero", max_bytes=100)
    with pytest.raises(BadInputError, match="a folder"):
        read_regular(str(tmp_path), max_bytes=100)
    (tmp_path / "f").write_bytes(b"12345")
    assert read_regular(str(tmp_path / "f"), max_bytes=5) == b"12345"
    with pytest.raises(BadInputError, match="max_file_bytes=4"):
        read_regular(str(tmp_path / "f"), max_bytes=4)
    with pytest.raises(BadInputError, match="cannot read"):
        read_regular(str(tmp_path / "missing"), max_bytes=4)


def test_hf_media_path_to_a_device_is_a_bad_row(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from ferroload_convert import import_hf

    (tmp_path / "ok.png").write_bytes(image_bytes(1))
    os.mkfifo(tmp_path / "fifo.png")
    features = datasets.Features(image=datasets.Image())
    cells = [
        {"bytes": None, "path": str(tmp_path / "ok.png")},
        {"bytes": None, "path": "/dev/zero"},
        {"bytes": None, "path": str(tmp_path / "fifo.png")},
    ]
    hf = datasets.Dataset.from_dict({"image": cells}, features=features)
    report = _in_thread(lambda: import_hf(hf, tmp_path / "ds", on_error="skip"))
    assert report.num_samples == 1
    assert [s.where for s in report.skipped] == [
        "<datasets.arrow_dataset.Dataset> (row 1)",
        "<datasets.arrow_dataset.Dataset> (row 2)",
    ]
    assert "/dev/zero" in report.skipped[0].reason
    assert "character device" in report.skipped[0].reason
    assert "FIFO" in report.skipped[1].reason
    with pytest.raises(BadInputError, match="/dev/zero"):
        _in_thread(lambda: import_hf(hf.select([1]), tmp_path / "ds2"))


def _gzip_tar_bomb(path: Path, member_size: int) -> None:
    """A .tar.gz of one member of `member_size` zero bytes (a multiple of 1 MiB), written
    in a few MB of memory: the deflate stream repeats one fully flushed 1 MiB block."""
    info = tarfile.TarInfo("k.bin")
    info.size = member_size
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    tail = bytes(2 * 512 + (-(512 + member_size + 1024) % tarfile.RECORDSIZE))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = comp.compress(header) + comp.flush(zlib.Z_FULL_FLUSH)
    mib = bytes(1 << 20)
    piece = comp.compress(mib) + comp.flush(zlib.Z_FULL_FLUSH)
    end = comp.compress(tail) + comp.flush()
    crc = zlib.crc32(header)
    for _ in range(member_size >> 20):
        crc = zlib.crc32(mib, crc)
    crc = zlib.crc32(tail, crc)
    total = len(header) + member_size + len(tail)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + start)
        for _ in range(member_size >> 20):
            f.write(piece)
        f.write(end + struct.pack("<II", crc, total & 0xFFFFFFFF))


def test_gzip_tar_bomb_is_refused_before_it_inflates(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    _gzip_tar_bomb(bomb, 3 * GIB)
    assert bomb.stat().st_size < 4_000_000
    start = time.perf_counter()
    with pytest.raises(BadInputError, match="max_inflate_ratio") as info:
        _in_thread(lambda: import_webdataset(bomb, tmp_path / "ds"))
    assert info.value.path == str(bomb)
    report = import_webdataset(bomb, tmp_path / "ds", on_error="skip")
    assert (report.num_samples, [s.where for s in report.skipped]) == (0, [str(bomb)])
    print(f"3 GiB gzip member refused in {time.perf_counter() - start:.2f} s")


def test_small_gzip_tar_round_trips_and_ratio_and_member_limits(tmp_path: Path) -> None:
    path = tmp_path / "small.tar.gz"
    _gzip_tar_bomb(path, 8 << 20)  # ~9 KB inflating to 8 MiB: over 100x + 1 MiB
    with pytest.raises(BadInputError, match="inflates to more than"):
        import_webdataset(path, tmp_path / "a")
    report = import_webdataset(path, tmp_path / "b", max_inflate_ratio=1e6)
    assert report.num_samples == 1
    assert Dataset.open(tmp_path / "b").get(0, ["bin"])["bin"] == bytes(8 << 20)
    report = import_webdataset(
        path, tmp_path / "c", max_inflate_ratio=1e6, max_file_bytes=1 << 20, on_error="skip"
    )
    assert report.num_samples == 0
    assert report.skipped[0].where == f"{path} (member k.bin)"
    assert "max_file_bytes" in report.skipped[0].reason
    with pytest.raises(ConvertOptionError, match="max_inflate_ratio"):
        import_webdataset(path, tmp_path / "d", max_inflate_ratio=0.5)


def test_plain_tar_member_limit_and_fifo_tar(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / "a.tar", "w") as tar:
        for name, data in [("k1.bin", b"x" * 100), ("k2.bin", b"y")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    os.mkfifo(src / "b.tar")
    report = _in_thread(
        lambda: import_webdataset(src, tmp_path / "ds", on_error="skip", max_file_bytes=10)
    )
    assert report.num_samples == 1
    where = sorted(s.where for s in report.skipped)
    assert where == [f"{src / 'a.tar'} (member k1.bin)", str(src / "b.tar")]


def test_tar_and_parquet_folders_refuse_links_out_and_fifos(tmp_path: Path) -> None:
    from ferroload_convert import import_parquet

    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    src.mkdir()
    elsewhere.mkdir()
    with tarfile.open(elsewhere / "e.tar", "w") as tar:
        info = tarfile.TarInfo("k.bin")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"z"))
    os.symlink(elsewhere / "e.tar", src / "a.tar")
    os.symlink(elsewhere, src / "linked")
    report = import_webdataset(src, tmp_path / "wds", on_error="skip")
    assert report.num_samples == 0
    assert sorted(s.where for s in report.skipped) == [str(src / "a.tar"), str(src / "linked")]
    assert all("outside the folder" in s.reason for s in report.skipped)
    # named directly, the user means it: the link is followed
    assert import_webdataset(src / "a.tar", tmp_path / "wds2").num_samples == 1

    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pdir = tmp_path / "pq"
    pdir.mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), pdir / "a.parquet")
    os.mkfifo(pdir / "b.parquet")
    report = _in_thread(lambda: import_parquet(pdir, tmp_path / "p", on_error="skip"))
    assert report.num_samples == 2
    assert [s.where for s in report.skipped] == [str(pdir / "b.parquet")]
    assert "FIFO" in report.skipped[0].reason
