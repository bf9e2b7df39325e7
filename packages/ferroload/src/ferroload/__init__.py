"""ferroload: a fast, cloud-native dataset format and runtime for ML training.

The user-facing facade: it re-exports the public API of the ferroload packages.

    >>> import ferroload
    >>> w = ferroload.Writer("memory://docs/facade", "demo")
    >>> w.declare("image", "jpg", "tensor", "image")
    >>> w.add("s0000", {"image": b"..."}, {"label": 3, "caption": "a cat"})
    >>> w.close()
    1
    >>> ds = ferroload.Dataset.open("memory://docs/facade")
    >>> ds.subset("label = 3", return_indices=True).tolist()
    [0]
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_format import (
    ChecksumMismatchError,
    ColumnNotFoundError,
    CommitConflictError,
    Dataset,
    DatasetDamagedError,
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    FormatError,
    GcReport,
    InvalidModalityError,
    InvalidPayloadError,
    InvalidSampleIdError,
    ManifestError,
    Modality,
    NotADatasetError,
    QueryError,
    SampleIndexError,
    SchemaConflictError,
    ShardNotFoundError,
    ShardTruncatedError,
    UndeclaredModalityError,
    UnsafeQueryError,
    UnsupportedFormatVersionError,
    VerifyReport,
    VersionInfo,
    VersionNotFoundError,
    Writer,
    WriterClosedError,
    gc,
)
from ferroload_store import (
    FerroloadError,
    InvalidURIError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    Store,
    StoreError,
    UnsupportedOperationError,
    open_store,
)

try:
    __version__ = version("ferroload")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "ChecksumMismatchError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "Dataset",
    "DatasetDamagedError",
    "DatasetNameError",
    "DatasetNotFoundError",
    "DuplicateSampleError",
    "FerroloadError",
    "FormatError",
    "GcReport",
    "InvalidModalityError",
    "InvalidPayloadError",
    "InvalidSampleIdError",
    "InvalidURIError",
    "ManifestError",
    "Modality",
    "NotADatasetError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectTruncatedError",
    "QueryError",
    "SampleIndexError",
    "SchemaConflictError",
    "ShardNotFoundError",
    "ShardTruncatedError",
    "Store",
    "StoreError",
    "UndeclaredModalityError",
    "UnsafeQueryError",
    "UnsupportedFormatVersionError",
    "UnsupportedOperationError",
    "VerifyReport",
    "VersionInfo",
    "VersionNotFoundError",
    "Writer",
    "WriterClosedError",
    "__version__",
    "gc",
    "open_store",
]
