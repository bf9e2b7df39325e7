"""Sandboxed DuckDB over a dataset's index: WHERE clauses (`subset`) and SELECTs (`sql`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format import _pruning, _sandbox
from ferroload_format._errors import QueryError, QueryTimeoutError, UnsafeQueryError
from ferroload_format._index_arrays import arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._pruning import Pruner, ScanStats
from ferroload_format._query_scan import Scan
from ferroload_format._query_text import (
    check_case,
    check_one_expression,
    check_positions,
    clause_tokens,
    describe_error,
    is_plain_where,
    position_column,
    referenced_columns,
)
from ferroload_format._sandbox import DEFAULT_TIMEOUT, TABLE

T = TypeVar("T")


def sandboxed_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files, the network or settings."""
    return _sandbox.connect()


def where_positions(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    where: str,
    *,
    uri: str,
    timeout: float = DEFAULT_TIMEOUT,
    stats: ScanStats | None = None,
) -> npt.NDArray[np.int64]:
    """Positions (within `rows`, or the whole index) whose index row satisfies `where`.

    The clause reads only the columns it mentions, and never a file itself: it is one
    expression, its parentheses balance, and DuckDB's parse of the query around it must be
    that query's own WHERE and nothing more. It runs one of three ways (`_way`):

    - By row groups (an index of more than `_pruning.BATCH_ROWS` rows, queried whole, on
      base columns): the base index parts are read a batch of row groups at a time
      (about `BATCH_ROWS` rows per DuckDB call, on one sandboxed connection), so memory is
      one batch plus the result; row groups whose Parquet statistics prove a conjunct of
      the clause false are not read at all (see `_pruning`).
    - By rows (the same size of index, for a view, i.e. `rows` given, or a clause on a
      layer column): batches of `BATCH_ROWS` rows (a view's in ascending order) read
      through `IndexColumns.take`, which reads only the row groups holding them; rows
      of base row groups that the statistics rule out (on base columns) are left out.
    - Whole columns (a small index, columns already loaded whole, or a clause with a
      subquery, which reads `samples` whole): one in-memory table of the columns, layer
      columns aligned with the base rows by position (docs/format.md §10), loaded
      through `index` and cached there.

    All give the same positions: pruning only skips row groups where no row can match.
    (A clause that raises on some value, e.g. a failing cast, may not raise when that
    value sits in a skipped row group.) `timeout` bounds the time DuckDB takes, over all
    batches (not the reads). `stats`, if given, counts the row groups, rows and bytes
    read and skipped (bytes and row groups: by row groups only).

    Raises:
        UnsafeQueryError: the clause reaches for files, settings or a second statement.
        QueryTimeoutError: it runs longer than `timeout` seconds.
        QueryError: DuckDB rejects the clause.
    """
    if not isinstance(where, str) or not where.strip():
        raise QueryError(f"the WHERE clause must be a non-empty string, got {where!r}", uri=uri)
    seconds = _timeout(timeout, uri)
    if "\x00" in where:
        raise UnsafeQueryError("the WHERE clause contains a NUL character", uri=uri)
    tokens = clause_tokens(where)
    check_one_expression(where, tokens, uri)
    columns = index.column_names
    pos = position_column(columns)
    query = f"SELECT {pos} FROM {TABLE} WHERE (\n{where}\n) ORDER BY {pos}"
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        message = describe_error(exc, columns, where=where)
        raise QueryError(f"invalid WHERE clause {where!r}: {message}", uri=uri) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} must be a single condition; it makes "
            f"{len(statements)} statements",
            uri=uri,
        )
    names = referenced_columns(tokens, columns)
    check_case(names, uri)

    def check(node: dict[str, Any]) -> None:
        if not is_plain_where(node, pos):
            raise UnsafeQueryError(
                f"the WHERE clause {where!r} must be a single condition, not a query of its "
                "own (a set operation, grouping or ordering after it)",
                uri=uri,
            )

    def fetch(con: duckdb.DuckDBPyConnection) -> npt.NDArray[np.int64]:
        return np.asarray(con.execute(query).fetchnumpy()[pos], dtype=np.int64)

    with _sandboxed(query, uri=uri, what=f"the WHERE clause {where!r}", columns=columns,
                    where=where, check=check, timeout=seconds) as (con, node):  # fmt: skip
        clause = node["where_clause"]
        way = _way(index, rows, names, clause)
        n = index.manifest.num_samples if rows is None else len(rows)
        if way == "row groups":
            scan = Scan(con, index, names, pos, fetch, timeout=seconds)
            positions = scan.row_groups(Pruner(clause, index.schema), stats or ScanStats())
        elif way == "rows":
            scan = Scan(con, index, names, pos, fetch, timeout=seconds)
            base = pa.schema([f for f in index.schema if index.layer_of(f.name) is None])
            positions = scan.rows(rows, Pruner(clause, base), stats or ScanStats())
        else:
            table = _index_table(index, rows, names, positions=pos)
            con.register(TABLE, table)
            positions = _sandbox.run(con, fetch, timeout=seconds)
            n = table.num_rows
    check_positions(positions, n, where, uri)
    return positions


