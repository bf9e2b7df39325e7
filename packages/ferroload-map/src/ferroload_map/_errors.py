"""Errors of the map engine: each a `FerroloadError` and the builtin a caller would expect."""

from __future__ import annotations

from ferroload_core import ContextError, FerroloadError


class _MapContextError(ContextError):
    """The context a map failure carries (None where it does not apply)."""

    uri: str | None = None
    layer: str | None = None
    sample_id: str | None = None
    column: str | None = None
    partition: int | None = None


class MapSpecError(_MapContextError, ValueError):
    """A map that cannot start: an unknown output type, a function whose identity cannot
    be computed (pass `version=`), a bad option.

    Attributes:
        uri: the dataset root.
        layer: the layer name.
        column: the input or output involved.
    """


class MapError(_MapContextError, RuntimeError):
    """`fn` failed on a batch (or a sample could not be decoded for it).

    Attributes:
        uri: the dataset root.
        layer: the layer name.
        sample_id: the first sample of the failing batch (the failing sample once known).
        column: the input or output involved, if any.
        partition: the partition being computed.
    """


class MapOutputError(MapError, ValueError):
    """`fn` returned outputs that do not match `outputs=`: a missing or extra name, a
    wrong length, or a value that does not fit the declared type."""


class ExecutorUnavailableError(FerroloadError, ImportError):
    """An executor whose optional dependency (Ray) is not installed."""
