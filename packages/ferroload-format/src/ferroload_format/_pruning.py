"""Row-group pruning for WHERE clauses: which row groups of an index part may hold a match,
judged from the part's Parquet statistics (min, max, null count per column chunk).

A clause is pruned on its top-level AND: each conjunct of the form `column op constant`
(`=`, `<>`, `<`, `<=`, `>`, `>=`, `BETWEEN`, `IN (constants)`, a bare boolean column,
`IS [NOT] NULL`) on an integer, floating, boolean or string column (or a field of a
struct column, e.g. `image.length`) becomes a test on the row group's statistics; any
other conjunct (an OR, a function, a cast, a subquery, ...) tests nothing. A row group is
skipped only when one of the tests is false for it: no row in it can satisfy that
conjunct, so none satisfies the clause. Unknown statistics mean "may match".

The tests are not evaluated in Python: they are rewritten to SQL over a table of the
statistics (`lo`, `hi` of the column's own type) and run by DuckDB, with the constants as
the clause wrote them, so that DuckDB binds each comparison to the same types (and casts,
and string order) as in the clause itself. Floating columns get `hi` = NaN (DuckDB orders
NaN above every number, and Parquet statistics leave NaN out), so only their lower bound
prunes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

#: Rows a DuckDB call evaluates at most, in whole row groups (and the size above which an
#: index is scanned in row groups rather than loaded column by column).
BATCH_ROWS = 1 << 20
#: The table the statistics are registered as while the tests run.
STATS_TABLE = "_ferroload_row_group_stats"

_INTEGER = re.compile(r"-?[0-9][0-9_]*")
_DECIMAL = re.compile(r"-?(?:[0-9][0-9_]*)?\.?[0-9_]*")
_DOUBLE = re.compile(r"-?(?:[0-9][0-9_]*)?\.?[0-9_]*[eE][-+]?[0-9]+")
#: Comparison types, with the column on the left: their test on [lo, hi].
_TESTS = {
    "COMPARE_EQUAL": "({lo} <= {c} AND {hi} >= {c})",
    "COMPARE_NOTEQUAL": "NOT ({lo} = {c} AND {hi} = {c})",
    "COMPARE_LESSTHAN": "{lo} < {c}",
    "COMPARE_LESSTHANOREQUALTO": "{lo} <= {c}",
    "COMPARE_GREATERTHAN": "{hi} > {c}",
    "COMPARE_GREATERTHANOREQUALTO": "{hi} >= {c}",
}
#: The same comparison with its sides swapped (`3 > x` is `x < 3`).
_FLIPPED = {
    "COMPARE_EQUAL": "COMPARE_EQUAL",
    "COMPARE_NOTEQUAL": "COMPARE_NOTEQUAL",
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
}


@dataclass
class ScanStats:
    """What one scan of a WHERE clause over the index read (see `where_positions`).

    `bytes_read` counts the compressed column chunks of the row groups read (footers
    not included): on an object store it is what was fetched for them; on a local disk,
    what was mapped and decoded.
    """

    row_groups: int = 0
    groups_read: int = 0
    groups_skipped: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    batches: int = 0

    def add(self, **counts: int) -> None:
        """Add to the named counters."""
        for name, value in counts.items():
            setattr(self, name, getattr(self, name) + value)


@dataclass(frozen=True)
class _Column:
    """A prunable column: its path in the part's Parquet schema and its Arrow type."""

    path: str
    type: pa.DataType
    top_level: bool


def has_subquery(node: object) -> bool:
    """Whether a parsed expression holds a subquery (which would read `samples`, all of
    it, or run again for every batch)."""
    if isinstance(node, list):
        return any(has_subquery(n) for n in node)
    if not isinstance(node, dict):
        return False
    if node.get("class") == "SUBQUERY" or "from_table" in node:
        return True
    return any(has_subquery(v) for v in node.values())


