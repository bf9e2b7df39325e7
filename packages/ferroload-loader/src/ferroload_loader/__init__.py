"""ferroload-loader: deterministic sampling, prefetch and batching into numpy, torch and Lightning.

A skeleton for now: the loader arrives with its own issue. torch and Lightning adapters
will be opt-in submodules behind the `torch` and `lightning` extras.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-loader")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__"]
