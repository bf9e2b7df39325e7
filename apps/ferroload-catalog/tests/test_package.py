from __future__ import annotations

import ferroload_catalog


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_catalog.__version__ == "0.1.0"
    assert ferroload_catalog.__all__ == sorted(ferroload_catalog.__all__)
