"""ferroload-catalog: the dataset catalog (name -> URI, versions, tags).

A skeleton for now: the catalog arrives with its own issue.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-catalog")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__"]
