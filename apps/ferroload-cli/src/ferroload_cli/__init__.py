"""ferroload-cli: the `ferroload` command (`python -m ferroload_cli` runs it too).

Commands: `info`, `schema`, `head`, `get`, `sql`, `subset`, `verify`, `log`, `gc`,
`cache`, `import`, `export`, `bench`, `doctor`, `catalog`, `demo`; see `ferroload --help`
and docs/api/cli.md.
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_cli._main import main, run

try:
    __version__ = version("ferroload-cli")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__", "main", "run"]
