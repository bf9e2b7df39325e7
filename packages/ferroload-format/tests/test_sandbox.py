"""The query sandbox (docs/format.md, "The query sandbox"): each attack of issue 13 that
once worked, through `subset`, `sql` and the connection itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import (
    Dataset,
    InvalidModalityError,
    QueryError,
    QueryTimeoutError,
    SchemaConflictError,
    UnsafeQueryError,
    Writer,
)

from .conftest import WriteFn


@pytest.fixture
def secret_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose `.tmp/` (DuckDB's default temp directory) holds a secret."""
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.csv").write_text("a,b\nsecret,1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _no_host_paths(message: str) -> None:
    for path in (os.getcwd(), str(Path.home())):
        assert path not in message


def _sql_refused(uri: str, write: WriteFn, query: str) -> str:
    """The message of the `UnsafeQueryError` that `sql(query)` over a fresh dataset must
    raise, checked to name no host path."""
    ds = write(uri, 3)
    with pytest.raises(UnsafeQueryError) as info:
        ds.sql(query)
    message = str(info.value)
    _no_host_paths(message)
    return message


TEMP_DIR_READS = [
    "SELECT * FROM read_csv('.tmp/secret.csv')",
    "SELECT * FROM read_csv_auto('.tmp/secret.csv')",
    "SELECT * FROM glob('.tmp/*')",
    "SELECT * FROM read_text('.tmp/secret.csv')",
    "SELECT * FROM '.tmp/secret.csv'",
    "SELECT * FROM sniff_csv('.tmp/secret.csv')",
]


@pytest.mark.parametrize("query", TEMP_DIR_READS)
def test_sql_cannot_read_the_temp_directory(
    local_uri: str, write: WriteFn, secret_cwd: Path, query: str
) -> None:
    message = _sql_refused(local_uri, write, query)
    assert "secret" not in message.replace("secret.csv", "")


@pytest.mark.parametrize(
    "where",
    [
        "(SELECT count(*) FROM read_csv('.tmp/secret.csv')) > 0",
        "EXISTS (SELECT * FROM glob('.tmp/*'))",
        "label IN (SELECT b FROM read_csv('.tmp/secret.csv'))",
    ],
)
def test_where_cannot_read_the_temp_directory(
    local_uri: str, write: WriteFn, secret_cwd: Path, where: str
) -> None:
    ds = write(local_uri, 3)
    with pytest.raises(UnsafeQueryError):
        ds.subset(where, return_indices=True)


HOST_FUNCTIONS = [
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_settings",
    "SELECT current_setting('temp_directory')",
    "SELECT current_setting('home_directory')",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM which_secret('s3://b/k', 's3')",
    "SELECT getenv('HOME')",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM pragma_version()",
    "SELECT version()",
    "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM query_table('samples')",
    "SELECT * FROM duckdb_functions()",
    "SELECT * FROM system.main.duckdb_settings()",
    "SELECT system.main.current_setting('temp_directory')",
    "SELECT * FROM memory.main.samples",
    "SELECT * FROM (WITH duckdb_settings AS (SELECT 1) SELECT 1), duckdb_settings",
    "SELECT (SELECT count(*) FROM duckdb_settings()) FROM samples",
    "SELECT * FROM samples WHERE label IN (SELECT 1 FROM duckdb_temporary_files())",
    "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
    "SELECT 'temp_directory'.current_setting()",
    'SELECT * FROM "duckdb_settings"()',
    "SELECT * FROM samples, LATERAL (SELECT * FROM duckdb_settings())",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM duckdb_views",
    "SELECT * FROM range((SELECT count(*) FROM duckdb_settings()))",
    "SELECT * FROM samples WHERE label IN (FROM duckdb_settings)",
    "DESCRIBE SELECT * FROM samples",
    "SUMMARIZE samples",
    "SELECT * FROM (SHOW TABLES)",
    "SELECT pg_sleep(100)",
]


@pytest.mark.parametrize("query", HOST_FUNCTIONS)
def test_sql_sees_no_settings_secrets_extensions_or_environment(
    local_uri: str, write: WriteFn, secret_cwd: Path, query: str
) -> None:
    assert "/.duckdb" not in _sql_refused(local_uri, write, query)


@pytest.mark.parametrize(
    "where",
    [
        "current_setting('temp_directory') IS NOT NULL",
        "(SELECT count(*) FROM duckdb_settings()) > 0",
        "(SELECT count(*) FROM duckdb_extensions()) > 0",
        "version() <> ''",
    ],
)
def test_where_sees_no_settings(local_uri: str, write: WriteFn, where: str) -> None:
    ds = write(local_uri, 3)
    with pytest.raises(UnsafeQueryError) as info:
        ds.subset(where, return_indices=True)
    _no_host_paths(str(info.value))


