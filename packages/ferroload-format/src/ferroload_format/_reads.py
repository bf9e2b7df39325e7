"""`SampleReader`: how a `Dataset` reads samples and payloads of its version.

It splits the columns a caller asks for into modalities and index columns, reads each
modality's payloads with one coalesced request per shard region, and turns a missing or
short shard, or a checksum that does not match, into an error naming the sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from ferroload_format._errors import (
    ChecksumMismatchError,
    ColumnNotFoundError,
    SampleIndexError,
    ShardNotFoundError,
    ShardTruncatedError,
)
from ferroload_format._index_arrays import ModalityArrays
from ferroload_format._index_columns import IndexColumns
from ferroload_format._manifest import Manifest
from ferroload_store import ObjectNotFoundError, ObjectTruncatedError, Store


class SampleReader:
    """The columns of one version and the reads of its samples (rows of the version,
    not positions of a view).

    Args:
        store: the dataset's store.
        manifest: the version's manifest.
        index: its index columns.
        verify: check every payload read against its recorded xxh3-64.
    """

    def __init__(
        self, store: Store, manifest: Manifest, index: IndexColumns, *, verify: bool
    ) -> None:
        self.store = store
        self.uri = store.uri
        self.index = index
        # a version without checksums (ferroload-rs 0.1.1 recorded none) has none to check
        self.verify = verify and manifest.has_checksums
        # base then layer modalities and metadata columns (docs/format.md §10)
        self.modalities = dict(index.modalities)
        self.meta_names = (
            *(f.name for f in manifest.metadata),
            *(f.name for layer in manifest.layers for f in layer.columns),
        )
        self.all_columns = ("sample_id", *self.modalities, *self.meta_names)
        # base shards, then each layer's: what modality shard codes index into; built on
        # first read (the manifest's shard lists are read then, not when opening)
        self._shard_table: tuple[list[str], list[tuple[int, str]]] | None = None
        self._resolved: dict[tuple[str, ...] | None, tuple[list[str], list[str]]] = {}

    # ----------------------------------------------------------------- columns

    def resolve(self, columns: Sequence[str] | str | None) -> tuple[list[str], list[str]]:
        """Split requested columns into (modalities, index columns), in request order."""
        key = (
            None if columns is None else (columns,) if isinstance(columns, str) else tuple(columns)
        )
        hit = self._resolved.get(key)
        if hit is None:
            hit = self._resolved[key] = self._split_columns(key)
        return hit

    def _split_columns(self, columns: tuple[str, ...] | None) -> tuple[list[str], list[str]]:
        if columns is None:
            return list(self.modalities), ["sample_id", *self.meta_names]
        mods, meta = [], []
        for c in columns:
            if c in self.modalities:
                mods.append(c)
            elif c in self.meta_names or c in ("sample_id", "shard"):
                meta.append(c)
            else:
                raise ColumnNotFoundError(
                    f"{self.uri} has no column {c!r}; columns are {', '.join(self.all_columns)}",
                    uri=self.uri,
                    column=str(c),
                )
        return mods, meta

    def check_modality(self, modality: str) -> None:
        """Refuse a name that is not a modality (`ColumnNotFoundError`)."""
        if modality not in self.modalities:
            self.resolve([modality])  # raises ColumnNotFoundError for unknown names
            raise ColumnNotFoundError(
                f"{modality!r} is a metadata column of {self.uri}, not a modality",
                uri=self.uri,
                column=modality,
            )

    # ----------------------------------------------------------------- samples

    def sample(self, row: int, columns: Sequence[str] | str | None) -> dict[str, Any]:
        """Row `row` as a sample dict (what `Dataset.get` returns)."""
        mods, meta = self.resolve(columns)
        out: dict[str, Any] = {}
        rows = np.asarray([row], dtype=np.int64)
        if meta:
            for name, arr in self.index.take(meta, rows).items():
                out[name] = arr[0].as_py()
        for m in mods:
            # the path of get_many and read: the store checks the range against the
            # shard's size before it allocates anything
            out[m] = self.payloads(rows, m)[0]
        if columns is None:
            return {c: out[c] for c in self.all_columns}
        return out

    def samples(
        self, rows: npt.NDArray[np.int64], columns: Sequence[str] | str | None
    ) -> list[dict[str, Any]]:
        """Rows `rows` as sample dicts, in that order (what `Dataset.get_many` returns)."""
        mods, meta = self.resolve(columns)
        n = len(rows)
        values: dict[str, list[Any]] = {}
        if meta:
            for name, arr in self.index.take(meta, rows).items():
                values[name] = arr.to_pylist()
        for m in mods:
            values[m] = self.payloads(rows, m)
        order = self.all_columns if columns is None else [*meta, *mods]
        cols = [(c, values[c]) for c in order if c in values]
        return [{c: v[k] for c, v in cols} for k in range(n)]

    def read(
        self,
        rows: npt.NDArray[np.int64],
        modality: str,
        *,
        copy: bool,
        locations: ModalityArrays | None,
    ) -> list[Any]:
        """`modality`'s payloads of `rows` (what `Dataset.read` returns)."""
        if locations is not None and len(locations.present) != len(rows):
            raise ValueError(
                f"locations for {len(locations.present)} positions, but {len(rows)} positions"
            )
        return self.payloads(rows, modality, copy=copy, located=locations)

    # ----------------------------------------------------------------- payloads

    def payloads(
        self,
        rows: npt.NDArray[np.int64],
        modality: str,
        *,
        copy: bool = True,
        located: ModalityArrays | None = None,
    ) -> list[Any]:
        """Bytes of `modality` for each row (None where absent), one coalesced read per
        region; with `copy=False`, views into the store's buffers instead of bytes."""
        a = self.index.locate(modality, rows) if located is None else located
        paths, refs = self.shards()

        def shard(code: int) -> tuple[str, int, str]:
            return (paths[code], *refs[code])

        return read_payloads(
            self.store, a, shard, column=modality, verify=self.verify, copy=copy,
            sample_id=lambda k: self._sample_id(int(rows[k])),
        )  # fmt: skip

    def _sample_id(self, row: int) -> str:
        ids = self.index.take(["sample_id"], np.asarray([row], dtype=np.int64))
        return str(ids["sample_id"][0].as_py())

    # ----------------------------------------------------------------- shards

    def shards(self) -> tuple[list[str], list[tuple[int, str]]]:
        """(path, (size, cache version)) of every shard code: base shards (the manifest's
        shard lists are read here, once), then each layer's."""
        got = self._shard_table
        if got is None:
            shards = self.index.shards
            # shards are immutable and uniquely named: size + version identify the content
            got = self._shard_table = (
                [s.path for s in shards],
                [(s.size, f"v{s.version}-s{s.size}") for s in shards],
            )
        return got

    def shard_ref(self, code: int) -> tuple[str, int, str]:
        """(path, size, cache version) of shard `code` (what `Dataset.shard_ref` returns)."""
        paths, refs = self.shards()
        if not 0 <= code < len(paths):
            raise SampleIndexError(
                f"shard code {code} of {self.uri} names no shard (it has "
                f"{len(paths)}, layers included)",
                uri=self.uri,
            )
        return (paths[code], *refs[code])


