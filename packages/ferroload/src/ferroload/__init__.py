"""ferroload: a fast, cloud-native dataset format and runtime for ML training.

The user-facing facade: it re-exports the public API of the ferroload packages.
Two submodules are attributes of `ferroload`, imported on first use (so that
`import ferroload` stays light): `ferroload.codec`, the codec package
(`ferroload.codec.decode_image`, …), and `ferroload.loader`, the loader's, with its
torch and Lightning adapters (`ferroload.loader.FerroTorchDataset`, and the submodules
`ferroload.loader.torch` and `ferroload.loader.lightning`); importing `ferroload` never
imports torch.

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

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from ferroload_codec import (
    AudioTooLongError,
    CodecUnavailableError,
    DecodeError,
    ImageTooLargeError,
    UnsupportedFormatError,
)
from ferroload_convert import (
    BadInputError,
    ConvertError,
    ConvertOptionError,
    ExportReport,
    ImportReport,
    InputNotFoundError,
    MissingDependencyError,
    OutputExistsError,
    SkippedInput,
    UnsafeNameError,
    export_image_folder,
    export_webdataset,
    import_hf,
    import_image_folder,
    import_parquet,
    import_webdataset,
)
from ferroload_core import FerroloadError, UnsafePathError
from ferroload_format import (
    ChecksumMismatchError,
    ColumnNotFoundError,
    CommitConflictError,
    DatasetDamagedError,
    DatasetExistsError,
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    FormatError,
    GcReport,
    IncompleteLayerError,
    InvalidLayerError,
    InvalidModalityError,
    InvalidPayloadError,
    InvalidSampleIdError,
    LayerExistsError,
    LayerInfo,
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
    UpgradeReport,
    VerifyReport,
    VersionInfo,
    VersionNotFoundError,
    WriterClosedError,
    gc,
    upgrade,
)
from ferroload_loader import (
    FerroLoader,
    LoaderOptionError,
    LoaderOptions,
    LoaderStateError,
    LoaderStats,
    Mixture,
    RandomResizedCrop,
    Sampler,
    make_loader,
    mix,
)
from ferroload_map import (
    ExecutorUnavailableError,
    MapError,
    MapOutputError,
    MapReport,
    MapSpecError,
    map_dataset,
)
from ferroload_store import (
    BlockCache,
    CacheError,
    InvalidURIError,
    IOOptions,
    NotARegularFileError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StorageOptionsError,
    Store,
    StoreError,
    StoreTimeoutError,
    UnsupportedOperationError,
    open_store,
)

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers
    from ferroload import codec as codec
    from ferroload import loader as loader

# ferroload_format's Dataset, Writer and LayerWriter, ferroload_map's executors and the
# format's Modality, each also taking ferroload-rs 0.1.1's spellings (ferroload.compat)
from ferroload.compat._dataset import Dataset, LayerWriter, Writer
from ferroload.compat._executor import (
    LocalExecutor,
    RayExecutor,
    StaticPartitionExecutor,
)
from ferroload.compat._map import Modality

if not TYPE_CHECKING:  # ferroload_loader's, also taking ferroload-rs 0.1.1's calls
    from ferroload.compat._loader import AnyFerroLoader as FerroLoader
    from ferroload.compat._loader import Sampler, make_loader

try:
    __version__ = version("ferroload")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "AudioTooLongError",
    "BadInputError",
    "BlockCache",
    "CacheError",
    "ChecksumMismatchError",
    "CodecUnavailableError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "ConvertError",
    "ConvertOptionError",
    "Dataset",
    "DatasetDamagedError",
    "DatasetExistsError",
    "DatasetNameError",
    "DatasetNotFoundError",
    "DecodeError",
    "DuplicateSampleError",
    "ExecutorUnavailableError",
    "ExportReport",
    "FerroLoader",
    "FerroloadError",
    "FormatError",
    "GcReport",
    "IOOptions",
    "ImageTooLargeError",
    "ImportReport",
    "IncompleteLayerError",
    "InputNotFoundError",
    "InvalidLayerError",
    "InvalidModalityError",
    "InvalidPayloadError",
    "InvalidSampleIdError",
    "InvalidURIError",
    "LayerExistsError",
    "LayerInfo",
    "LayerWriter",
    "LoaderOptionError",
    "LoaderOptions",
    "LoaderStateError",
    "LoaderStats",
    "LocalExecutor",
    "ManifestError",
    "MapError",
    "MapOutputError",
    "MapReport",
    "MapSpecError",
    "MissingDependencyError",
    "Mixture",
    "Modality",
    "NeedsUpgradeError",
    "NotADatasetError",
    "NotARegularFileError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectTruncatedError",
    "OutputExistsError",
    "PayloadRangeError",
    "QueryError",
    "QueryTimeoutError",
    "RandomResizedCrop",
    "RayExecutor",
    "SampleIndexError",
    "Sampler",
    "SchemaConflictError",
    "ShardNotFoundError",
    "ShardTruncatedError",
    "SkippedInput",
    "StaticPartitionExecutor",
    "StorageOptionsError",
    "Store",
    "StoreError",
    "StoreTimeoutError",
    "UndeclaredModalityError",
    "UnsafeNameError",
    "UnsafePathError",
    "UnsafeQueryError",
    "UnsupportedFormatError",
    "UnsupportedFormatVersionError",
    "UnsupportedOperationError",
    "UpgradeReport",
    "VerifyReport",
    "VersionInfo",
    "VersionNotFoundError",
    "Writer",
    "WriterClosedError",
    "__version__",
    "export_image_folder",
    "export_webdataset",
    "gc",
    "import_hf",
    "import_image_folder",
    "import_parquet",
    "import_webdataset",
    "make_loader",
    "map_dataset",
    "mix",
    "open_store",
    "upgrade",
]

#: Submodules that are attributes of `ferroload`, imported on first access (`dataset`,
#: `executor` and `cli` are ferroload-rs 0.1.1's, deprecated: `ferroload.compat`).
_SUBMODULES = ("codec", "loader", "dataset", "executor", "cli")
#: ferroload-rs 0.1.1's names, resolved on first access from `ferroload.compat`
#: (deprecated, removed in 0.4: docs/migrating.md).
_COMPAT = {
    "Annotation": "ferroload.compat._map",
    "Topology": "ferroload.compat._executor",
    "detect_topology": "ferroload.compat._executor",
    "select_executor": "ferroload.compat._executor",
    "commit_layer": "ferroload.compat._executor",
    "Executor": "ferroload.compat._executor",
    "FerroTorchDataset": "ferroload.compat._loader",
    "FerroIterableDataset": "ferroload.compat._loader",
    "FerroSampler": "ferroload.compat._loader",
    "PrefetchLoader": "ferroload.compat._loader",
    "batched": "ferroload.compat._loader",
    "numpy_collate": "ferroload.compat._loader",
    "subset_dataset": "ferroload.compat._loader",
}
#: 0.1.1's aliases of names ferroload still has.
_ALIASES = {"FerroDataset": "Dataset", "FerroWriter": "Writer"}


def _lazy_submodule(name: str) -> object:
    """The module-level `__getattr__` (PEP 562): `ferroload.codec` and `ferroload.loader`,
    imported on first access, and ferroload-rs 0.1.1's names (`ferroload.compat`)."""
    if name in _ALIASES:
        from ferroload.compat import deprecated

        deprecated(f"ferroload.{name}", f"ferroload.{_ALIASES[name]}")
        found: object = globals()[_ALIASES[name]]
        return found
    if name in _COMPAT:
        attr: object = getattr(importlib.import_module(_COMPAT[name]), name)
        return attr
    if name not in _SUBMODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES, *_COMPAT, *_ALIASES})


if not TYPE_CHECKING:  # type checkers see the imports above: a typo stays an error for them
    __getattr__ = _lazy_submodule
