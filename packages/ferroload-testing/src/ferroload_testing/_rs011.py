"""Datasets written by ferroload-rs 0.1.1 (the Rust original), for tests of reading and
upgrading them: made by `packages/ferroload-testing/scripts/make_rs011_fixtures.py` with
the published 0.1.1 wheel, in a virtualenv of their own (see that script)."""

from __future__ import annotations

import shutil
from pathlib import Path

#: Where the fixtures are kept (one folder per dataset).
RS011_FIXTURES = Path(__file__).parent / "rs011"
#: The datasets there: `mixed` (images, audio, a sparse modality, metadata, two layers,
#: three versions) and `oddkeys` (keys that are not valid sample ids in 0.2).
RS011_NAMES = ("mixed", "oddkeys")


def rs011_dataset(name: str, dest: str | Path) -> Path:
    """Copy the 0.1.1 dataset `name` (one of `RS011_NAMES`) to the folder `dest` (which
    must not exist) and return it: tests change what they read."""
    if name not in RS011_NAMES:
        raise ValueError(f"no ferroload-rs 0.1.1 fixture {name!r}; there are {RS011_NAMES}")
    return Path(shutil.copytree(RS011_FIXTURES / name, dest))
