"""What a torch dataset rebuilds in each process: its source and fields, and their options.

A torch dataset goes to `DataLoader` workers by pickling (or forking). `PerProcess`
keeps what reopens its source (`_SourceRef`: the same dataset version and rows) and its
field options in plain picklable form, and rebuilds the open datasets, decoders and
thread pool once in each process, on first use.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch.utils.data

from ferroload_core import available_cpus
from ferroload_format import Dataset
from ferroload_loader._fields import ColumnSpec, Field, build_fields
from ferroload_loader._options import LoaderOptions, field_options
from ferroload_loader._source import Mixture, ResolvedSource, resolve_source

if TYPE_CHECKING:
    from ferroload_format import Manifest
    from ferroload_store import Store

#: Options the torch datasets refuse (`take_options`), and what to do instead.
TORCH_REFUSED = {
    "out": "the torch datasets always yield torch tensors",
    "pin_memory": "pass pin_memory to the DataLoader",
    "prefetch_bytes": "the DataLoader's prefetch_factor sets how far its workers build ahead",
    "readahead_bytes": "the torch datasets read no cache blocks ahead (make_loader does)",
    "cache": "DataLoader workers open the dataset with the default block cache",
}


@dataclass(frozen=True)
class _DatasetRef:
    """What reopens a dataset (or view) in another process: same version, same rows."""

    store: Store
    manifest: Manifest
    rows: npt.NDArray[np.int64] | None
    verify_checksums: bool

    @classmethod
    def of(cls, ds: Dataset) -> _DatasetRef:
        return cls(ds.store, ds.manifest, ds._rows, ds._verify)

    def open(self) -> Dataset:
        # a fresh Store: no file descriptors, locks or object-store clients from the parent
        return Dataset(
            copy.copy(self.store),
            self.manifest,
            rows=self.rows,
            verify_checksums=self.verify_checksums,
        )


@dataclass(frozen=True)
class _SourceRef:
    """A `ResolvedSource` in picklable form (`where=` already applied: rows are kept)."""

    datasets: tuple[_DatasetRef, ...]
    weights: tuple[float, ...] | None
    num_samples: int

    @classmethod
    def of(cls, source: ResolvedSource) -> _SourceRef:
        mixture = source.mixture
        return cls(
            tuple(_DatasetRef.of(d) for d in source.datasets),
            None if mixture is None else tuple(mixture.weights.tolist()),
            source.num_items,
        )

    def open(self) -> ResolvedSource:
        datasets = [d.open() for d in self.datasets]
        if self.weights is None:
            return resolve_source(datasets[0])
        return resolve_source(Mixture(datasets, list(self.weights), num_samples=self.num_samples))


def plain_field_options(options: LoaderOptions) -> dict[str, Any]:
    """The field options of `build_fields` (`field_options`), as plain (picklable)
    containers."""

    def plain(spec: ColumnSpec) -> ColumnSpec:
        if isinstance(spec, str):  # build_fields says why not
            return spec
        if isinstance(spec, Mapping):
            return {k: dict(v or {}) for k, v in spec.items()}
        return tuple(spec)

    spec = field_options(options)
    meta = options.meta
    return {
        **spec, "images": plain(options.images), "audio": plain(options.audio),
        "video": plain(options.video), "meta": meta if isinstance(meta, str) else tuple(meta),
    }  # fmt: skip


def _worker_threads() -> int | None:
    """Default decode threads for this process: inside a DataLoader worker, the CPUs
    shared out among the workers; else None (the loader default: every CPU)."""
    info = torch.utils.data.get_worker_info()
    if info is None:
        return None
    return max(1, available_cpus() // max(1, info.num_workers))


class PerProcess:
    """The source and fields of a dataset, built once per process.

    The main process builds them in `__init__` (to check the options and know the
    length); a pickled copy drops them, and a forked copy notices the new process id;
    either rebuilds them on first use from the picklable `_ref` and `_spec`.
    """

    _state: tuple[ResolvedSource, list[Field]] | None
    _pid: int | None

    def _init_source(self, source: Any, options: LoaderOptions) -> ResolvedSource:
        spec = plain_field_options(options)
        resolved = resolve_source(
            source, where=options.where, storage_options=options.storage_options
        )
        fields = build_fields(resolved, threads=options.threads, **spec)
        self._ref = _SourceRef.of(resolved)
        self._spec = spec
        self._threads = options.threads
        self._state = (resolved, fields)
        self._pid = os.getpid()
        return resolved

    def _runtime(self) -> tuple[ResolvedSource, list[Field]]:
        if self._state is None or self._pid != os.getpid():
            resolved = self._ref.open()
            fields = build_fields(
                resolved, threads=self._threads, default_threads=_worker_threads(), **self._spec
            )
            self._state = (resolved, fields)
            self._pid = os.getpid()
        return self._state

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"] = None
        state["_pid"] = None
        return state
