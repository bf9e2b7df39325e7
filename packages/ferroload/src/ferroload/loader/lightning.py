"""`ferroload.loader.lightning`: the Lightning adapters, `ferroload_loader.lightning`
(extra `lightning`).

Importing this module imports Lightning and torch.

    >>> from ferroload.loader.lightning import FerroDataModule
    >>> FerroDataModule.__module__
    'ferroload_loader.lightning'
"""

import ferroload_loader.lightning
from ferroload_loader.lightning import *  # noqa: F403  (the whole module, by design)

__all__ = list(ferroload_loader.lightning.__all__)
