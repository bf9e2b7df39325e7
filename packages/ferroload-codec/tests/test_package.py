from __future__ import annotations

from importlib.metadata import version

import ferroload_codec


def test_version_comes_from_the_distribution() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_codec.__version__ == version("ferroload-codec")
    assert all(
        hasattr(ferroload_codec, name) for name in ferroload_codec.__all__
    )  # order: ruff's RUF022
