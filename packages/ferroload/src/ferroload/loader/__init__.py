"""`ferroload.loader`: the loader package, with its torch and Lightning adapters.

`make_loader`, `Sampler`, `mix` and the rest of `ferroload_loader` are here. The adapters
that need torch or Lightning are the submodules `ferroload.loader.torch`
(`FerroTorchDataset`, `FerroIterableDataset`; the `ferroload_loader.torch` module) and
`ferroload.loader.lightning` (`FerroDataModule`, `LightningLoader`; the
`ferroload_loader.lightning` module). They are imported on first use, whether imported
(`from ferroload.loader.lightning import FerroDataModule`) or reached as attributes
(`ferroload.loader.FerroTorchDataset`, `ferroload.loader.torch`), so that importing
`ferroload` never imports torch.

ferroload-rs 0.1.1's loader names that 0.2 does not use for something else
(`FerroSampler`, `PrefetchLoader`, `batched`, `numpy_collate`, `subset_dataset`) are
reached here too, from `ferroload.compat` (deprecated; they warn), and are not part of
`__all__`. `make_loader`, `FerroLoader` and `Sampler` are the facade's: 0.2's, also
taking 0.1.1's calls (with a FutureWarning). `FerroTorchDataset` and `FerroIterableDataset`
here are 0.2's.

    >>> import ferroload.loader
    >>> ferroload.loader.make_loader is ferroload.make_loader
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import ferroload_loader
from ferroload.compat import _loader as _compat_loader
from ferroload_loader import *  # noqa: F403  (the whole public API, by design)

if not TYPE_CHECKING:  # 0.2's, also taking ferroload-rs 0.1.1's calls (`ferroload.compat`)
    FerroLoader = _compat_loader.AnyFerroLoader
    Sampler = _compat_loader.Sampler
    make_loader = _compat_loader.make_loader

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers
    from ferroload.compat._loader import FerroSampler as FerroSampler
    from ferroload.compat._loader import PrefetchLoader as PrefetchLoader
    from ferroload.compat._loader import batched as batched
    from ferroload.compat._loader import numpy_collate as numpy_collate
    from ferroload.compat._loader import subset_dataset as subset_dataset
    from ferroload.loader import lightning as lightning
    from ferroload.loader import torch as torch
    from ferroload_loader.lightning import FerroDataModule as FerroDataModule
    from ferroload_loader.lightning import LightningLoader as LightningLoader
    from ferroload_loader.torch import FerroBatch as FerroBatch
    from ferroload_loader.torch import FerroIterableDataset as FerroIterableDataset
    from ferroload_loader.torch import FerroTorchDataset as FerroTorchDataset

#: Submodules imported on first access (they import torch or Lightning).
_SUBMODULES = ("lightning", "torch")
#: Adapter classes imported on first access, and the module each comes from.
_LAZY = {
    "FerroBatch": "ferroload_loader.torch",
    "FerroTorchDataset": "ferroload_loader.torch",
    "FerroIterableDataset": "ferroload_loader.torch",
    "FerroDataModule": "ferroload_loader.lightning",
    "LightningLoader": "ferroload_loader.lightning",
}
#: The torch adapters as handed out here: a call with an argument only ferroload-rs
#: 0.1.1 took (`out=`, `raw=`, ...) makes 0.1.1's per-sample dataset (with a warning).
_ADAPTERS = {"FerroTorchDataset": "TorchDataset", "FerroIterableDataset": "IterableDataset"}
#: ferroload-rs 0.1.1's names (deprecated), from `ferroload.compat._loader` on first
#: access; not in `__all__` or `dir()`.
_RS011 = ("FerroSampler", "PrefetchLoader", "batched", "numpy_collate", "subset_dataset")

__all__ = [*ferroload_loader.__all__, *_LAZY]


def _lazy_attribute(name: str) -> object:
    """The module-level `__getattr__` (PEP 562): an adapter submodule or class, imported
    on first access."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _ADAPTERS:  # 0.2's class, also taking 0.1.1's calls (`ferroload.compat`)
        return getattr(_compat_loader, _ADAPTERS[name])
    module = "ferroload.compat._loader" if name in _RS011 else _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


if not TYPE_CHECKING:  # type checkers see the imports above: a typo stays an error for them
    __getattr__ = _lazy_attribute
