from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow.compute as pc
import pytest

from ferroload_format import Dataset, QueryError, SchemaConflictError, UnsafeQueryError, Writer

from .conftest import WriteFn


def test_where_matches_a_pyarrow_filter(uri: str, write: WriteFn) -> None:
    ds = write(uri, 60, shard_size=8192)
    got = ds.subset("label = 3 AND caption LIKE '%cat%'", return_indices=True)
    t = ds.to_table(["label", "caption"])
    mask = pc.and_(pc.equal(t["label"], 3), pc.match_substring(t["caption"], "cat"))
    assert got.tolist() == np.flatnonzero(mask.to_numpy(zero_copy_only=False)).tolist()
    assert got.dtype == np.int64
    view = ds.subset("label = 3 AND caption LIKE '%cat%'")
    assert [r["sample_id"] for r in view] == [f"s{i:05d}" for i in got]


def test_plain_duckdb_reads_the_index_glob(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 30)
    write(local_uri, 30, start=30)
    ds = Dataset.open(local_uri)
    expected = [
        ds[int(i)]["sample_id"]
        for i in ds.subset("label = 3 AND caption LIKE '%cat%'", return_indices=True)
    ]
    rows = duckdb.sql(
        f"SELECT sample_id FROM read_parquet('{local_uri}/index/part-*.parquet') "
        "WHERE label = 3 AND caption LIKE '%cat%' ORDER BY sample_id"
    ).fetchall()
    assert [r[0] for r in rows] == sorted(expected)
    assert duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{local_uri}/index/part-*.parquet')"
    ).fetchall() == [(60,)]


def test_modality_structs_nested_metadata_and_views(uri: str) -> None:
    with Writer(uri, "n") as w:
        w.declare("image", "jpg")
        w.declare("audio", "flac")
        for i in range(12):
            data = {"image": b"i" * (i + 1)}
            if i % 3 == 0:
                data["audio"] = b"a"
            w.add(
                f"x{i}", data, {"tags": ["cat"] if i % 2 else ["dog", "cat"], "src": {"w": i * 10}}
            )
    ds = Dataset.open(uri)
    assert ds.subset("audio.present", return_indices=True).tolist() == [0, 3, 6, 9]
    assert ds.subset("image.length > 10", return_indices=True).tolist() == [10, 11]
    assert ds.subset("list_contains(tags, 'dog')", return_indices=True).tolist() == [
        0,
        2,
        4,
        6,
        8,
        10,
    ]
    assert ds.subset("src.w >= 90", return_indices=True).tolist() == [9, 10, 11]
    view = ds.subset("audio.present")
    # a subset of a view numbers positions within the view
    assert view.subset("src.w > 30", return_indices=True).tolist() == [2, 3]
    assert [r["sample_id"] for r in view.subset("src.w > 30")] == ["x6", "x9"]
    assert ds.subset("sample_id IN ('x1', 'x5')", return_indices=True).tolist() == [1, 5]
    assert len(ds.subset("false")) == 0


@pytest.mark.parametrize(
    "where",
    [
        "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0",
        "EXISTS (SELECT * FROM read_text('/etc/hostname'))",
        "label IN (SELECT 1 FROM read_parquet('/tmp/*.parquet'))",
        "(SELECT count(*) FROM glob('/etc/*')) > 0",
    ],
)
def test_clauses_reaching_for_files_are_refused(uri: str, write: WriteFn, where: str) -> None:
    ds = write(uri, 3)
    with pytest.raises(UnsafeQueryError) as info:
        ds.subset(where)
    assert isinstance(info.value, PermissionError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "where",
    [
        "1=1; COPY samples TO '/tmp/stolen.csv'",
        "1=1; ATTACH '/tmp/x.duckdb' AS x",
        "true; SET enable_external_access = true",
        "true); DROP TABLE samples; SELECT (1",
        "1=1; INSTALL httpfs",
        "1=1; LOAD httpfs",
        "1=1; PRAGMA version",
    ],
)
def test_second_statements_are_refused(
    uri: str, write: WriteFn, where: str, tmp_path: Path
) -> None:
    ds = write(uri, 3)
    with pytest.raises(UnsafeQueryError, match="single condition"):
        ds.subset(where)
    assert not Path("/tmp/stolen.csv").exists()


def test_settings_cannot_be_changed_from_a_clause(uri: str, write: WriteFn) -> None:
    ds = write(uri, 3)
    with pytest.raises(QueryError):
        ds.subset("current_setting('enable_external_access') OR (SELECT 1 FROM (SET threads=1))")
    # the sandbox really is locked: even a direct connection check shows it
    from ferroload_format._query import sandboxed_connection

    con = sandboxed_connection()
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        con.execute("COPY (SELECT 1) TO '/tmp/ferroload-should-not-exist.csv'")
    assert not Path("/tmp/ferroload-should-not-exist.csv").exists()


@pytest.mark.parametrize("where", ["label ==== 3", "no_such_column = 1", "label = 'x' +", ""])
def test_bad_clauses_give_query_errors(uri: str, write: WriteFn, where: str) -> None:
    ds = write(uri, 3)
    with pytest.raises(QueryError) as info:
        ds.subset(where)
    assert isinstance(info.value, ValueError)


def test_only_referenced_columns_are_loaded(uri: str, write: WriteFn) -> None:
    write(uri, 10)
    ds = Dataset.open(uri)
    ds.subset("score > 0.5", return_indices=True)
    assert set(ds._index._cache) == {"score"}


