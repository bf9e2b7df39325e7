"""ferroload convert: importers and exporters between ferroload and the formats people have.

- `import_image_folder`, `import_webdataset`, `import_hf`, `import_parquet` bring an image
  folder, WebDataset tars, a Hugging Face dataset or Parquet files into a dataset: bytes
  copied as they are, what the format knows about a sample kept as queryable metadata.
  Inputs are read and checked by a thread pool and written in input order; a bad input
  raises `BadInputError` naming it, or is skipped and reported with `on_error="skip"`.
- `export_webdataset`, `export_image_folder` take a dataset (or a `where=` subset of it)
  out again; an imported WebDataset or image folder comes back file for file.
- `ImportReport`, `ExportReport` say what happened.

See docs/convert.md.
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_convert._errors import (
    BadInputError,
    ConvertError,
    ConvertOptionError,
    InputNotFoundError,
    MissingDependencyError,
    OutputExistsError,
    UnsafeNameError,
)
from ferroload_convert._hf import import_hf
from ferroload_convert._image_folder import SPLIT_NAMES, export_image_folder, import_image_folder
from ferroload_convert._parquet import import_parquet
from ferroload_convert._report import ExportReport, ImportReport, SkippedInput
from ferroload_convert._sniff import kind_of
from ferroload_convert._wds_export import export_webdataset
from ferroload_convert._webdataset import import_webdataset

try:
    __version__ = version("ferroload-convert")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "SPLIT_NAMES",
    "BadInputError",
    "ConvertError",
    "ConvertOptionError",
    "ExportReport",
    "ImportReport",
    "InputNotFoundError",
    "MissingDependencyError",
    "OutputExistsError",
    "SkippedInput",
    "UnsafeNameError",
    "__version__",
    "export_image_folder",
    "export_webdataset",
    "import_hf",
    "import_image_folder",
    "import_parquet",
    "import_webdataset",
    "kind_of",
]
