from __future__ import annotations

from importlib.metadata import version

import ferroload_cli


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_cli.__version__ == version("ferroload-cli")
    assert all(
        hasattr(ferroload_cli, name) for name in ferroload_cli.__all__
    )  # order: ruff's RUF022
