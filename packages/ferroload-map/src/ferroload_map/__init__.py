"""ferroload-map: `Dataset.map` enrichment layers and their executors (local, static, Ray).

A skeleton for now: the map engine arrives with its own issue.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-map")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__"]
