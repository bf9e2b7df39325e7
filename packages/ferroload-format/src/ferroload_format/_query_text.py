"""Query text: checks on a WHERE clause, and DuckDB's errors told in the dataset's terms."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt

from ferroload_format._errors import QueryError, UnsafeQueryError
from ferroload_format._sandbox import TABLE

#: The column of row positions a WHERE clause selects: it starts with the reserved prefix
#: (`_names.RESERVED_PREFIX`), and `position_column` steps aside from any index column
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


def clause_tokens(where: str) -> list[tuple[str, object]]:
    """(text, token type) of each token DuckDB sees in `where` (DuckDB gives where each
    starts in the UTF-8 bytes, not in characters)."""
    data = where.encode("utf-8", "surrogatepass")
    tokens = duckdb.tokenize(where)
    ends = [pos for pos, _ in tokens[1:]] + [len(data)]
    return [
        (data[pos:end].decode("utf-8", "replace").strip(), kind)
        for (pos, kind), end in zip(tokens, ends, strict=True)
    ]


def referenced_columns(tokens: list[tuple[str, object]], columns: list[str]) -> list[str]:
    """The index columns a clause mentions (so only those are loaded)."""
    words = {
        text.strip('"').lower()
        for text, kind in tokens
        if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword)
    }
    return [c for c in columns if c.lower() in words]


def check_one_expression(where: str, tokens: list[tuple[str, object]], uri: str) -> None:
    """Refuse a clause with `;` or parentheses that do not balance (a `)` that would close
    the parenthesis the clause is wrapped in, and let a query of its own follow)."""
    depth = 0
    for text, kind in tokens:
        if kind in (duckdb.token_type.string_const, duckdb.token_type.comment):
            continue
        if kind == duckdb.token_type.identifier and text.startswith('"'):
            continue
        if ";" in text:
            raise UnsafeQueryError(
                f"the WHERE clause {where!r} must be a single condition: ';' would start a "
                "second statement",
                uri=uri,
            )
        for char in text:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth < 0:
                raise UnsafeQueryError(
                    f"the WHERE clause {where!r} must be a single condition: a ')' closes a "
                    "parenthesis it did not open",
                    uri=uri,
                )
    if depth != 0:
        raise QueryError(
            f"invalid WHERE clause {where!r}: {depth} parenthesis(es) left open", uri=uri
        )


def is_plain_where(node: dict[str, Any], pos: str) -> bool:
    """Whether DuckDB's parse of the wrapped clause is `SELECT pos FROM samples WHERE …
    ORDER BY pos` and nothing else (no set operation, grouping, CTE, extra modifier)."""
    source = node.get("from_table") or {}
    modifiers = node.get("modifiers") or []
    select_list = node.get("select_list") or []
    return (
        node.get("type") == "SELECT_NODE"
        and node.get("where_clause") is not None
        and not (node.get("cte_map") or {}).get("map")
        and not node.get("group_expressions")
        and not node.get("group_sets")
        and node.get("having") is None
        and node.get("qualify") is None
        and node.get("sample") is None
        and len(select_list) == 1
        and select_list[0].get("column_names") == [pos]
        and source.get("type") == "BASE_TABLE"
        and source.get("table_name") == TABLE
        and not source.get("alias")
        and [m.get("type") for m in modifiers] == ["ORDER_MODIFIER"]
    )


def check_positions(positions: npt.NDArray[np.int64], n: int, where: str, uri: str) -> None:
    """Positions must lie in [0, n), ascending and unique, before anyone uses them."""
    if positions.size and (
        positions[0] < 0 or positions[-1] >= n or np.any(np.diff(positions) <= 0)
    ):
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} produced positions that are not rows of the "
            f"dataset (each of 0..{n - 1} at most once, ascending)",
            uri=uri,
        )


def check_case(names: Sequence[str], uri: str) -> None:
    """DuckDB compares names without case: columns that differ only by case (a dataset
    written elsewhere) cannot be told apart, so a query over them gets a clear error
    rather than one column's values under the other's name."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise QueryError(
                f"columns {other!r} and {name!r} differ only by case, which DuckDB cannot "
                "tell apart; rename one of them (e.g. with a layer) to query them",
                uri=uri,
                column=name,
            )


def position_column(columns: Sequence[str]) -> str:
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
