"""A FIFO or a device node in place of one of a local dataset's files (`tar x`
recreates both): every read fails fast or treats the file as missing, never hangs.

Before the store opened files without blocking and refused anything but a regular file,
a FIFO as `_ferroload/latest`, a shard, a side index, an index part, a shard list or an
id run hung `open`, `get`, `verify`, `subset` or an append for ever; `/dev/zero` as
`latest` was a raw `MemoryError`, as an index part a raw `ArrowInvalid`.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ferroload_core import FerroloadError
from ferroload_format import Dataset, LayerWriter, Writer, _shard_lists
from ferroload_store import NotARegularFileError

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")

#: The operations tried, in the order of the outcomes in `CASES`.
OPS = ("open", "get", "verify", "subset", "append")
#: Where the planted file goes, and how each operation must end with it there: "ok"
#: (the file is not needed, or counts as missing and is worked around), "raises" (a
#: FerroloadError whose chain names the file), "report" (verify reports the file).
CASES: dict[str, tuple[str, str, str, str, str]] = {
    # the latest-version hint counts as missing: the listing finds the versions
    "latest": ("ok", "ok", "ok", "ok", "ok"),
    # the newest manifest is no object: the version before it is the latest; an
    # append cannot claim its number, and says why
    "manifest": ("ok", "ok", "ok", "ok", "raises"),
    "shard": ("ok", "raises", "report", "ok", "ok"),
    "side-index": ("ok", "ok", "report", "ok", "ok"),
    "index-part": ("ok", "raises", "report", "raises", "ok"),
    "shard-list": ("ok", "raises", "report", "ok", "ok"),
    # an unreadable run: appends check the parts in full instead
    "id-run": ("ok", "ok", "report", "ok", "ok"),
    "layer-part": ("ok", "raises", "report", "raises", "ok"),
}


def _commit(root: str, first: int, count: int) -> None:
    with Writer(root, "special", shard_size=1) as w:
        w.declare("blob", "bin")
        for i in range(first, first + count):
            w.add(f"s{i:04d}", {"blob": b"blob-%d-" % i * 20}, {"n": i})


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A local dataset with every kind of file: shards and side indexes, index parts,
    shard lists, sample-id runs, a layer's index part; its newest manifest (version 7)
    only adds samples, so the version before it still has the layer. Returns the root
    and the key of each file a case replaces."""
    root = tmp_path_factory.mktemp("special") / "ds"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_shard_lists, "MAX_INLINE_SHARDS", 2)
        for c in range(5):
            _commit(str(root), 2 * c, 2)
        ds = Dataset.open(str(root))
        lw = LayerWriter(ds, "derived", identity="v1", columns={"double": pa.int64()})
        rows = np.arange(len(ds), dtype=np.int64)
        lw.write_partition(0, rows, {"double": [2 * int(r) for r in rows]}, {})
        lw.commit(1)
        _commit(str(root), 10, 1)
    _shard_lists.forget_cached_lists()
    m = Dataset.open(str(root)).manifest
    assert m.version == 7 and m.shard_lists and m.id_runs and m.layers
    shard = m.shards[0]
    keys = {
        "latest": "_ferroload/latest",
        "manifest": f"_ferroload/versions/{m.version:010d}.json",
        "shard": shard.path,
        "side-index": shard.side_index,
        "index-part": m.index_parts[0].path,
        "shard-list": m.shard_lists[0].path,
        "id-run": m.id_runs[0].path,
        "layer-part": m.layers[0].index_parts[0].path,
    }
    for key in keys.values():
        assert (root / key).is_file(), key
    return root, keys


def _operations(root: str) -> dict[str, Callable[[], Any]]:
    def get() -> None:
        ds = Dataset.open(root)
        for i in range(len(ds)):
            ds[i]

    def append() -> None:
        with Writer(root, "special", shard_size=1) as w:
            w.declare("blob", "bin")
            w.add("new", {"blob": b"new"}, {"n": 100})

    return {
        "open": lambda: len(Dataset.open(root)),
        "get": get,
        "verify": lambda: Dataset.open(root).verify(),
        "subset": lambda: Dataset.open(root).subset("n >= 0 AND coalesce(double, 0) >= 0"),
        "append": append,
    }


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _plant(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:  # a character device like /dev/zero (c 1 5): needs root
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "chardev"])
@pytest.mark.parametrize("target", list(CASES))
def test_a_fifo_or_device_in_a_dataset_never_hangs_a_read(
    template: tuple[Path, dict[str, str]], tmp_path: Path, target: str, kind: str
) -> None:
    if kind == "chardev" and os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    source, keys = template
    key = keys[target]
    for op, expected in zip(OPS, CASES[target], strict=True):
        root = tmp_path / f"{op}-ds"
        shutil.copytree(source, root, symlinks=True)
        _plant(root / key, kind)
        run = _operations(str(root))[op]
        if expected == "raises":
            with pytest.raises(FerroloadError) as info:
                run()
            named = [e for e in _chain(info.value) if isinstance(e, NotARegularFileError)]
            assert named, f"{op}: {info.value!r} does not come from the planted file"
            assert named[0].path == key and key in str(named[0])
            assert ("FIFO" if kind == "fifo" else "character device") in str(named[0])
            continue
        result = run()
        if op == "verify":
            problems = [p for p in result.problems if Path(key).name in p.message]
            assert bool(problems) == (expected == "report"), (op, result.problems)
            assert result.ok == (expected != "report")
