"""DuckDB's progress bar, kept off every connection the library opens (it imports
DuckDB only when called: `import ferroload_format` does not import it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


def hide_progress_bar(con: duckdb.DuckDBPyConnection) -> None:
    """Turn DuckDB's progress bar off on `con`: a library never draws on stdout, and
    DuckDB turns the bar on by itself where it takes the session for an interactive one
    (a REPL, `python -c`, a notebook). In Jupyter without ipywidgets DuckDB refuses to
    change the setting; it draws no bar there either.

    Example:
        >>> import duckdb
        >>> con = duckdb.connect()
        >>> hide_progress_bar(con)
        >>> con.sql("SELECT current_setting('enable_progress_bar')").fetchall()
        [(False,)]
    """
    import duckdb

    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.InvalidInputException as exc:
        if "ipywidgets" not in str(exc):
            raise
