"""`ferroload.ray`: datasets as Ray Data datasets, and Ray Data datasets written as one
dataset version (extra `ray`: `pip install 'ferroload[ray]'`).

- `read(uri, columns=, where=, version=, decode=)`: a `ray.data.Dataset` whose blocks are
  planned from the index on the driver (the index is read once), each read task making
  coalesced ranged reads of its own shards; `Datasource` is the same as a
  `ray.data.Datasource` for `ray.data.read_datasource`.
- `write(ds, uri, mode=)` / `Sink`: a `ray.data.Datasink` whose write tasks each stage
  their own shards and index rows, and whose driver commits them all as one version.

Importing this module imports Ray; `import ferroload` does not.
"""

from __future__ import annotations

from ferroload.ray._read import Datasource, read
from ferroload.ray._write import Sink, write

__all__ = ["Datasource", "Sink", "read", "write"]
