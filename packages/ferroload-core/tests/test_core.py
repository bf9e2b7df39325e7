from __future__ import annotations

import os

import ferroload_core
from ferroload_core import FerroloadError, available_cpus


def test_error_root_is_a_plain_exception() -> None:
    assert issubclass(FerroloadError, Exception)
    assert all(hasattr(ferroload_core, name) for name in ferroload_core.__all__)


def test_available_cpus_follows_the_affinity_mask() -> None:
    n = available_cpus()
    assert n >= 1
    if hasattr(os, "sched_getaffinity"):
        assert n == len(os.sched_getaffinity(0))
