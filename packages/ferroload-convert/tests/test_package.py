from __future__ import annotations

from importlib.metadata import version

import ferroload_convert
from ferroload_convert import (
    BadInputError,
    ConvertError,
    ConvertOptionError,
    InputNotFoundError,
    MissingDependencyError,
    OutputExistsError,
)
from ferroload_core import FerroloadError


def test_public_api() -> None:
    # The import-hygiene check (no torch, Ray or PyAV on import) is tests-e2e/test_packaging.py.
    assert ferroload_convert.__version__ == version("ferroload-convert")
    assert all(hasattr(ferroload_convert, name) for name in ferroload_convert.__all__)


def test_errors_are_ferroload_errors_and_builtins() -> None:
    assert issubclass(ConvertError, FerroloadError)
    for error, builtin in [
        (BadInputError, ValueError),
        (ConvertOptionError, ValueError),
        (InputNotFoundError, FileNotFoundError),
        (OutputExistsError, FileExistsError),
        (MissingDependencyError, ImportError),
    ]:
        assert issubclass(error, ConvertError) and issubclass(error, builtin)
    err = BadInputError("bad", path="/x.tar", member="k.jpg")
    assert (err.where, str(err)) == ("/x.tar (member k.jpg)", "bad")
