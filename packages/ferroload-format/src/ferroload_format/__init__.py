"""ferroload-format: the on-disk format, its writer and its reader.

Samples live in plain USTAR tar shards (readable by WebDataset unchanged), one row per
sample in a sharded, zstd Parquet index that DuckDB reads directly, and a JSON manifest
per version whose put-if-absent is the commit point. See docs/format.md for the spec.

- `Writer` adds samples and commits them as a new version.
- `Dataset` opens a version: random access, projection, coalesced batch reads, SQL
  subsets, history, verification.
- `LayerWriter` adds columns and modalities to a version as an enrichment layer.
- `gc` removes what crashed writers left behind.
"""

from importlib.metadata import PackageNotFoundError, version

import ferroload_core  # noqa: F401  (first: it sets pyarrow's allocator options; see there)
from ferroload_format._commit import MAX_COMMIT_ATTEMPTS
from ferroload_format._dataset import Dataset
from ferroload_format._errors import (
    ChecksumMismatchError,
    ColumnNotFoundError,
    CommitConflictError,
    DatasetDamagedError,
    DatasetExistsError,
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    FormatError,
    IncompleteLayerError,
    InvalidLayerError,
    InvalidModalityError,
    InvalidPayloadError,
    InvalidSampleIdError,
    LayerExistsError,
    ManifestError,
    NeedsUpgradeError,
    NotADatasetError,
    PayloadRangeError,
    QueryError,
    QueryTimeoutError,
    SampleIndexError,
    SchemaConflictError,
    ShardNotFoundError,
    ShardTruncatedError,
    UndeclaredModalityError,
    UnsafeQueryError,
    UnsupportedFormatVersionError,
    VersionNotFoundError,
    WriterClosedError,
)
from ferroload_format._gc import DEFAULT_GRACE, GcReport, gc
from ferroload_format._history import VersionInfo
from ferroload_format._index import ROW_GROUP_SIZE
from ferroload_format._index_arrays import ModalityArrays, arrow_array, numpy_column
from ferroload_format._layers import LayerWriter
from ferroload_format._manifest import FORMAT_MINOR, FORMAT_VERSION, MAX_MANIFEST_DEPTH, Manifest
from ferroload_format._names import check_modality
from ferroload_format._progress_bar import hide_progress_bar
from ferroload_format._reads import read_payloads
from ferroload_format._records import IdRun, IndexPart, LayerInfo, Modality, ShardInfo, ShardList
from ferroload_format._rs011_upgrade import UpgradeReport, upgrade
from ferroload_format._staged import StagedWrite, commit_staged, discard_staged
from ferroload_format._types import MAX_METADATA_DEPTH, type_from_json, type_to_json
from ferroload_format._verify_report import Problem, VerifyReport
from ferroload_format._versions import latest_version, list_versions, read_manifest
from ferroload_format._write_modes import WriteMode
from ferroload_format._writer import DEFAULT_SHARD_SIZE, Writer

try:
    __version__ = version("ferroload-format")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_SHARD_SIZE",
    "FORMAT_MINOR",
    "FORMAT_VERSION",
    "MAX_COMMIT_ATTEMPTS",
    "MAX_MANIFEST_DEPTH",
    "MAX_METADATA_DEPTH",
    "ROW_GROUP_SIZE",
    "ChecksumMismatchError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "Dataset",
    "DatasetDamagedError",
    "DatasetExistsError",
    "DatasetNameError",
    "DatasetNotFoundError",
    "DuplicateSampleError",
    "FormatError",
    "GcReport",
    "IdRun",
    "IncompleteLayerError",
    "IndexPart",
    "InvalidLayerError",
    "InvalidModalityError",
    "InvalidPayloadError",
    "InvalidSampleIdError",
    "LayerExistsError",
    "LayerInfo",
    "LayerWriter",
    "Manifest",
    "ManifestError",
    "Modality",
    "ModalityArrays",
    "NeedsUpgradeError",
    "NotADatasetError",
    "PayloadRangeError",
    "Problem",
    "QueryError",
    "QueryTimeoutError",
    "SampleIndexError",
    "SchemaConflictError",
    "ShardInfo",
    "ShardList",
    "ShardNotFoundError",
    "ShardTruncatedError",
    "StagedWrite",
    "UndeclaredModalityError",
    "UnsafeQueryError",
    "UnsupportedFormatVersionError",
    "UpgradeReport",
    "VerifyReport",
    "VersionInfo",
    "VersionNotFoundError",
    "WriteMode",
    "Writer",
    "WriterClosedError",
    "__version__",
    "arrow_array",
    "check_modality",
    "commit_staged",
    "discard_staged",
    "gc",
    "hide_progress_bar",
    "latest_version",
    "list_versions",
    "numpy_column",
    "read_manifest",
    "read_payloads",
    "type_from_json",
    "type_to_json",
    "upgrade",
]
