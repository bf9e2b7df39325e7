"""ferroload-loader: deterministic, resumable, parallel batches for training.

- `make_loader(source, batch_size=..., images=..., meta=...)` -> `FerroLoader`: batches of
  decoded samples (numpy, or torch tensors), built ahead on a background thread with
  decoding on a thread pool; no worker processes.
- `LoaderOptions`: those options as one frozen object (`make_loader(source,
  options=...)`), taken alike by the torch and Lightning adapters.
- `Sampler`: the order: one permutation per (seed, epoch), the same whatever the number
  of ranks, threads or worker processes; ranks get equal shares; exact mid-epoch resume,
  also under another world size. Passes follow torch: each `iter()` starts the current
  epoch, a finished pass moves to the next epoch, `set_epoch` wins, `len()` is the epoch.
- Augmentation and model-ready output in the decode threads (`crop="random"`,
  `RandomResizedCrop`, `hflip`, `layout`, `dtype`, `normalize`), drawn from each
  sample's seed: bit-identical across threads, workers, ranks and resumes.
- `LoaderOptionError`, `LoaderStateError`: an option, or a state given to
  `load_state_dict`, that a loader refuses (both `ValueError`s), naming the option or
  key and its value; `MAX_WORLD_SIZE` and `MAX_SHUFFLE_BUFFER` bound those options.
- `mix(sources, weights)`: weighted mixing of datasets, deterministic and resumable.
- `RandomResizedCrop` (`make_loader(crop=...)`), with `hflip`, `layout`, `dtype` and
  `normalize`: seeded augmentation and model-ready image tensors, made in the decode
  threads.
- `ferroload_loader.torch` (extra `torch`) and `ferroload_loader.lightning` (extra
  `lightning`) adapt it to `torch.utils.data` and Lightning; importing this package
  imports neither.

ferroload-rs 0.1.1's scripts imported its loader names from `ferroload_loader`
(`FerroTorchDataset`, `subset_dataset`, ...): they are reached here too, on first use,
from `ferroload.compat` (deprecated; they warn), and are not part of `__all__`.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ferroload_loader._augment import RandomResizedCrop
from ferroload_loader._checks import MAX_SHUFFLE_BUFFER, MAX_WORLD_SIZE
from ferroload_loader._errors import LoaderOptionError, LoaderStateError
from ferroload_loader._loader import FerroLoader, LoaderStats, make_loader
from ferroload_loader._options import DEFAULT_PREFETCH_BYTES, LoaderOptions
from ferroload_loader._order import DEFAULT_SHUFFLE_BUFFER, SHUFFLE_RAMP_START, locality
from ferroload_loader._sampler import Sampler
from ferroload_loader._source import Mixture, mix

try:
    __version__ = version("ferroload-loader")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_PREFETCH_BYTES",
    "DEFAULT_SHUFFLE_BUFFER",
    "MAX_SHUFFLE_BUFFER",
    "MAX_WORLD_SIZE",
    "SHUFFLE_RAMP_START",
    "FerroLoader",
    "LoaderOptionError",
    "LoaderOptions",
    "LoaderStateError",
    "LoaderStats",
    "Mixture",
    "RandomResizedCrop",
    "Sampler",
    "__version__",
    "locality",
    "make_loader",
    "mix",
]

#: ferroload-rs 0.1.1's loader names, served by `ferroload.compat._loader` on first use
#: (the names 0.2 has itself, `make_loader`, `FerroLoader` and `Sampler`, stay 0.2's).
_RS011_NAMES = frozenset(
    {
        "FerroIterableDataset",
        "FerroSampler",
        "FerroTorchDataset",
        "PrefetchLoader",
        "batched",
        "numpy_collate",
        "subset_dataset",
    }
)


def _rs011_attribute(name: str) -> Any:
    """The module-level `__getattr__` (PEP 562): ferroload-rs 0.1.1's loader names, from
    the facade's compatibility module (the `loader.rs011` entry point of
    `ferroload.plugins`: this package never imports the facade), imported on first use
    (importing this package stays light)."""
    if name not in _RS011_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ferroload_format._plugins import plugin  # the facade registers "loader.rs011"

    try:
        module = plugin("loader.rs011", needed_by=f"{__name__}.{name}")
    except ImportError as exc:
        raise AttributeError(
            f"{__name__}.{name} is ferroload-rs 0.1.1's name, served by the ferroload "
            "package (pip install ferroload): the 0.2 API is in ferroload_loader.__all__"
        ) from exc
    return getattr(module, name)


if not TYPE_CHECKING:  # type checkers see no `__getattr__`: a typo stays an error for them
    __getattr__ = _rs011_attribute
