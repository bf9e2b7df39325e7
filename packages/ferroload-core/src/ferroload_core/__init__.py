"""ferroload-core: what every ferroload package shares, with no dependencies.

- `FerroloadError`: the root of every error ferroload raises. Each concrete error also
  subclasses the builtin a caller would catch without knowing ferroload.
- `available_cpus()`: the cores this process may run on (thread pool defaults).
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_core._core import FerroloadError, available_cpus

try:
    __version__ = version("ferroload-core")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["FerroloadError", "__version__", "available_cpus"]
