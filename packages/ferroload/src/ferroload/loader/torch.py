"""`ferroload.loader.torch`: the torch adapters, `ferroload_loader.torch` (extra `torch`).

Importing this module imports torch.

    >>> from ferroload.loader.torch import FerroTorchDataset
    >>> FerroTorchDataset.__module__
    'ferroload_loader.torch'
"""

import ferroload_loader.torch
from ferroload_loader.torch import *  # noqa: F403  (the whole module, by design)

__all__ = list(ferroload_loader.torch.__all__)
