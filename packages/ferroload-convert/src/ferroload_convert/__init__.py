"""ferroload convert: importers and exporters between ferroload and the formats people have."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-convert")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
