"""The `index/part-*` glob after kill -9 (docs/format.md §7): at any moment it shows
exactly the rows of some committed version, each once (it may lag behind the latest), or,
while an overwrite replaces its files, DuckDB refuses it (a barrier file that is not
Parquet); never a row twice, never rows of no version.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from ferroload_format import Dataset, Writer, gc
from ferroload_format._paths import INDEX_DIR, merged_part_path, part_path, version_path
from ferroload_format._versions import list_versions
from ferroload_store import open_store

from .conftest import spawn_writer


def append(uri: str, first: int, count: int, mode: str = "append") -> None:
    with Writer(uri, "concurrent", shard_size=2048, mode=mode) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(first, first + count):
            w.add(f"s{i:05d}", {"image": f"payload-{i}".encode() * 20}, {"label": i % 5})


def glob_rows(root: str) -> Counter[str] | None:
    """The sample ids the plain DuckDB glob shows, counted; None when DuckDB refuses the
    glob because an overwrite's barrier is in it (the only error allowed)."""
    try:
        rows = duckdb.sql(
            f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet')"
        ).fetchall()
    except duckdb.Error as exc:
        error = str(exc)
    else:
        return Counter(r[0] for r in rows)
    barriers = list(Path(root, "index").glob("part-*-overwriting.parquet"))
    assert barriers, f"the glob fails without an overwrite's barrier: {error}"
    assert "overwriting" in error
    return None


def versions_rows(uri: str) -> dict[int, Counter[str]]:
    store = open_store(uri)
    return {
        v: Counter(Dataset.open(uri, version=v).column("sample_id").to_pylist())
        for v in list_versions(store)
    }


def check_glob(uri: str, *, where: str) -> int | None:
    """The committed version whose rows the glob shows (None: refused by a barrier);
    fails when it shows a row twice or rows of no committed version."""
    shown = glob_rows(uri)
    if shown is None:
        return None
    twice = [k for k, n in shown.items() if n > 1]
    assert not twice, f"{where}: the glob shows {len(twice)} rows twice, e.g. {twice[:3]}"
    for v, rows in versions_rows(uri).items():
        if rows == shown:
            return v
    raise AssertionError(f"{where}: the glob's {sum(shown.values())} rows are no version's")


def settled(uri: str) -> None:
    """After the next writer or gc the glob shows the latest version, with no barrier."""
    latest = Dataset.open(uri).version
    assert check_glob(uri, where="after recovery") == latest


@pytest.mark.parametrize("point", ["committed", "merged-published", "published"])
def test_a_merge_killed_at_any_step_leaves_the_glob_a_version(local_uri: str, point: str) -> None:
    append(local_uri, 0, 10)
    append(local_uri, 10, 5)  # merges part 1
    proc = spawn_writer(local_uri, 100, 25, "--crash-at", point)  # merges again
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    ds = Dataset.open(local_uri)
    assert ds.version == 3 and ds.manifest.index_parts[-1].since == 1
    assert check_glob(local_uri, where=point) in {2, 3}
    append(local_uri, 200, 1)  # the next writer publishes what the dead one committed
    settled(local_uri)
    assert len(Dataset.open(local_uri)) == 41 and Dataset.open(local_uri).verify().ok


@pytest.mark.parametrize(
    ("point", "recover"),
    [
        ("committed", "append"),
        ("barrier-put", "append"),
        ("retired", "append"),
        ("retired", "gc"),
        ("published", "gc"),
    ],
)
def test_an_overwrite_killed_at_any_step_never_shows_two_versions(
    local_uri: str, point: str, recover: str
) -> None:
    for first, count in ((0, 10), (10, 5), (15, 3), (18, 30)):
        append(local_uri, first, count)
    assert len(list(Path(local_uri, "index").iterdir())) == 4  # one file a version
    proc = spawn_writer(local_uri, 500, 7, "--crash-at", point, "--mode", "overwrite")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    shown = check_glob(local_uri, where=point)
    # before the barrier it lags at version 4; then DuckDB refuses it until it is done
    assert shown == {"committed": 4, "published": 5}.get(point)
    if recover == "append":
        append(local_uri, 600, 2)
    else:
        gc(local_uri, grace=timedelta(0))
    settled(local_uri)
    assert len(Dataset.open(local_uri)) == (9 if recover == "append" else 7)
    for v in (1, 4, 5):  # every version stays readable at its place
        assert Dataset.open(local_uri, version=v).verify().ok


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_9_at_random_moments_of_appends_merges_and_overwrites(local_uri: str) -> None:
    """Writers appending 1-3 rows per commit (merging at almost every commit), every 7th
    commit an overwrite, killed at random moments; the glob is checked after every kill."""
    append(local_uri, 0, 4)
    rng = random.Random(31)
    landed: Counter[str] = Counter()
    first = 1000
    for trial in range(6):
        count = 1 + trial % 3
        proc = spawn_writer(
            local_uri, first, count, "--loop", "500", "--overwrite-every", "7", "--prefix", "k"
        )
        # past the interpreter's start-up (the first commit), then a random moment
        versions = Path(local_uri, "_ferroload", "versions")
        start = len(list(versions.iterdir()))
        deadline = time.monotonic() + 60
        while len(list(versions.iterdir())) == start and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 1.2))
        proc.kill()
        proc.communicate(timeout=60)
        first += 500 * count
        shown = check_glob(local_uri, where=f"trial {trial}")
        landed["barrier" if shown is None else "version"] += 1
    # how many commits the kills interrupted is up to the machine; every check held
    assert Dataset.open(local_uri).version > 6
    append(local_uri, 10**6, 1)
    settled(local_uri)
    gc(local_uri, grace=timedelta(0))
    settled(local_uri)
    assert Dataset.open(local_uri).verify().ok


def test_a_glob_left_with_rows_twice_by_an_older_ferroload_is_repaired(local_uri: str) -> None:
    """A dataset written before format 1.4 merged inside the glob; a writer killed between
    its publish and its retirement left the merged-away part there (the rows show twice).
    The next append retires it before its own merge covers those versions; gc too."""
    for recover in ("append", "gc"):
        root = Path(local_uri)
        shutil.rmtree(root, ignore_errors=True)
        append(local_uri, 0, 10)
        append(local_uri, 10, 5)  # merges part 1 into a part outside the glob …
        raw = json.loads(Path(root, version_path(2)).read_bytes())
        part = raw["index_parts"][-1]
        assert part["path"] == merged_part_path(2)
        # … rewritten as the older format had it: the merged part at index/part-2
        shutil.copy(root / merged_part_path(2), root / part_path(2))
        (root / merged_part_path(2)).unlink()
        part["path"] = part_path(2)
        del part["own_staged"]
        Path(root, version_path(2)).write_text(json.dumps(raw))
        assert glob_rows(local_uri) == Counter({f"s{i:05d}": 2 if i < 10 else 1 for i in range(15)})
        if recover == "append":
            append(local_uri, 100, 1)  # too small to merge: it retires after its publish
            settled(local_uri)
            append(local_uri, 200, 40)  # merges everything, the older format's part too
        else:
            gc(local_uri, grace=timedelta(0))
        settled(local_uri)
        for v in list_versions(open_store(local_uri)):
            assert Dataset.open(local_uri, version=v).verify().ok
        assert {p.name for p in Path(root, INDEX_DIR).iterdir()} >= {"part-0000000002.parquet"}
