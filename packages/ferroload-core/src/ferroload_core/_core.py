"""The error root and the CPU count."""

from __future__ import annotations

import os


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
