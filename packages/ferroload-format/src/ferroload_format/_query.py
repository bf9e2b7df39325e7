"""Sandboxed DuckDB over a dataset's index: WHERE clauses (`subset`) and SELECTs (`sql`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._errors import QueryError, UnsafeQueryError
from ferroload_format._index import IndexColumns, arrow_array

TABLE = "samples"
T = TypeVar("T")
_POS = "__ferroload_position"


def sandboxed_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files, the network or settings."""
    con = duckdb.connect(":memory:")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def _tokens(where: str) -> list[tuple[str, object]]:
    """(text, token type) of each token DuckDB sees in `where`."""
    tokens = duckdb.tokenize(where)
    ends = [pos for pos, _ in tokens[1:]] + [len(where)]
    return [(where[pos:end].strip(), kind) for (pos, kind), end in zip(tokens, ends, strict=True)]


def referenced_columns(tokens: list[tuple[str, object]], columns: list[str]) -> list[str]:
    """The index columns a clause mentions (so only those are loaded)."""
    words = {
        text.strip('"').lower()
        for text, kind in tokens
        if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword)
    }
    return [c for c in columns if c.lower() in words]


def where_positions(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    where: str,
    *,
    uri: str,
) -> npt.NDArray[np.int64]:
    """Positions (within `rows`, or the whole index) whose index row satisfies `where`.

    The clause runs over one in-memory table of the columns it mentions, layer columns
    included: `index` aligns them with the base rows by position (docs/format.md §10), so
    DuckDB never opens a file.

    Raises:
        UnsafeQueryError: the clause reaches for files, settings or a second statement.
        QueryError: DuckDB rejects the clause.
    """
    if not isinstance(where, str) or not where.strip():
        raise QueryError(f"the WHERE clause must be a non-empty string, got {where!r}", uri=uri)
    if "\x00" in where:
        raise UnsafeQueryError("the WHERE clause contains a NUL character", uri=uri)
    tokens = _tokens(where)
    if any(";" in text for text, kind in tokens if kind != duckdb.token_type.string_const):
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} must be a single condition: ';' would start a "
            "second statement",
            uri=uri,
        )
    query = f"SELECT {_POS} FROM {TABLE} WHERE (\n{where}\n) ORDER BY {_POS}"
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid WHERE clause {where!r}: {exc}", uri=uri) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} must be a single condition; it makes "
            f"{len(statements)} statements",
            uri=uri,
        )
    table = _index_table(index, rows, referenced_columns(tokens, index.column_names))
    result = _run(table, lambda con: con.execute(query).fetchnumpy()[_POS], uri=uri,
                  what=f"the WHERE clause {where!r}")  # fmt: skip
    return np.asarray(result, dtype=np.int64)


def select(
    index: IndexColumns, rows: npt.NDArray[np.int64] | None, query: str, *, uri: str
) -> pa.Table:
    """The result of one SELECT over the table `samples` (the index rows `rows`, or all);
    see `Dataset.sql`.

    Raises:
        UnsafeQueryError: the query is not a single SELECT, or reaches for files or settings.
        QueryError: DuckDB rejects the query.
    """
    if not isinstance(query, str) or not query.strip():
        raise QueryError(f"the query must be a non-empty string, got {query!r}", uri=uri)
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid query: {exc}", uri=uri) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kind = f" of type {statements[0].type.name}" if len(statements) == 1 else ""
        raise UnsafeQueryError(
            f"only a single SELECT over the table {TABLE!r} is allowed; the query makes "
            f"{len(statements)} statement(s){kind}",
            uri=uri,
        )
    # every column: a SELECT may name them in ways a token scan cannot see (*, COLUMNS(...))
    table = _index_table(index, rows, index.column_names, positions=False)
    result: pa.Table = _run(table, lambda con: con.sql(query).to_arrow_table(), uri=uri,
                            what="the query")  # fmt: skip
    return result


def _index_table(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    names: list[str],
    *,
    positions: bool = True,
) -> pa.Table:
    """The index columns `names` of `rows` (all rows when None) as the table a query reads,
    with a column of positions first unless `positions` is False."""
    n = index.manifest.num_samples if rows is None else len(rows)
    take = None if rows is None else arrow_array(rows)
    columns = {k: (v if take is None else v.take(take)) for k, v in index.columns(names).items()}
    if positions:
        columns = {_POS: arrow_array(np.arange(n, dtype=np.int64)), **columns}
    return pa.table(columns)


def _run(
    table: pa.Table, fetch: Callable[[duckdb.DuckDBPyConnection], T], *, uri: str, what: str
) -> T:
    """`fetch(con)` on a sandboxed connection where `table` is `samples`; DuckDB's errors
    become ours, naming `what`."""
    con = sandboxed_connection()
    try:
        con.register(TABLE, table)
        return fetch(con)
    except duckdb.PermissionException as exc:
        raise UnsafeQueryError(
            f"{what} tries to reach outside the dataset's index: {exc}", uri=uri
        ) from exc
    except duckdb.Error as exc:
        raise QueryError(f"DuckDB cannot evaluate {what}: {exc}", uri=uri) from exc
    finally:
        con.close()
