from __future__ import annotations

from importlib.metadata import version

import ferroload_catalog


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_catalog.__version__ == version("ferroload-catalog")
    assert all(
        hasattr(ferroload_catalog, name) for name in ferroload_catalog.__all__
    )  # order: ruff's RUF022
