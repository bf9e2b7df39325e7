"""ferroload-codec: image, audio and video decode and resize.

A skeleton for now: the codecs arrive with their own issue. It depends on no other
ferroload package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferroload-codec")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = ["__version__"]
