"""Errors of the format layer. Each names what was wrong: dataset, shard, sample, column."""

from __future__ import annotations

from ferroload_core import ContextError


class FormatError(ContextError):
    """Base of the format layer's errors; carries the context that explains them.

    Attributes:
        uri: the dataset root.
        shard: the shard involved, relative to the root.
        sample_id: the sample involved.
        column: the modality or metadata column involved.
    """

    uri: str | None = None
    shard: str | None = None
    sample_id: str | None = None
    column: str | None = None


class DatasetNotFoundError(FormatError, FileNotFoundError):
    """No dataset at the given URI."""


class NotADatasetError(DatasetNotFoundError):
    """The URI holds files, but not a ferroload dataset."""


class DatasetNameError(FormatError, ValueError):
    """A writer named a dataset differently from the one at its URI."""


class DatasetExistsError(FormatError, FileExistsError):
    """A dataset is already at the destination and the write's `mode` is `"create"` (the
    default of importers, `copy_to` and `subset`): pass `mode="append"` to add to it or
    `mode="overwrite"` to replace its content in a new version (the CLI's `--append` /
    `--overwrite`).

    Attributes:
        uri: the destination.
    """


class VersionNotFoundError(FormatError, FileNotFoundError):
    """The dataset has no such version."""


class ManifestError(FormatError, ValueError):
    """A manifest that cannot be parsed or is inconsistent."""


class UnsupportedFormatVersionError(ManifestError):
    """The dataset was written in a format version this ferroload cannot read."""


class NeedsUpgradeError(FormatError, PermissionError):
    """A write (append, map, compact, gc, ...) on a dataset written by ferroload-rs 0.1.1:
    readers read it as it is, writers need it upgraded first (`ferroload upgrade ROOT`)."""


class InvalidSampleIdError(FormatError, ValueError):
    """A sample id that could escape the shard or confuse WebDataset."""


class DuplicateSampleError(FormatError, ValueError):
    """A sample id that the dataset or this writer already has."""


class InvalidModalityError(FormatError, ValueError):
    """A modality declaration with a bad name, extension, kind or codec hint."""


class UndeclaredModalityError(FormatError, ValueError):
    """A payload for a modality that was never declared."""


class InvalidPayloadError(FormatError, TypeError):
    """A payload that is not bytes-like."""


class SchemaConflictError(FormatError, TypeError):
    """Metadata whose type conflicts with earlier samples or with the dataset's schema."""


class WriterClosedError(FormatError, ValueError):
    """The writer was already closed or aborted."""


class CommitConflictError(FormatError, RuntimeError):
    """A concurrent commit changed the dataset in a way this commit cannot be merged with."""


class ColumnNotFoundError(FormatError, KeyError):
    """A modality or metadata column the dataset does not have."""


class SampleIndexError(FormatError, IndexError):
    """A sample position outside the dataset."""


class ShardNotFoundError(FormatError, FileNotFoundError):
    """A shard listed in the manifest is missing."""


class ShardTruncatedError(FormatError, EOFError):
    """A shard ends before a sample's bytes do."""


class PayloadRangeError(FormatError, ValueError):
    """An index row whose payload range does not fit its shard (negative, past the end,
    inside a tar header, or overflowing); the index or manifest was tampered with."""


class ChecksumMismatchError(FormatError, ValueError):
    """Bytes read back differ from the checksum recorded when they were written."""


class DatasetDamagedError(FormatError, ValueError):
    """`verify()` found problems; `problems` lists them."""


class QueryError(FormatError, ValueError):
    """A WHERE clause DuckDB could not run."""


class UnsafeQueryError(QueryError, PermissionError):
    """A WHERE clause that tries to reach beyond the dataset's own index."""


class QueryTimeoutError(QueryError, TimeoutError):
    """A WHERE clause or SQL query that ran longer than its timeout and was interrupted."""


class InvalidLayerError(FormatError, ValueError):
    """A layer name, identity, partition or row selection that is invalid.

    Attributes:
        layer: the layer involved.
    """


class LayerExistsError(FormatError, FileExistsError):
    """The dataset already has a layer of that name, computed differently (another
    identity); pass `overwrite=True` to replace it in a new version.

    Attributes:
        layer: the layer's name.
        identity: the identity of the committed layer.
    """


class IncompleteLayerError(FormatError, RuntimeError):
    """A layer commit found partitions that were never staged; run them, then commit.

    Attributes:
        layer: the layer's name.
        missing: the partition numbers that are not staged.
    """