def conjuncts(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The terms of a clause's top-level AND (the clause itself if it is not one)."""
    if node.get("class") == "CONJUNCTION" and node.get("type") == "CONJUNCTION_AND":
        for child in node.get("children") or []:
            yield from conjuncts(child)
    else:
        yield node


def _literal(node: object) -> tuple[str, str] | None:
    """(class, SQL text) of a constant: the class is `int`, `decimal`, `double`, `str`,
    `bool` or `null`; None for anything else or a text this module does not re-render."""
    if not isinstance(node, dict) or node.get("class") != "CONSTANT":
        return None
    literal = node.get("literal")
    if not isinstance(literal, dict):
        return None
    kind, text = literal.get("kind"), literal.get("text")
    if not isinstance(text, str):
        return None
    if kind in ("INTEGER", "NUMERIC") and sum(c.isdigit() for c in text) > 18:
        return None  # beyond int64 and DECIMAL(18): DuckDB may type it otherwise
    if kind == "INTEGER" and _INTEGER.fullmatch(text):
        return "int", text
    if kind == "NUMERIC" and _DOUBLE.fullmatch(text) and any(c.isdigit() for c in text):
        return "double", text
    if kind == "NUMERIC" and _DECIMAL.fullmatch(text) and any(c.isdigit() for c in text):
        return "decimal", text
    if kind == "STRING" and "\x00" not in text:
        return "str", "'" + text.replace("'", "''") + "'"
    if kind == "BOOLEAN" and text.lower() in ("true", "false"):
        return "bool", text.lower()
    if kind == "NULL_LITERAL":
        return "null", "NULL"
    return None


def _fits(column: pa.DataType, literal: str) -> bool:
    """Whether a constant of this class compares with the column as a plain value (no
    string-to-number cast, which the clause may fail on, or bind otherwise)."""
    if literal == "null":
        return True
    if pa.types.is_integer(column) or pa.types.is_floating(column):
        return literal in ("int", "decimal", "double")
    if pa.types.is_string(column) or pa.types.is_large_string(column):
        return literal == "str"
    if pa.types.is_boolean(column):
        return literal == "bool"
    return False


class Pruner:
    """The statistics tests of one clause over a dataset's base index schema."""

    def __init__(self, where: dict[str, Any], schema: pa.Schema) -> None:
        self._schema = schema
        self._lower = {n.lower(): n for n in schema.names}
        self.columns: list[_Column] = []
        self.tests: list[str] = []
        for term in conjuncts(where):
            self._add(term)

    def __bool__(self) -> bool:
        return bool(self.tests)

    def _column(self, node: object) -> tuple[_Column, int] | None:
        """The prunable column a COLUMN_REF names, and its number among `columns`."""
        if not isinstance(node, dict) or node.get("class") != "COLUMN_REF":
            return None
        names = node.get("column_names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            return None
        top = self._lower.get(names[0].lower())
        if top is None or (len(names) > 1 and names[0].lower() == "samples"):
            return None  # not a column, or the table's name first: not pruned
        path, dtype = [top], self._schema.field(top).type
        for name in names[1:]:
            if not pa.types.is_struct(dtype):
                return None
            fields = [dtype.field(i) for i in range(dtype.num_fields)]
            same = [f for f in fields if f.name.lower() == name.lower()]
            if len(same) != 1:
                return None  # none, or fields that differ only by case: not pruned
            field = same[0]
            path.append(field.name)
            dtype = field.type
        if not (
            pa.types.is_integer(dtype)
            or pa.types.is_floating(dtype)
            or pa.types.is_boolean(dtype)
            or pa.types.is_string(dtype)
            or pa.types.is_large_string(dtype)
        ):
            return None
        column = _Column(".".join(path), dtype, top_level=len(path) == 1)
        if column not in self.columns:
            self.columns.append(column)
        return column, self.columns.index(column)

    def _add(self, term: dict[str, Any]) -> None:
        kind, cls = term.get("type"), term.get("class")
        found: tuple[_Column, int] | None
        if cls == "COMPARISON" and kind in _TESTS:
            found, literal = self._column(term.get("left")), _literal(term.get("right"))
            if found is None:
                found, literal = self._column(term.get("right")), _literal(term.get("left"))
                kind = _FLIPPED[kind]
            if found is None or literal is None or not _fits(found[0].type, literal[0]):
                return
            self._compare(found[1], _TESTS[kind].format(lo="{lo}", hi="{hi}", c=literal[1]))
        elif cls == "BETWEEN":
            found = self._column(term.get("input"))
            low, high = _literal(term.get("lower")), _literal(term.get("upper"))
            if found is None or low is None or high is None or low[0] != high[0]:
                return  # constants of two classes: DuckDB may bind BETWEEN to a third type
            if not _fits(found[0].type, low[0]):
                return
            self._compare(found[1], f"({{hi}} >= {low[1]} AND {{lo}} <= {high[1]})")
        elif cls == "OPERATOR" and kind == "COMPARE_IN":
            children = term.get("children") or []
            found = self._column(children[0]) if children else None
            values = [_literal(c) for c in children[1:]]
            if found is None or not values or any(v is None for v in values):
                return
            known = [v for v in values if v is not None and v[0] != "null"]
            if len({v[0] for v in known}) != 1 or not _fits(found[0].type, known[0][0]):
                return  # IN binds every constant to one type: one class, as for BETWEEN
            self._compare(
                found[1], " OR ".join(f"({{lo}} <= {v[1]} AND {{hi}} >= {v[1]})" for v in known)
            )
        elif cls == "OPERATOR" and kind in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            children = term.get("children") or []
            found = self._column(children[0]) if len(children) == 1 else None
            if found is None or not found[0].top_level:
                return
            i = found[1]
            test = f"n{i} > 0" if kind == "OPERATOR_IS_NULL" else f"n{i} < rows"
            self.tests.append(f"coalesce({test}, true)")
        elif cls == "COLUMN_REF":
            found = self._column(term)
            if found is not None and pa.types.is_boolean(found[0].type):
                self._compare(found[1], "{hi}")

    def _compare(self, i: int, test: str) -> None:
        """A comparison's test: false where every value is null (the comparison is null
        for each row), else the test on the bounds, true where they are unknown."""
        test = test.format(lo=f"lo{i}", hi=f"hi{i}")
        self.tests.append(f"CASE WHEN n{i} = rows THEN false ELSE coalesce(({test}), true) END")

    def stats_table(self, metadata: pq.FileMetaData) -> pa.Table:
        """One row per row group: `rows`, and per column `lo<i>`, `hi<i>`, `n<i>` (null
        count), null where the statistics do not say."""
        schema = metadata.schema
        paths = {schema.column(ci).path: ci for ci in range(len(schema))}
        groups = range(metadata.num_row_groups)
        arrays: dict[str, pa.Array] = {
            "rows": pa.array([metadata.row_group(g).num_rows for g in groups], pa.int64())
        }
        for i, column in enumerate(self.columns):
            lo: list[Any] = []
            hi: list[Any] = []
            nulls: list[int | None] = []
            floating = pa.types.is_floating(column.type)
            ci = paths.get(column.path)
            for g in groups:
                stats = None if ci is None else metadata.row_group(g).column(ci).statistics
                low = high = count = None
                if stats is not None:
                    if stats.has_null_count:
                        count = stats.null_count
                    if stats.has_min_max:
                        try:
                            low, high = stats.min, stats.max
                        except Exception:  # statistics pyarrow cannot decode: unknown
                            low = high = None
                lo.append(low)
                hi.append(float("nan") if floating else high)
                nulls.append(count)
            arrays[f"lo{i}"] = _typed(lo, column.type)
            arrays[f"hi{i}"] = _typed(hi, column.type)
            arrays[f"n{i}"] = pa.array(nulls, pa.int64())
        return pa.table(arrays)

    def may_match(
        self, con: duckdb.DuckDBPyConnection, metadata: pq.FileMetaData
    ) -> npt.NDArray[np.bool_]:
        """For each row group of a part, whether it may hold a row the clause selects
        (all true when the statistics cannot be read or tested)."""
        n = metadata.num_row_groups
        if not self.tests or n == 0:
            return np.ones(n, dtype=bool)
        try:
            table = self.stats_table(metadata)
            con.register(STATS_TABLE, table)
            try:
                query = f"SELECT ({' AND '.join(self.tests)}) AS keep FROM {STATS_TABLE}"
                keep = con.execute(query).fetchnumpy()["keep"]
            finally:
                con.unregister(STATS_TABLE)
        except (duckdb.Error, pa.ArrowException):
            return np.ones(n, dtype=bool)
        result = np.asarray(keep, dtype=bool)
        return result if result.shape == (n,) else np.ones(n, dtype=bool)


def _typed(values: Sequence[Any], dtype: pa.DataType) -> pa.Array:
    """`values` as an array of `dtype`; a value that does not convert becomes null."""
    try:
        return pa.array(values, type=dtype)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        out = []
        for v in values:
            try:
                pa.array([v], type=dtype)
                out.append(v)
            except (pa.ArrowException, OverflowError, TypeError, ValueError):
                out.append(None)
        return pa.array(out, type=dtype)
