"""Sandboxed DuckDB evaluation of WHERE clauses over a dataset's index."""

from __future__ import annotations

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._errors import QueryError, UnsafeQueryError
from ferroload_format._index import IndexColumns

TABLE = "samples"
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
    names = referenced_columns(tokens, index.column_names)
    arrays = index.columns(names)
    n = index.manifest.num_samples if rows is None else len(rows)
    take = None if rows is None else pa.array(rows)
    table = pa.table(
        {
            _POS: pa.array(np.arange(n, dtype=np.int64)),
            **{k: (v if take is None else v.take(take)) for k, v in arrays.items()},
        }
    )
    con = sandboxed_connection()
    try:
        con.register(TABLE, table)
        result = con.execute(query).fetchnumpy()[_POS]
    except duckdb.PermissionException as exc:
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} tries to reach outside the dataset's index: {exc}",
            uri=uri,
        ) from exc
    except duckdb.Error as exc:
        raise QueryError(f"DuckDB cannot evaluate WHERE clause {where!r}: {exc}", uri=uri) from exc
    finally:
        con.close()
    return np.asarray(result, dtype=np.int64)
