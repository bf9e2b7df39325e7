"""ferroload-catalog: the dataset catalog (name -> URI, versions, tags).

An embedded registry in one DuckDB file (`$FERROLOAD_CATALOG`, else the user data
directory), safe to share between processes.

- `Catalog` adds, lists, tags, refreshes and removes entries, and resolves
  `catalog:<name>` URIs.
- `CatalogEntry` is one registered dataset, with the storage options it opens with
  (secrets only as `env:NAME`, names of environment variables).
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_catalog._catalog import DEFAULT_LOCK_TIMEOUT, Catalog
from ferroload_catalog._entry import (
    CATALOG_ENV,
    CATALOG_SCHEME,
    CatalogEntry,
    default_catalog_path,
    validate_name,
)
from ferroload_catalog._errors import (
    CatalogEntryExistsError,
    CatalogEntryNotFoundError,
    CatalogError,
    CatalogFileError,
    CatalogLockedError,
    CatalogSecretError,
    InvalidCatalogNameError,
)
from ferroload_catalog._options import ENV_REFERENCE, resolve_options, storable_options

try:
    __version__ = version("ferroload-catalog")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "CATALOG_ENV",
    "CATALOG_SCHEME",
    "DEFAULT_LOCK_TIMEOUT",
    "ENV_REFERENCE",
    "Catalog",
    "CatalogEntry",
    "CatalogEntryExistsError",
    "CatalogEntryNotFoundError",
    "CatalogError",
    "CatalogFileError",
    "CatalogLockedError",
    "CatalogSecretError",
    "InvalidCatalogNameError",
    "__version__",
    "default_catalog_path",
    "resolve_options",
    "storable_options",
    "validate_name",
]
