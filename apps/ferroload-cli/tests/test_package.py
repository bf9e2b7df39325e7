from __future__ import annotations

import ferroload_cli


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_cli.__version__ == "0.1.0"
    assert ferroload_cli.__all__ == sorted(ferroload_cli.__all__)