def test_the_sandbox_still_allows_ordinary_sql(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 10)
    got = ds.sql(
        "WITH c AS (SELECT label, count(*) AS n FROM samples GROUP BY label) "
        "SELECT c.label, c.n, upper(s.caption) AS cap FROM c JOIN samples s USING (label) "
        "WHERE s.sample_id IN (SELECT sample_id FROM samples WHERE score > 0.45) "
        "AND label IN (SELECT range FROM range(5)) ORDER BY s.sample_id"
    )
    assert got.column_names == ["label", "n", "cap"]
    assert got.num_rows == 5
    where = "label = (SELECT max(label) FROM samples) AND lower(caption) LIKE '%dog%'"
    assert ds.subset(where, return_indices=True).tolist() == [4]
    assert ds.sql("SELECT pg_typeof(label) AS t FROM samples LIMIT 1").to_pylist() == [
        {"t": "bigint"}
    ]


@pytest.mark.parametrize(
    "where",
    [
        "label = 1) UNION ALL SELECT -1 WHERE (true",
        "label = 1) UNION ALL SELECT 999999 WHERE (true",
        "label = 1) OR (true) UNION (SELECT 5",
        "true) GROUP BY _ferroload_position HAVING (true",
        "true) QUALIFY (true",
        "true) ORDER BY 1 DESC, (1",
        "label = 1)",
        ") OR (true",
    ],
)
def test_a_where_clause_cannot_close_the_wrappers_parenthesis(
    uri: str, write: WriteFn, where: str
) -> None:
    ds = write(uri, 6)
    with pytest.raises(UnsafeQueryError, match="single condition"):
        ds.subset(where, return_indices=True)


@pytest.mark.parametrize("where", ["(label = 1", "label IN (1, 2"])
def test_unbalanced_open_parentheses_are_query_errors(uri: str, write: WriteFn, where: str) -> None:
    ds = write(uri, 6)
    with pytest.raises(QueryError, match="left open"):
        ds.subset(where, return_indices=True)


def test_parentheses_inside_strings_identifiers_and_comments_do_not_count(
    uri: str, write: WriteFn
) -> None:
    ds = write(uri, 6)
    where = "(caption <> ')') AND (label = 1 OR \"label\" = 2) -- ) comment ("
    assert ds.subset(where, return_indices=True).tolist() == [1, 2]


def test_positions_are_checked_before_use(local_uri: str, write: WriteFn) -> None:
    from ferroload_format._query_text import check_positions

    for bad in ([-1, 1], [1, 999999], [2, 1], [1, 1]):
        with pytest.raises(UnsafeQueryError, match="not rows of the dataset"):
            check_positions(np.array(bad, dtype=np.int64), 6, "x", "u")
    check_positions(np.array([0, 5], dtype=np.int64), 6, "x", "u")


def test_a_long_query_is_interrupted_at_its_timeout(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 3)
    start = time.monotonic()
    with pytest.raises(QueryTimeoutError, match=r"timeout of 0\.5 s") as info:
        ds.subset(
            "label < (SELECT count(*) FROM range(1000000000000) r WHERE r.range % 7 = 3)",
            return_indices=True,
            timeout=0.5,
        )
    assert time.monotonic() - start < 10
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, QueryError)
    with pytest.raises(QueryTimeoutError, match="timeout"):
        ds.sql("SELECT count(*) FROM range(1000000000000) r WHERE r.range % 7 = 3", timeout=0.5)
    # the connection is gone, the dataset is not
    assert ds.subset("label = 1", return_indices=True).tolist() == [1]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True])
def test_bad_timeouts_are_refused(local_uri: str, write: WriteFn, timeout: object) -> None:
    ds = write(local_uri, 3)
    with pytest.raises(QueryError, match="timeout"):
        ds.sql("SELECT 1", timeout=timeout)  # type: ignore[arg-type]


def test_the_connection_has_no_temp_directory_and_a_memory_limit() -> None:
    from ferroload_format._sandbox import MEMORY_LIMIT, connect

    con = connect()
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('temp_directory', 'enable_external_access', 'lock_configuration', "
            "'autoload_known_extensions', 'allow_community_extensions', 'memory_limit')"
        ).fetchall()
    )
    assert settings["temp_directory"] == ""
    assert settings["enable_external_access"] == "false"
    assert settings["lock_configuration"] == "true"
    assert settings["autoload_known_extensions"] == "false"
    assert settings["allow_community_extensions"] == "false"
    assert settings["memory_limit"].replace(" ", "").replace(".0", "") == MEMORY_LIMIT


