"""ferroload-store: one storage interface for local disk, memory and object stores.

Built on obstore. `open_store(uri)` gives a `Store` rooted at a local path, a
`memory://name` store shared within the process, or an `s3://`, `gs://`, `az://` or
`https://` prefix. Reads of several byte ranges of one object are coalesced
(`Store.get_ranges`); the commit primitive is `Store.put_if_absent`.

Every ferroload error derives from `FerroloadError` (defined in ferroload-core,
re-exported here).
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_core import FerroloadError
from ferroload_store._errors import (
    InvalidURIError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StoreError,
    UnsupportedOperationError,
)
from ferroload_store._file import RangeFile
from ferroload_store._ranges import (
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_READ,
    CoalescedRanges,
    coalesce_ranges,
)
from ferroload_store._store import ObjectInfo, ObjectWriter, Store, StoreStats, open_store
from ferroload_store._uri import ParsedURI, parse_uri

try:
    __version__ = version("ferroload-store")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_READ",
    "CoalescedRanges",
    "FerroloadError",
    "InvalidURIError",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectTruncatedError",
    "ObjectWriter",
    "ParsedURI",
    "RangeFile",
    "Store",
    "StoreError",
    "StoreStats",
    "UnsupportedOperationError",
    "__version__",
    "coalesce_ranges",
    "open_store",
    "parse_uri",
]
