"""`ferroload.loader`: the loader package, with its torch and Lightning adapters.

`make_loader`, `Sampler`, `mix` and the rest of `ferroload_loader` are here; the adapters
that need torch or Lightning (`FerroTorchDataset`, `FerroIterableDataset`,
`FerroDataModule`, `LightningLoader`) are imported on first use, so that importing
`ferroload` never imports torch.

    >>> import ferroload.loader
    >>> ferroload.loader.make_loader is ferroload.make_loader
    True
"""

from __future__ import annotations

import importlib
from typing import Any

import ferroload_loader
from ferroload_loader import *  # noqa: F403  (the whole public API, by design)

_LAZY = {
    "FerroTorchDataset": "ferroload_loader.torch",
    "FerroIterableDataset": "ferroload_loader.torch",
    "FerroDataModule": "ferroload_loader.lightning",
    "LightningLoader": "ferroload_loader.lightning",
}

__all__ = [*ferroload_loader.__all__, *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ferroload.loader' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
