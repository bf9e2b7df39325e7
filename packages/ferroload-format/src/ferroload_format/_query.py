"""Sandboxed DuckDB over a dataset's index: WHERE clauses (`subset`) and SELECTs (`sql`)."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format import _pruning, _sandbox
from ferroload_format._errors import ManifestError, QueryError, QueryTimeoutError, UnsafeQueryError
from ferroload_format._index_arrays import arrow_array
from ferroload_format._index_columns import IndexColumns
from ferroload_format._part_files import (
    check_part_rows,
    column_chunks,
    no_column,
    open_part,
    read_row_groups,
)
from ferroload_format._pruning import Pruner, ScanStats
from ferroload_format._sandbox import DEFAULT_TIMEOUT, TABLE

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
    return _sandbox.connect()


def _tokens(where: str) -> list[tuple[str, object]]:
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
    tokens = _tokens(where)
    _check_one_expression(where, tokens, uri)
    columns = index.column_names
    pos = _position_column(columns)
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
    _check_case(names, uri)

    def check(node: dict[str, Any]) -> None:
        if not _is_plain_where(node, pos):
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
            scan = _Scan(con, index, names, pos, fetch, timeout=seconds)
            positions = scan.row_groups(Pruner(clause, index.schema), stats or ScanStats())
        elif way == "rows":
            scan = _Scan(con, index, names, pos, fetch, timeout=seconds)
            base = pa.schema([f for f in index.schema if index.layer_of(f.name) is None])
            positions = scan.rows(rows, Pruner(clause, base), stats or ScanStats())
        else:
            table = _index_table(index, rows, names, positions=pos)
            con.register(TABLE, table)
            positions = _sandbox.run(con, fetch, timeout=seconds)
            n = table.num_rows
    _check_positions(positions, n, where, uri)
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


class _Scan:
    """A WHERE clause over the index, about `BATCH_ROWS` rows per DuckDB call."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        index: IndexColumns,
        names: Sequence[str],
        pos: str,
        fetch: Callable[[duckdb.DuckDBPyConnection], npt.NDArray[np.int64]],
        *,
        timeout: float,
    ) -> None:
        self.con, self.index, self.names, self.pos = con, index, list(names), pos
        self.fetch = fetch
        self.left = timeout  # seconds DuckDB may still take, over all the batches
        self.types = {n: index.schema.field(n).type for n in names}
        self.found: list[npt.NDArray[np.int64]] = []
        self.batch: list[pa.Table] = []
        self.batch_rows = 0
        self.ran = False

    def rows(
        self, rows: npt.NDArray[np.int64] | None, pruner: Pruner, stats: ScanStats
    ) -> npt.NDArray[np.int64]:
        """Over `rows` (a view's; None: every row), in batches of rows read through
        `IndexColumns.take` (which reads the row groups holding them; layer columns
        too), leaving out the rows of base row groups that `pruner` rules out. A view's
        rows are taken in ascending order (sorted first if they are not, then the
        positions found sorted back), so that a batch reads a run of row groups."""
        starts, stops = self._kept(pruner, stats)
        order: npt.NDArray[np.intp] | None = None
        if rows is None:
            for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
                for start in range(lo, hi, _pruning.BATCH_ROWS):
                    at = np.arange(start, min(hi, start + _pruning.BATCH_ROWS), dtype=np.int64)
                    self._take(at, at, stats)
        else:
            ascending = len(rows) < 2 or bool((rows[1:] >= rows[:-1]).all())
            order = None if ascending else np.argsort(rows, kind="stable")
            ordered = rows if order is None else rows[order]
            firsts = np.searchsorted(ordered, starts).tolist()
            lasts = np.searchsorted(ordered, stops).tolist()
            for lo, hi in zip(firsts, lasts, strict=True):
                for start in range(lo, hi, _pruning.BATCH_ROWS):
                    stop = min(hi, start + _pruning.BATCH_ROWS)
                    at = np.arange(start, stop, dtype=np.int64)
                    self._take(ordered[start:stop], at if order is None else order[at], stats)
        if self.batch or not self.ran:
            self._flush(stats)
        found = np.concatenate(self.found) if self.found else np.zeros(0, np.int64)
        return found if rows is None or order is None else np.sort(found)

    def _take(
        self, at: npt.NDArray[np.int64], positions: npt.NDArray[np.int64], stats: ScanStats
    ) -> None:
        """Run the clause over rows `at` of the index, known as `positions`."""
        columns = self.index.take(self.names, at) if self.names else {}
        self.batch.append(pa.table({self.pos: arrow_array(positions), **columns}))
        self.batch_rows += len(at)
        stats.add(rows_read=len(at))
        if self.batch_rows >= _pruning.BATCH_ROWS:
            self._flush(stats)

    def _kept(
        self, pruner: Pruner, stats: ScanStats
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(starts, stops) of the runs of base rows whose row groups `pruner` keeps:
        every row, as one run, when it tests nothing."""
        index = self.index
        n = index.manifest.num_samples
        if not pruner:
            return np.array([0], np.int64), np.array([n], np.int64)
        bounds: list[int] = [0]
        keep: list[npt.NDArray[np.bool_]] = []
        start = 0
        for part in index.manifest.index_parts:
            metadata = open_part(index.store, part, index._files)[0].metadata
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            if sum(sizes) != part.num_rows:  # the reads refuse the part; prune none of it
                sizes, mask = [part.num_rows], np.ones(1, dtype=bool)
            else:
                mask = pruner.may_match(self.con, metadata)
                stats.add(row_groups=len(sizes), groups_skipped=len(sizes) - int(mask.sum()))
            bounds.extend((start + np.cumsum(sizes, dtype=np.int64)).tolist())
            keep.append(mask)
            start += part.num_rows
        edges = np.asarray(bounds, dtype=np.int64)
        kept = np.concatenate(keep) if keep else np.zeros(0, dtype=bool)
        # runs of kept groups: where `kept` turns on and off
        flips = np.diff(np.concatenate([[False], kept, [False]]).astype(np.int8))
        return edges[np.flatnonzero(flips == 1)], edges[np.flatnonzero(flips == -1)]

    def row_groups(self, pruner: Pruner, stats: ScanStats) -> npt.NDArray[np.int64]:
        """Over the base index parts, a batch of row groups at a time, skipping those
        `pruner` rules out."""
        index = self.index
        start = 0
        for part in index.manifest.index_parts:
            opened = open_part(index.store, part, index._files)
            metadata = opened[0].metadata
            check_part_rows(index.store, part, metadata.num_rows)
            for name in self.names:
                if opened[0].schema_arrow.get_field_index(name) < 0:
                    raise no_column(index.store, part, name)
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            offsets = start + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
            keep = pruner.may_match(self.con, metadata)
            groups: list[int] = []
            for g in np.flatnonzero(keep).tolist():
                groups.append(g)
                self.batch_rows += sizes[g]
                if self.batch_rows >= _pruning.BATCH_ROWS:
                    self._read(opened, groups, offsets, stats)
                    groups = []
                    self._flush(stats)
            self._read(opened, groups, offsets, stats)
            skipped = len(sizes) - int(keep.sum())
            stats.add(row_groups=len(sizes), groups_skipped=skipped)
            start += part.num_rows
        if self.batch or not self.ran:  # one run at least: DuckDB binds the clause
            self._flush(stats)
        return np.concatenate(self.found) if self.found else np.zeros(0, np.int64)

    def _read(
        self,
        opened: tuple[Any, Any],
        groups: list[int],
        offsets: npt.NDArray[np.int64],
        stats: ScanStats,
    ) -> None:
        """Add row groups `groups` of one part to the batch, with their positions."""
        if not groups:
            return
        positions = np.concatenate([np.arange(offsets[g], offsets[g + 1]) for g in groups])
        columns: dict[str, pa.Array | pa.ChunkedArray] = {self.pos: arrow_array(positions)}
        if self.names:
            table = read_row_groups(opened, groups, self.names)
            for name, dtype in self.types.items():
                columns[name] = self._typed(table.column(name), dtype, name)
            _, lengths = column_chunks(opened[0].metadata, self.names, groups)
            stats.add(bytes_read=sum(lengths))
        stats.add(groups_read=len(groups), rows_read=len(positions))
        self.batch.append(pa.table(columns))

    def _typed(self, column: pa.ChunkedArray, dtype: pa.DataType, name: str) -> pa.ChunkedArray:
        if column.type == dtype:
            return column
        try:
            return column.cast(dtype)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            uri = self.index.store.uri
            raise ManifestError(
                f"column {name!r} of the index of {uri} does not hold {dtype} as the "
                f"manifest's schema says ({exc}). The manifest or the index was altered; "
                "run verify()",
                uri=uri,
                column=name,
            ) from exc

    def _flush(self, stats: ScanStats) -> None:
        """Run the clause over the batch (an empty table if there is none)."""
        if self.batch:
            table = pa.concat_tables(self.batch)
        else:
            empty = {self.pos: pa.array([], pa.int64())}
            table = pa.table({**empty, **{n: pa.array([], t) for n, t in self.types.items()}})
        self.batch, self.batch_rows, self.ran = [], 0, True
        if self.left <= 0:
            raise _sandbox.TimedOutError
        self.con.register(TABLE, table)
        began = time.monotonic()
        try:
            self.found.append(_sandbox.run(self.con, self.fetch, timeout=self.left))
        finally:
            self.left -= time.monotonic() - began
            self.con.unregister(TABLE)
        stats.add(batches=1)


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
    _check_case(columns, uri)
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


def _check_one_expression(where: str, tokens: list[tuple[str, object]], uri: str) -> None:
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


def _is_plain_where(node: dict[str, Any], pos: str) -> bool:
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


def _check_positions(positions: npt.NDArray[np.int64], n: int, where: str, uri: str) -> None:
    """Positions must lie in [0, n), ascending and unique, before anyone uses them."""
    if positions.size and (
        positions[0] < 0 or positions[-1] >= n or np.any(np.diff(positions) <= 0)
    ):
        raise UnsafeQueryError(
            f"the WHERE clause {where!r} produced positions that are not rows of the "
            f"dataset (each of 0..{n - 1} at most once, ascending)",
            uri=uri,
        )


def _check_case(names: Sequence[str], uri: str) -> None:
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