def test_sql_runs_one_select_over_the_index_or_a_view(uri: str, write: WriteFn) -> None:
    ds = write(uri, 20)
    counts = ds.sql("SELECT label, count(*) AS n FROM samples GROUP BY label ORDER BY label")
    assert counts.to_pylist() == [{"label": k, "n": 4} for k in range(5)]
    view = ds.subset("label = 2")
    assert view.sql("SELECT sample_id, image.present AS p FROM samples").to_pylist() == [
        {"sample_id": f"s{i:05d}", "p": True} for i in (2, 7, 12, 17)
    ]
    assert view.sql("SELECT * FROM samples").column_names == list(ds.to_table().column_names)


@pytest.mark.parametrize(
    ("query", "error", "words"),
    [
        ("DROP TABLE samples", UnsafeQueryError, "single SELECT"),
        ("SELECT 1; SELECT 2", UnsafeQueryError, "single SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", UnsafeQueryError, "outside the dataset's index"),
        ("SELECT nope FROM samples", QueryError, "nope"),
        ("SELEC 1", QueryError, "invalid query"),
        ("", QueryError, "non-empty"),
    ],
)
def test_sql_refuses(local_uri: str, write: WriteFn, query: str, error: type, words: str) -> None:
    ds = write(local_uri, 3)
    with pytest.raises(error, match=words):
        ds.sql(query)


def _with_layer(uri: str, write: WriteFn) -> Dataset:
    """`write`'s dataset (label, caption, score) with a layer column `brightness`."""
    import pyarrow as pa

    from ferroload_format import LayerWriter

    ds = write(uri, 6)
    lw = LayerWriter(ds, "stats", identity="v1", columns={"brightness": pa.float64()})
    lw.write_partition(0, np.arange(6), {"brightness": [0.5] * 6}, {})
    return lw.commit(1)


#: A typo in a column name, through each door that runs a clause or a query.
TYPOS = {
    "subset": lambda ds: ds.subset("lable = 1"),
    "subset of a view": lambda ds: ds.subset("label < 3").subset("score > 0 AND lable = 1"),
    "indices": lambda ds: ds.subset("lable = 1", return_indices=True),
    "sql": lambda ds: ds.sql("SELECT sample_id FROM samples WHERE lable = 1"),
}


@pytest.mark.parametrize("door", sorted(TYPOS))
def test_unknown_column_lists_the_datasets_own_columns(
    local_uri: str, write: WriteFn, door: str
) -> None:
    ds = _with_layer(local_uri, write)
    with pytest.raises(QueryError) as info:
        TYPOS[door](ds)
    message = str(info.value)
    first = message.splitlines()[0]  # what the CLI prints
    assert 'Referenced column "lable" not found' in first
    assert "Did you mean 'label'?" in first
    assert (
        "The dataset's columns are sample_id, shard, image, label, caption, score, brightness."
        in first
    )
    assert "_ferroload" not in message  # no internal column, as a candidate or in context
    assert "Candidate bindings" not in message  # DuckDB's: only the columns it was given
    assert info.value.uri == ds.uri


def test_where_errors_point_into_the_clause(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 3)
    with pytest.raises(QueryError) as info:
        ds.subset("label = 1 AND\nscroe > 0")
    message = str(info.value)
    # the clause's own second line, with DuckDB's caret under the unknown name
    assert message.endswith("\n\nLINE 2: scroe > 0\n        ^^^^^")
    assert "Did you mean 'score'?" in message
    # an unfinished clause: DuckDB's pointer would show the query wrapped around it
    with pytest.raises(QueryError) as info:
        ds.subset("label =")
    assert str(info.value) == (
        "invalid WHERE clause 'label =': Parser Error: syntax error at the end of the clause"
    )


def test_a_column_named_like_the_internal_positions_cannot_shadow_them(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Writer(local_uri, "t") as w, pytest.raises(SchemaConflictError, match="reserved"):
        w.add("s0", None, {"__ferroload_position": 7})
    # a writer from elsewhere (or an older ferroload) may not refuse the name
    monkeypatch.setattr(Writer, "_check_new_keys", lambda *_: None)
    with Writer(local_uri, "t") as w:
        for i in range(4):
            w.add(f"s{i}", None, {"label": i, "__ferroload_position": 7})
    monkeypatch.undo()
    ds = Dataset.open(local_uri)
    assert ds.subset("label >= 2", return_indices=True).tolist() == [2, 3]
    assert ds.subset("__ferroload_position = 7 AND label = 1", return_indices=True).tolist() == [1]
    # writers refuse `_ferroload…` names; an index written elsewhere may still hold one
    from ferroload_format._query_text import position_column

    assert position_column(["label", "__ferroload_position"]) == "_ferroload_position"
    assert position_column(["label", "_FERROLOAD_Position"]) == "__ferroload_position"


def test_a_clause_with_non_ascii_text_finds_its_columns(uri: str) -> None:
    # DuckDB's tokenizer counts UTF-8 bytes: the columns after 'é…' were once missed
    with Writer(uri, "t") as w:
        for i in range(6):
            w.add(f"s{i}", None, {"label": i, "caption": "é" * i})
    ds = Dataset.open(uri)
    where = "caption IN ('éé', 'éééé') AND (label > 1)"
    assert ds.subset(where, return_indices=True).tolist() == [2, 4]
