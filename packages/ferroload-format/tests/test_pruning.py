"""WHERE clauses row group by row group (`_query._RowGroupScan`) and the row groups the
Parquet statistics let them skip (`_pruning`): same positions as the whole-column path,
fewer bytes for a selective clause."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest

from ferroload_format import Dataset, QueryError, QueryTimeoutError, Writer, _pruning
from ferroload_format._pruning import Pruner, ScanStats
from ferroload_format._query import where_positions
from ferroload_format._sandbox import connect, parse

#: Rows of the test dataset, its row group size, and the batch size the scans use.
N, GROUP, BATCH = 1500, 50, 200


def _meta(i: int) -> dict[str, Any]:
    score = float("nan") if i % 37 == 0 else (None if i % 41 == 0 else (i % 97) / 10 - 3)
    return {
        "rank": i,  # increases with the row: prunes well
        "label": (i * 7) % 13,  # every value in every row group: prunes nothing
        "delta": 700 - i,
        "score": score,
        "caption": f"{'é' if i % 5 == 0 else 'a'}{i // 100:03d}",
        "flag": i % 400 < 60,
        "sparse": i if (i // 150) % 3 == 0 else None,  # whole row groups of nulls
    }


def _write(uri: str, n: int = N, *, parts: int = 2) -> Dataset:
    """`n` samples in `parts` appends (index parts), `GROUP` rows per row group."""
    bounds = np.linspace(0, n, parts + 1).astype(int)
    for lo, hi in itertools.pairwise(bounds):
        with Writer(uri, "pruning", row_group_size=GROUP, shard_size=1 << 16) as w:
            w.declare("image", "jpg")
            for i in range(lo, hi):
                w.add(f"s{i:05d}", {"image": b"x" * (1 + i % 300)}, _meta(i))
    return Dataset.open(uri)


@pytest.fixture
def scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scan datasets above `BATCH` rows row group by row group, `BATCH` rows per call."""
    monkeypatch.setattr(_pruning, "BATCH_ROWS", BATCH)


def _scanned(ds: Dataset, where: str, **kwargs: Any) -> tuple[list[int], ScanStats]:
    stats = ScanStats()
    got = where_positions(ds._index, None, where, uri=ds.uri, stats=stats, **kwargs)
    return got.tolist(), stats


def _whole(ds: Dataset, where: str, rows: npt.NDArray[np.int64] | None = None) -> list[int]:
    """The whole-column path, for comparison; on a dataset of its own, whose column cache
    the scans do not see."""
    other = _reference.setdefault(ds.uri, Dataset.open(ds.uri))
    batch, _pruning.BATCH_ROWS = _pruning.BATCH_ROWS, 1 << 62
    try:
        got: list[int] = where_positions(other._index, rows, where, uri=ds.uri).tolist()
    finally:
        _pruning.BATCH_ROWS = batch
    return got


_reference: dict[str, Dataset] = {}


def _constant(rng: random.Random, column: str) -> str:
    if column == "caption":
        return (
            "'"
            + rng.choice(["a", "é", "a00", "a007", "é010", "b", ""])
            + f"{rng.randint(0, 15):03d}'"
        )
    value = rng.uniform(-20, 1600) if column != "score" else rng.uniform(-5, 8)
    forms = [str(int(value)), f"{value:.1f}", f"{value:.3e}", str(-abs(int(value)))]
    return rng.choice(forms)


def _term(rng: random.Random) -> str:
    column = rng.choice(["rank", "label", "delta", "score", "caption", "sparse", "image.length"])
    c = _constant(rng, column)
    kind = rng.randrange(9)
    if kind == 0:
        return f"{column} BETWEEN {c} AND {_constant(rng, column)}"
    if kind == 1:
        return f"{column} IN ({', '.join(_constant(rng, column) for _ in range(3))})"
    if kind == 2:
        return f"{column} IS {rng.choice(['', 'NOT '])}NULL"
    if kind == 3:
        return rng.choice(["flag", "NOT flag", "flag = true", "flag <> false"])
    if kind == 4:
        return f"({column} < {c} OR rank % 7 = 3)"  # an OR: not pruned
    if kind == 5:
        return f"{c} {rng.choice(['<', '>=', '='])} {column}"  # the constant first
    if kind == 6 and column != "caption":
        return f"abs({column}) < {c}"  # a function: not pruned
    return f"{column} {rng.choice(['=', '<>', '<', '<=', '>', '>='])} {c}"


