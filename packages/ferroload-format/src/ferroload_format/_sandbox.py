"""The DuckDB sandbox a WHERE clause or SQL query runs in: what it may name, and how long
and how much memory it may take (docs/format.md, "The query sandbox").

Three layers, each enough on its own for the attacks it names:

1. The connection: external access off (no files, no network, no ATTACH), spilling to disk
   off (no temp directory, so none is readable either), no extension loading, a memory
   limit, and the configuration locked.
2. The statement, parsed by DuckDB itself (`json_serialize_sql`) before it runs: it may read
   only the table `samples` (and its own CTEs and subqueries); the only table functions
   are `range`, `generate_series` and `unnest`; a function that tells about the host or
   the session (settings, secrets, extensions, the catalog, the version, environment) is
   refused by name.
3. The run: a timer interrupts DuckDB after `timeout` seconds; host paths are removed from
   any message that leaves.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from ferroload_format._progress_bar import hide_progress_bar

T = TypeVar("T")

#: The table a query reads.
TABLE = "samples"
#: Seconds a query may run by default.
DEFAULT_TIMEOUT = 30.0
#: DuckDB's memory limit for one query (the index itself is an Arrow table outside it).
MEMORY_LIMIT = "4GiB"
#: Table functions that read nothing but their arguments.
ALLOWED_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
#: Scalar or aggregate functions that tell about the host or the session, not the data.
_DENIED_FUNCTIONS = frozenset(
    {
        "current_setting", "current_database", "current_catalog", "current_schema",
        "current_schemas", "current_user", "current_role", "current_connection_id",
        "current_query_id", "current_transaction_id", "current_query", "session_user",
        "user", "version", "platform", "user_agent", "get_block_size", "getenv",
        "getvariable", "has_database_privilege", "has_schema_privilege", "in_search_path",
        "nextval", "currval", "txid_current", "write_log", "parse_duckdb_log_message",
        "json_deserialize_sql", "json_execute_serialized_sql", "stats", "query",
        "query_table", "glob", "sql_auto_complete", "which_secret",
    }
)  # fmt: skip
#: Name patterns refused for the same reason (`duckdb_settings`, `pragma_version`,
#: `read_csv`, `parquet_scan`, `pg_get_viewdef`, ...).
_DENIED_PATTERN = re.compile(
    r"^(duckdb_|pragma_|read_|parquet_|sniff_)|^pg_(?!typeof$|size_pretty$)|_scan$"
    r"|secret|setting|extension",
    re.IGNORECASE,
)
#: The table references a statement may hold.
_TABLE_REFS = frozenset(
    {"BASE_TABLE", "TABLE_FUNCTION", "SUBQUERY", "JOIN", "EXPRESSION_LIST", "EMPTY", "PIVOT"}
)


class RefusedError(Exception):
    """A statement the sandbox will not run; the message says why (no host detail)."""


class TimedOutError(Exception):
    """A query the timer interrupted."""


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that cannot touch files, the network or settings,
    and prints nothing (DuckDB's progress bar, drawn on standard output in an
    interactive session for a query past 2 s, is off: a library never writes there)."""
    con = duckdb.connect(
        ":memory:",
        config={
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
            "temp_directory": "",  # no spilling: no directory to read or list
            "memory_limit": MEMORY_LIMIT,
        },
    )
    try:
        hide_progress_bar(con)  # a session setting, not a config one
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def parse(con: duckdb.DuckDBPyConnection, query: str) -> dict[str, Any]:
    """The one SELECT statement of `query`, as DuckDB's parser serializes it.

    Raises:
        RefusedError: `query` is not exactly one SELECT.
    """
    rows = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()
    tree: dict[str, Any] = json.loads(rows[0][0]) if rows else {"error": True}
    if tree.get("error"):
        raise RefusedError(f"it is not a single SELECT ({tree.get('error_message', 'unparsable')})")
    statements: list[dict[str, Any]] = tree.get("statements") or []
    if len(statements) != 1:
        raise RefusedError(f"it makes {len(statements)} statements; one SELECT is allowed")
    node: dict[str, Any] = statements[0]["node"]
    return node


