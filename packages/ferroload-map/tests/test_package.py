from __future__ import annotations

from importlib.metadata import entry_points, version

import ferroload_map


def test_version_comes_from_the_distribution() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_map.__version__ == version("ferroload-map")
    assert all(
        hasattr(ferroload_map, name) for name in ferroload_map.__all__
    )  # order: ruff's RUF022


def test_registers_dataset_map_for_the_format() -> None:
    # ferroload_format never imports this package: it finds `Dataset.map` here
    (ep,) = entry_points(group="ferroload.plugins", name="dataset.map")
    assert ep.load() is ferroload_map.map_dataset
    assert ep.dist is not None and ep.dist.name == "ferroload-map"