def test_the_connection_draws_no_progress_bar() -> None:
    """DuckDB draws a progress bar on standard output for a query past 2 s when it takes
    the session for an interactive one (no `__main__.__file__`: a REPL, `python -c`, a
    notebook; `ds.sql("SELECT * FROM range(1500000000)")` in a REPL did): it is off on
    every connection `subset` and `sql` use, and cannot be turned on again. Checked in
    `python -c`, where DuckDB's default is on (under pytest it is off)."""
    code = (
        "from ferroload_format._sandbox import connect\n"
        "con = connect()\n"
        "print(con.execute(\"SELECT current_setting('enable_progress_bar')\").fetchone()[0])\n"
        "try:\n"
        "    con.execute('SET enable_progress_bar = true')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ["False", "InvalidInputException"]


def test_a_dataset_with_columns_differing_by_case_is_refused_not_misread(
    local_uri: str, write: WriteFn
) -> None:
    from ferroload_format._query_text import check_case

    with pytest.raises(QueryError, match="'label' and 'Label' differ only by case"):
        check_case(["label", "Label"], local_uri)
    check_case(["label", "caption"], local_uri)


def test_a_view_runs_in_the_sandbox_too(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 10).subset("label = 1")
    with pytest.raises(UnsafeQueryError):
        ds.sql("SELECT * FROM duckdb_settings()")
    assert isinstance(ds, Dataset)
    assert ds.subset("true", return_indices=True).tolist() == [0, 1]


# ----------------------------------------------------------------- column names


def test_metadata_keys_differing_only_by_case_are_refused(uri: str) -> None:
    w = Writer(uri, "case")
    w.add("a", None, {"label": 1})
    with pytest.raises(SchemaConflictError, match=r"'Label'.*'label' only by case") as info:
        w.add("b", None, {"label": 1, "Label": 2})
    assert info.value.column == "Label"
    with pytest.raises(SchemaConflictError, match="only by case"):
        w.add("c", None, {"LABEL": 2})
    with pytest.raises(SchemaConflictError, match="only by case"):
        w.declare_column("LaBeL", pa.int64())
    w.add("d", None, {"label": 4})  # the refused samples left no trace
    w.close()
    ds = Dataset.open(uri)
    assert ds.schema.names.count("label") == 1
    assert "Label" not in ds.schema.names
    assert ds.subset("label = 4", return_indices=True).tolist() == [1]


def test_keys_of_one_sample_differing_only_by_case_are_refused(uri: str) -> None:
    w = Writer(uri, "case")
    with pytest.raises(SchemaConflictError, match="only by case"):
        w.add("a", None, {"label": 1, "Label": 2})
    with pytest.raises(SchemaConflictError, match="reserved"):
        w.add("a", None, {"Sample_ID": "x"})
    w.declare("image", "jpg")
    with pytest.raises(SchemaConflictError, match="only by case"):
        w.add("a", None, {"IMAGE": 1})
    w.declare_column("Score", pa.float64())
    with pytest.raises(SchemaConflictError, match="only by case"):
        w.add("a", None, {"score": 1.0})
    w.add("a", None, {"Caption": "x"})
    with pytest.raises(InvalidModalityError, match="'caption' differs from column 'Caption'"):
        w.declare("caption", "txt")
    w.abort()


@pytest.mark.parametrize(
    "key", ["__ferroload_position", "_ferroload_position", "___ferroload", "_FerroLoad_x", "SHARD"]
)
def test_reserved_names_are_refused(uri: str, key: str) -> None:
    w = Writer(uri, "reserved")
    with pytest.raises(SchemaConflictError, match="reserved"):
        w.add("a", None, {key: 1})
    with pytest.raises(SchemaConflictError, match="reserved"):
        w.declare_column(key, pa.int64())
    w.add("a", None, {"ferroload": 1, "x__ferroload": 2})  # only the prefix is reserved
    w.close()


@pytest.mark.parametrize(
    ("columns", "words"),
    [
        ({"Label": pa.int64()}, "a metadata column of the dataset \\('label'\\)"),
        ({"SHARD": pa.int64()}, "reserved"),
        ({"__ferroload_position": pa.int64()}, "reserved"),
        ({"flag": pa.bool_(), "FLAG": pa.bool_()}, "a column of this layer \\('flag'\\)"),
    ],
)
def test_layer_columns_follow_the_same_rules(
    uri: str, write: WriteFn, columns: dict[str, pa.DataType], words: str
) -> None:
    from ferroload_format import LayerWriter

    ds = write(uri, 3)
    with pytest.raises(SchemaConflictError, match=words):
        LayerWriter(ds, "extra", identity="e1", columns=columns)


def test_an_index_written_elsewhere_with_case_twins_gets_a_clear_error(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a writer from elsewhere (or an older ferroload) may not refuse the pair
    monkeypatch.setattr(Writer, "_check_new_keys", lambda *_: None)
    with Writer(local_uri, "twins") as w:
        w.add("a", None, {"label": 1, "Label": 2})
        w.add("b", None, {"label": 2, "Label": 1})
    monkeypatch.undo()
    ds = Dataset.open(local_uri)
    with pytest.raises(QueryError, match="'label' and 'Label' differ only by case"):
        ds.subset('"Label" = 2', return_indices=True)
    with pytest.raises(QueryError, match="'label' and 'Label' differ only by case"):
        ds.sql('SELECT "Label" FROM samples')
    assert ds.to_table(["Label"]).column("Label").to_pylist() == [2, 1]


def test_the_memory_limit_gives_a_clear_error(
    local_uri: str, write: WriteFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferroload_format import _sandbox

    ds = write(local_uri, 3)
    monkeypatch.setattr(_sandbox, "MEMORY_LIMIT", "32MiB")
    with pytest.raises(QueryError, match=r"memory limit \(32MiB\)"):
        ds.sql("SELECT list(range) AS l FROM range(50000000)")