def check_names(node: object) -> None:
    """Refuse a statement that reads a table other than `samples` (or its own CTEs) or
    calls a function outside the sandbox's allow-list.

    Raises:
        RefusedError: naming the table or function.
    """
    _walk(node, frozenset({TABLE}))


def _walk(node: object, tables: frozenset[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, tables)
        return
    if not isinstance(node, dict):
        return
    ctes = node.get("cte_map")
    if isinstance(ctes, dict):
        names = {str(e.get("key", "")).lower() for e in ctes.get("map") or []}
        tables = tables | names
    kind = node.get("type")
    if "class" not in node and "sample" in node and "alias" in node:  # a table reference
        if kind == "SHOW_REF":
            raise RefusedError("it describes the catalog (DESCRIBE, SHOW, SUMMARIZE)")
        if kind not in _TABLE_REFS:
            raise RefusedError(f"it reads from a {str(kind).lower().replace('_', ' ')}")
        if kind == "BASE_TABLE":
            name = str(node.get("table_name", ""))
            if node.get("schema_name") or node.get("catalog_name") or name.lower() not in tables:
                raise RefusedError(f"it reads table {_qualified(node)!r}; only {TABLE!r} is there")
        if kind == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = str(function.get("function_name", ""))
            if (
                function.get("class") != "FUNCTION"
                or function.get("schema")
                or function.get("catalog")
                or name.lower() not in ALLOWED_TABLE_FUNCTIONS
            ):
                raise RefusedError(
                    f"it calls table function {name!r}; the only ones allowed are "
                    f"{', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))}"
                )
            _walk(function.get("arguments"), tables)
            for key, value in node.items():
                if key != "function":
                    _walk(value, tables)
            return
    if node.get("class") == "FUNCTION":
        name = str(node.get("function_name", ""))
        if node.get("schema") or node.get("catalog"):
            raise RefusedError(f"it calls {_qualified(node)!r}; name functions without a schema")
        if name.lower() in _DENIED_FUNCTIONS or _DENIED_PATTERN.search(name):
            raise RefusedError(
                f"it calls {name!r}, which is about the host or the session, not the data"
            )
    for value in node.values():
        _walk(value, tables)


def _qualified(node: dict[str, Any]) -> str:
    parts = (node.get("catalog_name") or node.get("catalog"), node.get("schema_name") or
             node.get("schema"), node.get("table_name") or node.get("function_name"))  # fmt: skip
    return ".".join(str(p) for p in parts if p)


def run(
    con: duckdb.DuckDBPyConnection,
    fetch: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    timeout: float,
) -> T:
    """`fetch(con)`, interrupted after `timeout` seconds.

    Raises:
        TimedOutError: the timer fired before `fetch` returned.
    """
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    timer.start()
    try:
        return fetch(con)
    except duckdb.InterruptException as exc:
        if fired.is_set():
            raise TimedOutError from exc
        raise
    finally:
        timer.cancel()


def check_timeout(timeout: object) -> float:
    """`timeout` as seconds (> 0, finite), or raise `ValueError`."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    seconds = float(timeout)
    if not 0 < seconds < 1e9:
        raise ValueError(f"timeout must be > 0 seconds (and finite), got {timeout!r}")
    return seconds


def _host_paths() -> Iterator[str]:
    for path in (os.getcwd(), str(Path.home()), os.environ.get("TMPDIR", "")):
        if len(path) > 1:
            yield path.rstrip("/")


def scrub(message: str) -> str:
    """`message` without the host's working directory, home or temp directory."""
    for path in sorted(set(_host_paths()), key=len, reverse=True):
        message = message.replace(path, "<host>")
    return message
