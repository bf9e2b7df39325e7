from __future__ import annotations

import ferroload_codec


def test_version_comes_from_the_distribution() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_codec.__version__ == "0.1.0"
    assert ferroload_codec.__all__ == sorted(ferroload_codec.__all__)
