from __future__ import annotations

from importlib.metadata import version

import ferroload_loader


def test_version_comes_from_the_distribution() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_loader.__version__ == version("ferroload-loader")
    assert all(
        hasattr(ferroload_loader, name) for name in ferroload_loader.__all__
    )  # order: ruff's RUF022
