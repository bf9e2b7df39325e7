"""Sandboxed DuckDB over a dataset's index: WHERE clauses (`subset`) and SELECTs (`sql`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._errors import QueryError, UnsafeQueryError
from ferroload_format._index import IndexColumns, arrow_array

TABLE = "samples"
T = TypeVar("T")
#: The column of row positions a WHERE clause selects: it starts with the reserved prefix
#: (`_names.RESERVED_PREFIX`), and `_position_column` steps aside from any index column
#: that takes it all the same (a dataset written elsewhere), so none can shadow it.
_POS = "_ferroload_position"
#: At most this many of the dataset's columns are listed in an error.
_MAX_LISTED_COLUMNS = 50
#: DuckDB's pointer into the query: `LINE n: <text>` and a caret line under it.
_CONTEXT = re.compile(r"\n+LINE (\d+): ([^\n]*)\n( *)(\^+)\s*\Z")
#: DuckDB's own list of columns, made from the table it was given: ours is the dataset's.
_CANDIDATES = re.compile(r"\n?Candidate bindings: [^\n]*")
_MISSING_COLUMN = re.compile(r'(?:Referenced column|does not have a column named) "((?:[^"]|"")*)"')
_SYNTAX_ERROR_NEAR = re.compile(r'syntax error at or near "(?:[^"]|"")*"')


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
    columns = index.column_names
    pos = _position_column(columns)
    query = f"SELECT {pos} FROM {TABLE} WHERE (\n{where}\n) ORDER BY {pos}"
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(
            f"invalid WHERE clause {where!r}: {describe_error(exc, columns, where=where)}",
            uri=uri,
        ) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} must be a single condition; it makes "
            f"{len(statements)} statements",
            uri=uri,
        )
    table = _index_table(index, rows, referenced_columns(tokens, columns), positions=pos)
    result = _run(table, lambda con: con.execute(query).fetchnumpy()[pos], uri=uri,
                  what=f"the WHERE clause {where!r}", columns=columns, where=where)  # fmt: skip
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
    columns = index.column_names
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid query: {describe_error(exc, columns)}", uri=uri) from exc
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kind = f" of type {statements[0].type.name}" if len(statements) == 1 else ""
        raise UnsafeQueryError(
            f"only a single SELECT over the table {TABLE!r} is allowed; the query makes "
            f"{len(statements)} statement(s){kind}",
            uri=uri,
        )
    # every column: a SELECT may name them in ways a token scan cannot see (*, COLUMNS(...))
    table = _index_table(index, rows, columns)
    result: pa.Table = _run(table, lambda con: con.sql(query).to_arrow_table(), uri=uri,
                            what="the query", columns=columns)  # fmt: skip
    return result


def _position_column(columns: Sequence[str]) -> str:
    """The name of the positions column: `_POS`, unless an index column takes it (DuckDB
    compares names without case), then `_POS` with more leading underscores."""
    taken = {c.lower() for c in columns}
    name = _POS
    while name in taken:
        name = "_" + name
    return name


def describe_error(exc: duckdb.Error, columns: Sequence[str], *, where: str | None = None) -> str:
    """DuckDB's message for `exc`, told in the dataset's terms.

    An unknown column is followed, on the same line (the CLI shows the first line), by the
    closest and all of the dataset's own `columns`: DuckDB's "Candidate bindings" name the
    columns of the table it was given, which for a WHERE clause are the few it loads and
    the internal positions column. For a WHERE clause (`where`), the `LINE n:` pointer
    counts the clause's own lines, and is dropped where it points into the query wrapped
    around the clause.
    """
    text = _CANDIDATES.sub("", str(exc))
    context = ""
    pointer = _CONTEXT.search(text)
    if pointer is not None:
        text, context = text[: pointer.start()], pointer.group(0)
        if where is not None:
            line, shown, indent, carets = pointer.groups()
            own = int(line) - 1  # the clause starts on the query's second line
            if 1 <= own <= where.count("\n") + 1:
                width = len(f"LINE {own}: ") - len(f"LINE {line}: ")
                context = f"\n\nLINE {own}: {shown}\n{' ' * max(0, len(indent) + width)}{carets}"
            else:
                context = ""
                if own > 0:  # past the clause's end: DuckDB names the query's `)`
                    text = _SYNTAX_ERROR_NEAR.sub("syntax error at the end of the clause", text)
    missing = _MISSING_COLUMN.search(text)
    if missing is not None:
        name = missing.group(1).replace('""', '"')
        by_lower = {c.lower(): c for c in columns}
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
        hint = f"Did you mean {by_lower[close[0]]!r}? " if close else ""
        listed = ", ".join(columns[:_MAX_LISTED_COLUMNS])
        if len(columns) > _MAX_LISTED_COLUMNS:
            listed += f", … ({len(columns) - _MAX_LISTED_COLUMNS} more)"
        end = text.find("\n", missing.end())  # the end of DuckDB's line
        end = len(text.rstrip()) if end < 0 else end
        text = f"{text[:end]} {hint}The dataset's columns are {listed}.{text[end:]}"
    return text + context


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
    fetch: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    uri: str,
    what: str,
    columns: Sequence[str],
    where: str | None = None,
) -> T:
    """`fetch(con)` on a sandboxed connection where `table` is `samples`; DuckDB's errors
    become ours, naming `what` and told in terms of the dataset's `columns` (and of the
    WHERE clause `where`, if that is what runs: see `describe_error`)."""
    con = sandboxed_connection()
    try:
        con.register(TABLE, table)
        return fetch(con)
    except duckdb.PermissionException as exc:
        message = describe_error(exc, columns, where=where)
        raise UnsafeQueryError(
            f"{what} tries to reach outside the dataset's index: {message}", uri=uri
        ) from exc
    except duckdb.Error as exc:
        message = describe_error(exc, columns, where=where)
        raise QueryError(f"DuckDB cannot evaluate {what}: {message}", uri=uri) from exc
    finally:
        con.close()
