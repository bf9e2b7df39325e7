"""Errors of the loader: an option it was given, or a state it was asked to resume."""

from __future__ import annotations

from typing import Any

from ferroload_core import ContextError


class LoaderOptionError(ContextError, ValueError):
    """An option of a loader (or an argument of its sampler: `set_epoch`'s epoch) has a
    value it cannot take: another type (`True` where a count goes, `'False'` where a
    bool goes), or outside its range. Raised when the options are made, never while
    iterating.

    Attributes:
        option: the option's name (`seed`, `world_size`, `resize`, ...).
        value: the value given.
    """

    __module__ = "ferroload_loader"  # its public name (messages, docs, pickles)

    option: str | None = None
    value: Any = None


class LoaderStateError(ContextError, ValueError):
    """A state given to `load_state_dict` is not one this loader can resume: a key
    missing or unknown, a value of another type or out of range, or the state of another
    dataset, order or DataLoader worker. Raised by `load_state_dict`, before anything
    changes, never while iterating.

    Attributes:
        key: the key at fault, with its path (`sampler.consumed`, `batches`).
        value: its value (None for a missing key).
    """

    __module__ = "ferroload_loader"

    key: str | None = None
    value: Any = None
