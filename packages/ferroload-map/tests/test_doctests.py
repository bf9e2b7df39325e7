from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ferroload_map._executors",
    "ferroload_map._map",
    "ferroload_map._plan",
    "ferroload_map._spec",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
