"""Write modes: how a write treats a dataset already at its destination.

`create` refuses it, `append` adds to it (creating it when absent), `overwrite` replaces
its content in a new version (history kept).
"""

from __future__ import annotations

from typing import Literal

from ferroload_format._errors import DatasetExistsError
from ferroload_format._manifest import Manifest

#: How a write treats a dataset already at its destination: `create` refuses it, `append`
#: adds to it (creating it when absent), `overwrite` replaces its content in a new version.
WriteMode = Literal["create", "append", "overwrite"]
WRITE_MODES: tuple[WriteMode, ...] = ("create", "append", "overwrite")


def check_mode(mode: object) -> WriteMode:
    """`mode` if it is one of `WRITE_MODES`, else a `ValueError` that lists them."""
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', got {mode!r}")
    return mode


def exists_error(uri: str, manifest: Manifest) -> DatasetExistsError:
    """The error of a `mode="create"` write whose destination holds `manifest`'s dataset."""
    return DatasetExistsError(
        f"{uri} already holds dataset {manifest.name!r} (version {manifest.version}, "
        f"{manifest.num_samples} samples); pass mode='append' to add to it or "
        "mode='overwrite' to replace its content in a new version (CLI: --append / "
        "--overwrite)",
        uri=uri,
    )


def operation(mode: WriteMode, base: Manifest | None) -> str:
    """What the manifest of a write records: `create`, `append` or `overwrite`."""
    if base is None:
        return "create"
    return "overwrite" if mode == "overwrite" else "append"
