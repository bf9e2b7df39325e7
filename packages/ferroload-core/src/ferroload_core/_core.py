"""The error root and the CPU count."""

from __future__ import annotations

import os
from typing import Any


class FerroloadError(Exception):
    """Root of every error ferroload raises.

    Every concrete ferroload error also subclasses a builtin (`ValueError`,
    `FileNotFoundError`, …), so `except ValueError` keeps working for code that does not
    know ferroload, and `except FerroloadError` catches everything ferroload raises.
    """


def available_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask, else the machine's count).

    Examples:
        >>> available_cpus() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity masks
        return max(1, os.cpu_count() or 1)


class ContextError(FerroloadError):
    """A `FerroloadError` that carries the context explaining it as attributes.

    Each keyword given becomes an attribute (`ContextError("bad row", row=3).row == 3`);
    a subclass declares the attributes it documents as class attributes defaulting to
    None, so that every instance has them. `str()` is the message as written (builtins
    such as `KeyError` or `OSError`, mixed into subclasses, would quote or reformat it).

    Examples:
        >>> class ShardError(ContextError):
        ...     shard: str | None = None
        >>> err = ShardError("shard is short", shard="shards/0.tar", offset=12)
        >>> err.shard, err.offset, str(err)
        ('shards/0.tar', 12, 'shard is short')
        >>> ShardError("no context").shard is None
        True
    """

    def __init__(self, message: str, **context: Any) -> None:
        for key, value in context.items():
            setattr(self, key, value)
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
