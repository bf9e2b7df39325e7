"""A local `Store` never reads, writes, lists or deletes outside its root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ferroload_core import UnsafePathError
from ferroload_store import NotARegularFileError, ObjectNotFoundError, open_store
from ferroload_store import _nofollow as _nofollow_module
from ferroload_store._nofollow import RACE_FREE


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_bytes(b"secret bytes, not the dataset's")
    return d


@pytest.mark.parametrize("key", ["/etc/passwd", "../outside/secret.txt", "a/../../x", "a\x00b"])
def test_unsafe_keys_are_refused_for_every_operation(
    tmp_path: Path, outside: Path, key: str
) -> None:
    store = open_store(tmp_path / "root")
    store.put("ok.bin", b"x")
    for call in (
        lambda: store.get(key),
        lambda: store.get_range(key, 0, 4),
        lambda: store.get_ranges(key, [0], [4]),
        lambda: store.head(key),
        lambda: store.put(key, b"evil"),
        lambda: store.put_if_absent(key, b"evil"),
        lambda: store.open_writer(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(UnsafePathError, match="unsafe path"):
            call()
    assert (outside / "secret.txt").read_bytes() == b"secret bytes, not the dataset's"


def test_a_symlink_out_of_the_root_is_never_followed(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    store = open_store(root)
    store.put("shards/ok.bin", b"ok")
    os.symlink(outside, root / "shards" / "link")
    os.symlink(outside / "secret.txt", root / "shards" / "file-link")
    for key in ("shards/link/secret.txt", "shards/file-link"):
        with pytest.raises(UnsafePathError, match="symlink"):
            store.get(key)
        with pytest.raises(UnsafePathError, match="symlink"):
            store.get_range(key, 0, 4)
    with pytest.raises(UnsafePathError, match="symlink"):
        store.put("shards/link/new.bin", b"evil")
    with pytest.raises(UnsafePathError, match="symlink"):
        store.delete("shards/link/secret.txt")
    # a listing names neither the linked folder's files nor the link itself
    assert [o.path for o in store.list("shards/")] == ["shards/ok.bin"]
    # deleting the file link removes the link, never its target
    store.delete("shards/file-link")
    assert not (root / "shards" / "file-link").is_symlink()
    assert (outside / "secret.txt").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_symlinked_folder_is_not_listed(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    store = open_store(root)
    store.put("a/ok.bin", b"ok")
    (root / "_ferroload").mkdir()
    os.symlink(outside, root / "_ferroload" / "staging")
    assert store.list("_ferroload/staging/") == []
    assert [o.path for o in store.list()] == ["a/ok.bin"]


def test_a_root_reached_through_a_symlink_still_works(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    store = open_store(tmp_path / "alias")
    store.put("shards/a.bin", b"abc")
    assert store.get("shards/a.bin") == b"abc"
    assert bytes(store.get_ranges("shards/a.bin", [1], [2])[0]) == b"bc"
    assert [o.path for o in store.list()] == ["shards/a.bin"]


def test_a_symlink_loop_neither_breaks_nor_stalls_a_listing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = open_store(root)
    store.put("shards/a.bin", b"a")
    os.symlink("..", root / "shards" / "loop")
    os.symlink(tmp_path / "nowhere", root / "shards" / "dangling")
    assert [o.path for o in store.list("shards/")] == ["shards/a.bin"]
    assert [o.path for o in store.list()] == ["shards/a.bin"]


def test_a_listing_matches_what_was_written(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root")
    keys = ["a/b/c.bin", "a/d.bin", "a#b/x", "e.bin", "f#x.bin"]
    for key in keys:
        store.put(key, key.encode())
    (tmp_path / "root" / "a" / "upload#7").write_bytes(b"in progress")  # obstore's own
    listed = store.list()
    assert [o.path for o in listed] == sorted(keys)
    assert [o.size for o in listed] == [len(k) for k in sorted(keys)]
    assert [o.path for o in store.list("a/")] == ["a/b/c.bin", "a/d.bin"]
    assert [o.path for o in store.list("a")] == ["a#b/x", "a/b/c.bin", "a/d.bin"]
    assert [o.path for o in store.list("", offset="a/d.bin")] == ["e.bin", "f#x.bin"]
    assert store.list("missing/") == []
    assert store.list("e.bin/") == []


def test_local_path_refuses_a_file_symlinked_out_of_the_root(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    store = open_store(root)
    store.put("index/ok.parquet", b"x")
    os.symlink(outside / "secret.txt", root / "index" / "part.parquet")
    assert store.local_path("index/ok.parquet") == (root / "index" / "ok.parquet").resolve()
    with pytest.raises(UnsafePathError, match="symlink"):
        store.local_path("index/part.parquet")


@pytest.mark.skipif(not RACE_FREE, reason="no O_NOFOLLOW/dir_fd opens on this platform")
@pytest.mark.parametrize("action", ["get", "get_range", "head", "delete"])
def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_followed(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    """The race between checking a key and opening it: the folder on its way is replaced
    by a link out of the root right after the check. The open must fail, not follow it."""
    root = tmp_path / "root"
    store = open_store(root)
    store.put("shards/secret.txt", b"the dataset's own bytes")
    real_open_below = _nofollow_module.open_below

    def swap_then_open(root_dir: str, real: str, flags: int = os.O_RDONLY) -> int:
        if (root / "shards").is_dir() and not (root / "shards").is_symlink():
            (root / "shards").rename(root / "moved")
            (root / "shards").symlink_to(outside, target_is_directory=True)
        return real_open_below(root_dir, real, flags)

    monkeypatch.setattr(_nofollow_module, "open_below", swap_then_open)
    call = {
        "get": lambda: store.get("shards/secret.txt"),
        "get_range": lambda: store.get_range("shards/secret.txt", 0, 6),
        "head": lambda: store.head("shards/secret.txt"),
        "delete": lambda: store.delete("shards/secret.txt"),
    }[action]
    with pytest.raises(UnsafePathError, match="became a symlink"):
        call()
    assert (outside / "secret.txt").read_bytes() == b"secret bytes, not the dataset's"


def _plant(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":  # like /dev/zero (c 1 5): mknod needs root
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    else:
        path.mkdir()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "chardev", "folder"])
def test_only_regular_files_are_read(tmp_path: Path, kind: str) -> None:
    """A FIFO at a key hung every read for ever (the open waited for a writer), a device
    such as /dev/zero was read without end: anything but a regular file is now no object,
    refused without blocking and without opening a device, naming the key."""
    if kind == "chardev" and os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    root = tmp_path / "root"
    store = open_store(root)
    store.put("index/ok.parquet", b"ok")
    _plant(root / "index" / "part.parquet", kind)
    os.symlink(root / "index" / "part.parquet", root / "index" / "link.parquet")
    words = {"fifo": "a FIFO", "chardev": "a character device", "folder": "a folder"}[kind]
    for key in ("index/part.parquet", "index/link.parquet"):
        for call in (
            lambda k: store.get(k),
            lambda k: store.get_range(k, 0, 4),
            lambda k: store.get_ranges(k, [0], [4]),
            lambda k: store.head(k),
            lambda k: store.local_path(k),
            lambda k: store.map_local(k),
            lambda k: store.open_input(k),
        ):
            with pytest.raises(NotARegularFileError, match=f"is {words}, not a regular file") as e:
                call(key)
            assert isinstance(e.value, ObjectNotFoundError) and e.value.path == key
            assert e.value.kind == words
        assert not store.exists(key)
    assert [o.path for o in store.list("index/")] == ["index/ok.parquet"]
    if kind != "folder":
        # nothing can be created there: said so, not a lost race (ObjectExistsError)
        with pytest.raises(NotARegularFileError):
            store.put_if_absent("index/part.parquet", b"new")
        store.put("index/part.parquet", b"new")  # a put replaces it, as any object
        assert store.get("index/part.parquet") == b"new"
    assert store.local_path("index/missing.parquet") == (root / "index" / "missing.parquet")
    # a reader that takes a buffer reads the very file the store checked
    assert bytes(store.map_local("index/ok.parquet") or b"x") == b"ok"
    store.put("index/empty.parquet", b"")
    assert store.map_local("index/empty.parquet") == b""
    with pytest.raises(ObjectNotFoundError):
        store.map_local("index/missing.parquet")
    assert open_store(f"memory://{tmp_path.name}/x").map_local("a") is None