def _way(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    names: Sequence[str],
    clause: dict[str, Any],
) -> str:
    """How a clause runs (see `where_positions`): by "row groups" of the base parts, by
    "rows" (batches of rows read through `IndexColumns.take`), or over "whole" columns."""
    cache: dict[str, Any] = getattr(index, "_cache", {})
    if (
        index.manifest.num_samples <= _pruning.BATCH_ROWS
        or (names and all(n in cache for n in names))
        or _pruning.has_subquery(clause)
    ):
        return "whole"
    if rows is None and not any(index.layer_of(n) is not None for n in names):
        return "row groups"
    return "rows"


def select(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    query: str,
    *,
    uri: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> pa.Table:
    """The result of one SELECT over the table `samples` (the index rows `rows`, or all);
    see `Dataset.sql`.

    Raises:
        UnsafeQueryError: the query is not a single SELECT, or reaches for files or settings.
        QueryTimeoutError: it runs longer than `timeout` seconds.
        QueryError: DuckDB rejects the query.
    """
    if not isinstance(query, str) or not query.strip():
        raise QueryError(f"the query must be a non-empty string, got {query!r}", uri=uri)
    seconds = _timeout(timeout, uri)
    columns = index.column_names
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        message = _sandbox.scrub(describe_error(exc, columns))
        raise QueryError(f"invalid query: {message}", uri=uri) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kind = f" of type {statements[0].type.name}" if len(statements) == 1 else ""
        raise UnsafeQueryError(
            f"only a single SELECT over the table {TABLE!r} is allowed; the query makes "
            f"{len(statements)} statement(s){kind}",
            uri=uri,
        )
    # every column: a SELECT may name them in ways a token scan cannot see (*, COLUMNS(...))
    check_case(columns, uri)
    table = _index_table(index, rows, columns)
    result: pa.Table = _run(table, query, lambda con: con.sql(query).to_arrow_table(),
                            uri=uri, what="the query", columns=columns,
                            timeout=seconds)  # fmt: skip
    return result


def _timeout(timeout: object, uri: str) -> float:
    try:
        return _sandbox.check_timeout(timeout)
    except ValueError as exc:
        raise QueryError(str(exc), uri=uri) from exc


def _index_table(
    index: IndexColumns,
    rows: npt.NDArray[np.int64] | None,
    names: list[str],
    *,
    positions: str | None = None,
) -> pa.Table:
    """The index columns `names` of `rows` (all rows when None) as the table a query reads,
    with a column of positions named `positions` first unless it is None."""
    n = index.manifest.num_samples if rows is None else len(rows)
    take = None if rows is None else arrow_array(rows)
    columns = {k: (v if take is None else v.take(take)) for k, v in index.columns(names).items()}
    if positions is not None:
        columns = {positions: arrow_array(np.arange(n, dtype=np.int64)), **columns}
    return pa.table(columns)


def _run(
    table: pa.Table,
    query: str,
    fetch: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    uri: str,
    what: str,
    columns: Sequence[str],
    timeout: float,
) -> T:
    """`fetch(con)` on a sandboxed connection where `table` is `samples` (see
    `_sandboxed`)."""
    with _sandboxed(query, uri=uri, what=what, columns=columns, timeout=timeout) as (con, _):
        con.register(TABLE, table)
        return _sandbox.run(con, fetch, timeout=timeout)


@contextmanager
def _sandboxed(
    query: str,
    *,
    uri: str,
    what: str,
    columns: Sequence[str],
    timeout: float,
    where: str | None = None,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> Iterator[tuple[duckdb.DuckDBPyConnection, dict[str, Any]]]:
    """A sandboxed connection and DuckDB's parse of `query`, once that parse passed the
    sandbox's checks (and `check`, if given), for the caller to register `samples` and run
    `query` (through `_sandbox.run`). DuckDB's errors, then and in the body, become ours,
    naming `what`, told in terms of the dataset's `columns` (and of the WHERE clause
    `where`, if that is what runs: see `describe_error`), without host paths."""
    con = sandboxed_connection()
    try:
        node = _sandbox.parse(con, query)
        if check is not None:
            check(node)
        _sandbox.check_names(node)
        yield con, node
    except _sandbox.RefusedError as exc:
        raise UnsafeQueryError(
            f"{what} tries to reach outside the dataset's index: {exc} (the query "
            f"sandbox allows the table {TABLE!r} and DuckDB's functions on data)",
            uri=uri,
        ) from exc
    except _sandbox.TimedOutError as exc:
        raise QueryTimeoutError(
            f"{what} ran longer than the timeout of {timeout:g} s and was interrupted; "
            "narrow it, or pass a larger timeout=",
            uri=uri,
        ) from exc
    except duckdb.OutOfMemoryException as exc:
        raise QueryError(
            f"{what} needs more than the query sandbox's memory limit "
            f"({_sandbox.MEMORY_LIMIT}); narrow it",
            uri=uri,
        ) from exc
    except duckdb.PermissionException as exc:
        message = _sandbox.scrub(describe_error(exc, columns, where=where))
        raise UnsafeQueryError(
            f"{what} tries to reach outside the dataset's index: {message}", uri=uri
        ) from exc
    except duckdb.Error as exc:
        message = _sandbox.scrub(describe_error(exc, columns, where=where))
        raise QueryError(f"DuckDB cannot evaluate {what}: {message}", uri=uri) from exc
    finally:
        con.close()
