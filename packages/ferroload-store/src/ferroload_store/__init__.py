"""ferroload-store: one storage interface for local disk, memory and object stores.

Built on obstore. `open_store(uri)` gives a `Store` rooted at a local path, a
`memory://name` store shared within the process, or an `s3://`, `gs://`, `az://` or
`https://` prefix. Reads of several byte ranges of one object are coalesced
(`Store.get_ranges`); on object stores they run as parallel, retried requests tuned by
`IOOptions`. The commit primitive is `Store.put_if_absent`. (The moto S3 server and the
fault-injecting proxy for tests live in the `ferroload-testing` development package.)

Every ferroload error derives from `FerroloadError` (defined in ferroload-core,
re-exported here).
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_core import FerroloadError
from ferroload_store._cache import BlockCache, parse_size
from ferroload_store._counters import CacheStats, StoreStats
from ferroload_store._errors import (
    CacheConfigError,
    CacheError,
    InvalidCacheKeyError,
    InvalidURIError,
    NotARegularFileError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StoreError,
    StoreTimeoutError,
    UnsupportedOperationError,
)
from ferroload_store._file import RangeFile
from ferroload_store._info import ObjectInfo
from ferroload_store._open import open_store
from ferroload_store._options import DEFAULT_PART_SIZE, IOOptions
from ferroload_store._ranges import (
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_READ,
    CoalescedRanges,
    ReadParts,
    coalesce_ranges,
    split_reads,
)
from ferroload_store._storage_options import (
    SECRET_KEYS,
    StorageOptionsError,
    is_secret_option,
    normalize_storage_options,
)
from ferroload_store._store import Store
from ferroload_store._uri import ParsedURI, parse_uri
from ferroload_store._writers import ObjectWriter

try:
    __version__ = version("ferroload-store")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_READ",
    "DEFAULT_PART_SIZE",
    "SECRET_KEYS",
    "BlockCache",
    "CacheConfigError",
    "CacheError",
    "CacheStats",
    "CoalescedRanges",
    "FerroloadError",
    "IOOptions",
    "InvalidCacheKeyError",
    "InvalidURIError",
    "NotARegularFileError",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectTruncatedError",
    "ObjectWriter",
    "ParsedURI",
    "RangeFile",
    "ReadParts",
    "StorageOptionsError",
    "Store",
    "StoreError",
    "StoreStats",
    "StoreTimeoutError",
    "UnsupportedOperationError",
    "__version__",
    "coalesce_ranges",
    "is_secret_option",
    "normalize_storage_options",
    "open_store",
    "parse_size",
    "parse_uri",
    "split_reads",
]
