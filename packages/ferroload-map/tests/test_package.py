from __future__ import annotations

from importlib.metadata import version

import ferroload_map


def test_version_comes_from_the_distribution() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_map.__version__ == version("ferroload-map")
    assert all(
        hasattr(ferroload_map, name) for name in ferroload_map.__all__
    )  # order: ruff's RUF022
