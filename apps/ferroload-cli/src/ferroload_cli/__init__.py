"""ferroload-cli: the `ferroload` command.

A skeleton for now: the commands arrive with their own issue; the demo runs with
`python -m ferroload.demo`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-cli")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__"]