@pytest.mark.slow
@pytest.mark.usefixtures("scan")
def test_pruning_never_changes_the_answer(tmp_path: Path) -> None:
    ds = _write(str(tmp_path / "ds"))
    rng = random.Random(16)
    picks = np.random.default_rng(16)
    skipped = 0
    for i in range(120):
        where = " AND ".join(_term(rng) for _ in range(rng.randint(1, 3)))
        got, stats = _scanned(ds, where)
        assert got == _whole(ds, where), where
        assert stats.groups_read + stats.groups_skipped == stats.row_groups == N // GROUP
        skipped += stats.groups_skipped
        if i % 4 == 0:  # a view of random rows: batches of rows, pruned the same way
            rows = picks.choice(N, int(picks.integers(1, 600)), replace=bool(i % 8))
            if i % 3 == 0:
                rows.sort()
            fresh = Dataset.open(ds.uri)
            found = where_positions(fresh._index, rows, where, uri=ds.uri).tolist()
            assert found == _whole(ds, where, rows), (where, rows.tolist())
    assert skipped > 120 * 5  # the statistics did prune, a lot


@pytest.mark.usefixtures("scan")
def test_a_selective_clause_reads_fewer_row_groups_and_bytes(uri: str) -> None:
    ds = _write(uri)
    counts = {}
    _scanned(ds, "rank < 0")  # reads the parts' footers, and no row group
    for where in ("rank < 10", "label >= 0"):
        before = ds.store.stats.bytes_read
        got, stats = _scanned(ds, where)
        counts[where] = (stats, ds.store.stats.bytes_read - before)
        assert got == _whole(ds, where)
    selective, selective_bytes = counts["rank < 10"]
    everything, everything_bytes = counts["label >= 0"]
    assert (selective.groups_read, selective.groups_skipped) == (1, N // GROUP - 1)
    assert (everything.groups_read, everything.groups_skipped) == (N // GROUP, 0)
    assert everything.rows_read == N and selective.rows_read == GROUP
    assert selective.bytes_read * 10 < everything.bytes_read
    # what the store fetched: a local part is mapped (not counted), and S3 reads through
    # the block cache (4 MiB blocks: the first read brought in all of this small part)
    if ds.uri.startswith("memory://"):
        assert selective_bytes * 5 < everything_bytes
    assert everything.batches == N // BATCH + 1  # parts' groups share batches


@pytest.mark.usefixtures("scan")
def test_clauses_that_need_the_whole_table_or_prune_everything(tmp_path: Path) -> None:
    ds = _write(str(tmp_path / "ds"))
    # nothing left to read: DuckDB still binds the clause once, over no rows
    got, stats = _scanned(ds, "rank < 0")
    assert (got, stats.groups_read, stats.batches) == ([], 0, 1)
    with pytest.raises(QueryError, match='"nope" not found'):
        _scanned(ds, "rank < 0 AND nope = 1")
    assert _scanned(ds, "sparse IS NOT NULL AND sparse < 0")[0] == []
    # no column at all: positions only, batch by batch
    got, stats = _scanned(ds, "true")
    assert got == list(range(N)) and stats.bytes_read == 0
    # a subquery over `samples` sees every row, not one batch's (it loads whole columns)
    where = "label = (SELECT max(label) FROM samples) AND rank > (SELECT avg(rank) FROM samples)"
    assert _scanned(ds, where)[0] == _whole(ds, where) != []
    # a cached column is used as it is
    assert _scanned(ds, "label = 3")[1].row_groups == 0


@pytest.mark.usefixtures("scan")
def test_the_timeout_covers_every_batch(tmp_path: Path) -> None:
    ds = _write(str(tmp_path / "ds"))
    slow = "rank >= 0 AND (SELECT count(*) FROM range(1000000000000) r WHERE r.range % 7 = 3) > 0"
    with pytest.raises(QueryTimeoutError):  # a subquery: the whole path, one call
        _scanned(ds, slow, timeout=0.3)
    # eight batches of a few milliseconds each: the time DuckDB took adds up
    slow = "rank >= 0 AND length(repeat(caption, 20000)) > 0"
    with pytest.raises(QueryTimeoutError):
        _scanned(ds, slow, timeout=0.001)
    assert len(_scanned(ds, slow)[0]) == N  # the same clause, given the time


@pytest.mark.parametrize(
    ("where", "tests"),
    [
        ("rank < 3", 1),
        ("3 > rank AND label = 1 AND caption >= 'a'", 3),
        ("rank BETWEEN 1 AND 3", 1),
        ("rank BETWEEN 1 AND 3.5", 0),  # two classes of constant: DuckDB binds a third type
        ("rank IN (1, 2, NULL)", 1),
        ("rank IN (1, 2.5)", 0),
        ("rank < 3 OR label = 1", 0),
        ("samples.rank < 3", 0),
        ("image.length > 5 AND IMAGE.Length < 9", 2),
        ("image.present AND flag", 2),
        ("sparse IS NULL AND image.length IS NULL", 1),  # null counts: top-level columns
        ("rank = '3'", 0),  # a string for a number: cast by DuckDB, not pruned
        ("rank < 99999999999999999999", 0),  # beyond int64
        ("score < 1e3 AND score = -.5", 2),
        ("NOT (rank < 3)", 0),
        ("rank < CAST(3 AS BIGINT)", 0),
    ],
)
def test_which_conjuncts_prune(tmp_path: Path, where: str, tests: int) -> None:
    ds = _write(str(tmp_path / "ds"), 10, parts=1)
    node = parse(connect(), f"SELECT p FROM samples WHERE ({where})")
    assert len(Pruner(node["where_clause"], ds._index.schema).tests) == tests


@pytest.mark.usefixtures("scan")
def test_views_and_layer_columns_run_in_batches_of_rows(tmp_path: Path) -> None:
    from ferroload_format import LayerWriter

    ds = _write(str(tmp_path / "ds"))
    lw = LayerWriter(ds, "extra", identity="e1", columns={"bright": pa.float64()})
    covered = N - 130  # the layer leaves the last rows null
    lw.write_partition(0, np.arange(covered), {"bright": [i % 11 / 10 for i in range(covered)]}, {})
    ds = lw.commit(1)
    rng = np.random.default_rng(5)
    views = {
        "shuffled": rng.permutation(N)[:700],
        "sorted": np.sort(rng.choice(N, 900, replace=False)),
        "small": np.array([1400, 3, 77]),
        "repeats": np.array([900, 5, 5, 1499, 3, 3, 250]),
        "sorted repeats": np.array([3, 3, 5, 250, 250, 900, 1499]),
    }
    clauses = {  # clause: whether it prunes (on a base column)
        "label = 3 AND bright >= 0.5": False,
        "bright IS NULL": False,
        "true": False,
        "caption < 'a005'": True,
        "rank < 300 AND bright >= 0.5": True,
        "rank >= 1400 OR bright < 0.2": False,
        "rank BETWEEN 1000 AND 1100 AND label > 5": True,
        "rank < 0": True,
    }
    for where, prunes in clauses.items():
        got, stats = _scanned(ds, where)
        assert got == _whole(ds, where), where
        assert stats.groups_read == 0 or "bright" not in where
        assert (stats.groups_skipped > 0) == prunes, where
        for name, rows in views.items():
            fresh = Dataset.open(ds.uri)
            expected = _whole(ds, where, rows)
            view_stats = ScanStats()
            found = where_positions(fresh._index, rows, where, uri=ds.uri, stats=view_stats)
            assert found.tolist() == expected, (name, where)
            assert fresh._index._cache == {}  # no whole column loaded
            assert (view_stats.groups_skipped > 0) == prunes, where
            if prunes:
                assert view_stats.rows_read < len(rows) or len(rows) < 10
            else:
                assert view_stats.rows_read == len(rows)
                assert view_stats.batches == max(1, -(-len(rows) // BATCH))