def read_payloads(
    store: Store,
    a: ModalityArrays,
    shard: Callable[[int], tuple[str, int, str]],
    *,
    column: str,
    verify: bool,
    sample_id: Callable[[int], str],
    copy: bool = True,
) -> list[Any]:
    """The payloads `a` locates (None where absent): one coalesced read per shard, each
    payload checked against its xxh3-64 when `verify`; bytes, or with `copy=False` views
    of the store's buffers. What `Dataset.read` and a Ray read task (which has the
    locations but no index) read with.

    Args:
        store: the dataset's store.
        a: the payloads' locations.
        shard: (path, size, cache version) of a shard code (`Dataset.shard_ref`).
        column: the modality (errors name it).
        verify: check the checksums.
        sample_id: the sample id of entry `k` of `a` (called only for an error).
        copy: return bytes (else views).

    Raises:
        ShardNotFoundError: a shard is missing.
        ShardTruncatedError: a shard is shorter than a payload needs.
        ChecksumMismatchError: a payload's bytes do not match its checksum.
    """
    out: list[Any] = [None] * len(a.present)
    present = np.flatnonzero(a.present)
    if not len(present):
        return out
    codes = a.shard[present]
    order = np.argsort(codes, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(codes[order])) + 1):
        path, size, tag = shard(int(codes[group[0]]))
        ks = present[group]  # entries of `a`
        try:
            views = store.get_ranges(path, a.offset[ks], a.length[ks], size=size, version=tag)
        except (ObjectNotFoundError, ObjectTruncatedError) as exc:
            raise _read_error(exc, store.uri, path, ks, a, sample_id) from exc
        for k, view in zip(ks.tolist(), views, strict=True):
            out[k] = bytes(view) if copy else view
            if verify:
                got = xxhash.xxh3_64_intdigest(view)
                if got != int(a.checksum[k]):
                    sid = sample_id(k)
                    raise ChecksumMismatchError(
                        f"{column!r} of sample {sid!r} in shard {path} of {store.uri} is "
                        f"damaged: checksum {got:016x}, expected {int(a.checksum[k]):016x}",
                        uri=store.uri,
                        shard=path,
                        sample_id=sid,
                        column=column,
                    )
    return out


def _read_error(
    exc: Exception,
    uri: str,
    shard: str,
    ks: npt.NDArray[np.int64],
    a: ModalityArrays,
    sample_id: Callable[[int], str],
) -> Exception:
    """The error for a failed read of entries `ks` of `a` from `shard`."""
    if isinstance(exc, ObjectTruncatedError):
        ends = a.offset[ks] + a.length[ks]
        short = ks[ends > exc.size]
        k = int(short[0]) if len(short) else int(ks[0])
        sid = sample_id(k)
        return ShardTruncatedError(
            f"shard {shard} of {uri} is truncated at {exc.size} bytes; sample {sid!r} needs "
            f"bytes up to {int(a.offset[k] + a.length[k])}. Run verify() to list every "
            "damaged sample",
            uri=uri,
            shard=shard,
            sample_id=sid,
        )
    sid = sample_id(int(ks[0]))
    return ShardNotFoundError(
        f"shard {shard} of {uri} is missing (needed for sample {sid!r})",
        uri=uri,
        shard=shard,
        sample_id=sid,
    )
