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
"""

from importlib.metadata import PackageNotFoundError, version

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
