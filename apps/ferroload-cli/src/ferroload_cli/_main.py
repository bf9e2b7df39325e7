"""The whole `ferroload` command: the app with every command module registered."""

from ferroload_cli import (
    _catalog_cmd,
    _compat_cmds,
    _convert,
    _export,
    _inspect,
    _machine,
    _ops,
)
from ferroload_cli._app import app, main, run

__all__ = [
    "_catalog_cmd",
    "_compat_cmds",
    "_convert",
    "_export",
    "_inspect",
    "_machine",
    "_ops",
    "app",
    "main",
    "run",
]
