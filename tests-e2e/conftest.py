from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Shared test data helpers (_colours.py) are imported by name (pytest runs with importlib mode).
HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "heavy(cost): a long test (cost: rough seconds), started before the others"
    )


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: the items that run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the heavy tests first, the longest first, spread over the xdist workers.

    A hook of this conftest sees the whole session's items. pytest-xdist's work stealing
    gives each of N workers one contiguous share of the items at the start (the first
    len // N, then a share of the rest, ...) and moves tests from the end of a busy worker's
    list to an idle one. So each worker's share starts with its part of the heavy tests
    (dealt longest first to the least loaded), and the short tests that follow fill the
    gaps; no worker is left running a long test alone at the end. Every worker computes
    the same order (xdist checks that their collections are equal).
    """
    cost: dict[pytest.Item, float] = {}
    for item in items:
        marker = item.get_closest_marker("heavy")
        if marker is not None:
            cost[item] = float(marker.args[0])
    if not cost:
        return
    heavy = sorted(cost, key=lambda item: -cost[item])  # stable: ties keep the collection order
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    bins: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in heavy:
        i = loads.index(min(loads))
        bins[i].append(item)
        loads[i] += cost[item]
    rest = [item for item in items if item not in cost]
    # Worker i's share: xdist gives len(pending) // (workers - i) of what is left to each.
    ordered: list[pytest.Item] = []
    left = len(items)
    for i, share in enumerate(bins):
        size = left // (workers - i)
        take = max(0, size - len(share))
        ordered += share + rest[:take]
        rest = rest[take:]
        left -= size
    ordered += rest
    assert len(ordered) == len(items)
    items[:] = ordered
