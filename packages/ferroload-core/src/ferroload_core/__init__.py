"""ferroload-core: what every ferroload package shares, with no dependencies.

- `FerroloadError`: the root of every error ferroload raises. Each concrete error also
  subclasses the builtin a caller would catch without knowing ferroload. `ContextError`:
  one that carries its context (uri, path, sample id, …) as attributes.
- `available_cpus()`: the cores this process may run on (thread pool defaults).
- `check_relative_path()`: the one rule for paths read from a dataset; it raises
  `UnsafePathError` for a path that could leave the dataset root.
- `progress_reporter()`: the one way long calls resolve `progress=True | False | callable`.
- `sniff_ext()`, `sniff_image()`, `sniff_audio()`: the one magic-byte table (what bytes are).
- `rank_from_env()`: rank and world size from torchrun's or a SLURM array's environment.
- `backoff_delay()`: the wait before a retry (exponential, full jitter).
- `LRU`: the one in-process least-recently-used cache (count or weight bound).
- `exit_process()`: leave a finished process without the interpreter's teardown (where
  pyarrow's thread pools now and then abort).

Importing it sets `MIMALLOC_ALLOW_THP=0` unless set (`_arrow_env`: pyarrow's allocator
then does not ask for transparent huge pages, whose page faults could stall for tens of
ms); every ferroload package imports it before pyarrow.
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_core._arrow_env import set_arrow_allocator_defaults
from ferroload_core._core import ContextError, FerroloadError, available_cpus
from ferroload_core._exit import exit_process
from ferroload_core._lru import LRU
from ferroload_core._magic import (
    JPEG_MAGIC,
    JPEG_SOF_MARKERS,
    MEDIA_EXTS,
    PNG_MAGIC,
    sniff_audio,
    sniff_ext,
    sniff_image,
)
from ferroload_core._paths import UnsafePathError, check_relative_path
from ferroload_core._progress import (
    ProgressArg,
    ProgressCallback,
    progress_reporter,
    progress_wanted,
)
from ferroload_core._rank import rank_from_env
from ferroload_core._retry import backoff_delay

set_arrow_allocator_defaults()  # before any ferroload package loads pyarrow

try:
    __version__ = version("ferroload-core")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "JPEG_MAGIC",
    "JPEG_SOF_MARKERS",
    "LRU",
    "MEDIA_EXTS",
    "PNG_MAGIC",
    "ContextError",
    "FerroloadError",
    "ProgressArg",
    "ProgressCallback",
    "UnsafePathError",
    "__version__",
    "available_cpus",
    "backoff_delay",
    "check_relative_path",
    "exit_process",
    "progress_reporter",
    "progress_wanted",
    "rank_from_env",
    "sniff_audio",
    "sniff_ext",
    "sniff_image",
]
