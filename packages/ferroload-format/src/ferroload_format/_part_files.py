"""Reading index parts (Parquet files): some columns whole, or some row groups in threads."""

from __future__ import annotations

import itertools
import mmap
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ferroload_format._errors import ManifestError
from ferroload_format._records import IndexPart
from ferroload_format._rs011 import part_bytes
from ferroload_store import ObjectNotFoundError, RangeFile, Store

#: Threads that read the row groups of one large read (16 groups each) side by side.
_READ_THREADS = max(1, min(8, os.cpu_count() or 1))
#: Row groups read together by the row-group path (one coalesced fetch on an object store).
_GROUPS_PER_READ = 16
#: Opened index parts, by (key, dictionary-read columns): the file and, on an object
#: store, the `RangeFile` under it (None for a local file).
PartFiles = dict[tuple[str, tuple[str, ...]], tuple[pq.ParquetFile, "RangeFile | None"]]
#: An index part opened by `open_part`.
Opened = tuple[pq.ParquetFile, "RangeFile | None"]


def _at_hand(store: Store, key: str) -> mmap.mmap | bytes | None:
    """The bytes of index part `key` when no request is needed: a local file's memory map
    (`Store.map_local`), or a part translated from a ferroload-rs 0.1.1 index
    (`_rs011.part_bytes`, docs/format.md §11)."""
    translated = part_bytes(store, key)
    return translated if translated is not None else store.map_local(key)


def column_chunks(
    metadata: pq.FileMetaData,
    columns: Sequence[str] | None,
    groups: Iterable[int] | None = None,
) -> tuple[list[int], list[int]]:
    """(starts, lengths) of the column chunks holding `columns` (top-level names; None:
    all) in row groups `groups` (None: every one): what a read of those fetches."""
    wanted = None if columns is None else set(columns)
    starts: list[int] = []
    lengths: list[int] = []
    for rg in range(metadata.num_row_groups) if groups is None else groups:
        group = metadata.row_group(rg)
        for ci in range(group.num_columns):
            col = group.column(ci)
            if wanted is not None and col.path_in_schema.split(".")[0] not in wanted:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            starts.append(start)
            lengths.append(col.total_compressed_size)
    return starts, lengths


def read_part_table(
    store: Store,
    part: IndexPart,
    columns: Sequence[str] | None,
    files: PartFiles | None = None,
    **kwargs: Any,
) -> pa.Table:
    """Read some columns of one part, from its published path or, failing that, staging.

    The published path is tried again last: the part may have been published, and its
    staged copy removed, while this function was between the two.
    """
    try:
        table = _read_part_table(store, part, columns, files, **kwargs)
    except KeyError as exc:  # pyarrow: a `read_dictionary` column the part does not have
        name = exc.args[0].decode() if isinstance(exc.args[0], bytes) else str(exc.args[0])
        raise no_column(store, part, name) from None
    for name in columns or ():
        if table.schema.get_field_index(name) < 0:
            raise no_column(store, part, name)
    check_part_rows(store, part, table.num_rows)
    return table


def check_part_rows(store: Store, part: IndexPart, num_rows: int) -> None:
    """Refuse an index part holding another number of rows than the manifest says.

    Raises:
        ManifestError: naming the part.
    """
    if num_rows != part.num_rows:
        raise ManifestError(
            f"index part {part.path} of {store.uri} holds {num_rows} rows; the manifest "
            f"says {part.num_rows}. The manifest or the part was altered; run verify()",
            uri=store.uri,
            part=part.path,
        )


def no_column(store: Store, part: IndexPart, name: str) -> ManifestError:
    return ManifestError(
        f"index part {part.path} of {store.uri} has no column {name!r}, which the manifest's "
        "schema names. The manifest or the part was altered; run verify()",
        uri=store.uri,
        part=part.path,
        column=name,
    )


def _read_part_table(
    store: Store,
    part: IndexPart,
    columns: Sequence[str] | None,
    files: PartFiles | None,
    **kwargs: Any,
) -> pa.Table:
    last_exc: Exception | None = None
    for key in (part.path, part.staged, part.path):
        try:
            mapped = _at_hand(store, key)
            if mapped is not None:
                # ParquetFile, not read_table: that imports pyarrow.dataset (and pandas)
                pf = pq.ParquetFile(pa.BufferReader(mapped), **kwargs)
                return pf.read(columns=columns)
            if files is None:
                with RangeFile(store, key, size=part.size) as f:
                    return pq.read_table(f, columns=columns, pre_buffer=True, **kwargs)
            # remote: the footer is read once per part and kept; each later read fetches
            # only the asked columns' chunks (coalesced by pre_buffer)
            cache_key = (key, tuple(sorted(kwargs.get("read_dictionary", ()))))
            entry = files.get(cache_key)
            if entry is None:
                new = _PartFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
                entry = files[cache_key] = (pq.ParquetFile(new, **kwargs), new)
            pf, rf = entry
            assert rf is not None  # only remote parts are cached here
            rf.prefetch(*column_chunks(pf.metadata, columns))
            try:
                return pf.read(columns=columns)
            finally:
                _forget(rf)
        except (FileNotFoundError, ObjectNotFoundError) as exc:
            last_exc = exc
    raise ManifestError(
        f"index part {part.path} of {store.uri} is missing (also at {part.staged})",
        uri=store.uri,
    ) from last_exc


def open_part(
    store: Store,
    part: IndexPart,
    files: PartFiles,
) -> tuple[pq.ParquetFile, RangeFile | None]:
    """One index part as a `ParquetFile` (its footer read once and kept in `files`) and,
    on an object store, the `RangeFile` under it: for reads of some row groups. Tried at
    its published path, then staging, then the published path again (see
    `read_part_table`).

    Raises:
        ManifestError: the part is missing (also at its staged path).
    """
    last_exc: Exception | None = None
    for key in (part.path, part.staged, part.path):
        entry = files.get((key, ()))
        if entry is not None:
            return entry
        try:
            mapped = _at_hand(store, key)
            if mapped is not None:  # the file the store checked, not one opened by name
                entry = (pq.ParquetFile(pa.BufferReader(mapped)), None)
            else:
                f = _PartFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
                entry = (pq.ParquetFile(f), f)
        except (FileNotFoundError, ObjectNotFoundError) as exc:
            last_exc = exc
            continue
        files[(key, ())] = entry
        return entry
    raise ManifestError(
        f"index part {part.path} of {store.uri} is missing (also at {part.staged})",
        uri=store.uri,
    ) from last_exc


def read_row_groups(
    opened: tuple[pq.ParquetFile, RangeFile | None],
    groups: Sequence[int],
    names: Sequence[str],
    *,
    threads: bool = True,
) -> pa.Table:
    """Columns `names` of row groups `groups` of a part from `open_part`; on an object
    store only those column chunks are fetched (coalesced). `threads`: decode on
    Arrow's thread pool (False: in this thread)."""
    pf, f = opened
    if f is None:
        return pf.read_row_groups(list(groups), columns=list(names), use_threads=threads)
    f.prefetch(*column_chunks(pf.metadata, names, groups))
    try:
        return pf.read_row_groups(list(groups), columns=list(names), use_threads=threads)
    finally:
        _forget(f)  # a part stays open for the whole run: its fetched chunks must not pile up


class _PartFile(RangeFile):
    """The `RangeFile` of an opened index part, whose prefetched ranges are dropped once
    the read they were fetched for is done (the part stays open, with its footer, for as
    long as the dataset; row groups read in an epoch would otherwise all stay in memory)."""

    def __init__(
        self, store: Store, path: str, size: int | None = None, version: str | None = None
    ) -> None:
        super().__init__(store, path, size=size, version=version)
        self.part_store = store
        self.part_key = path
        self.part_version = version

    def again(self) -> _PartFile:
        """Another file over the same object (for a read in another thread)."""
        return _PartFile(self.part_store, self.part_key, size=self.size, version=self.part_version)

    def forget(self) -> None:
        """Drop the prefetched ranges (later reads fetch again)."""
        self._prefetched.clear()
        self._starts = []


def _forget(f: RangeFile) -> None:
    if isinstance(f, _PartFile):
        f.forget()


#: The memory map of each local part opened (`Store.map_local`), by `id` of its `Opened`.
LocalMaps = dict[int, "mmap.mmap | bytes"]


def own_file(store: Store, files: PartFiles, local: LocalMaps, opened: Opened) -> Opened:
    """A file of the part `opened` for one read (with the part's footer, not read
    again): reads in several threads share nothing but the footer. A local part gets a
    reader of its own over its memory map (mapped once, then kept in `local`), an
    object-store part a `RangeFile` of its own."""
    pf, f = opened
    if isinstance(f, _PartFile):
        own = f.again()
        return pq.ParquetFile(own, metadata=pf.metadata), own
    mapped = local.get(id(opened))
    if mapped is None:
        key = next((k[0] for k, v in list(files.items()) if v is opened), None)
        found = None if key is None else _at_hand(store, key)
        if found is None:
            return opened  # not found again (cannot happen): the shared file
        mapped = local[id(opened)] = found
    return pq.ParquetFile(pa.BufferReader(mapped), metadata=pf.metadata), None


def read_chunks(
    opened: Opened, groups: list[int], names: list[str], own: Callable[[Opened], Opened]
) -> Iterator[tuple[list[int], pa.Table]]:
    """`read_row_groups` of `groups` a few at a time (`_GROUPS_PER_READ`: what one read
    holds at once stays small), in order, each read with a file of its own (`own`, see
    `own_file`): (the groups, their table). Several reads run side by side in threads
    (decoding releases the GIL), a few ahead of the one handed over.

    Arrow's own thread pool decodes only a lone read of several row groups: reads side
    by side are parallel already, and one row group (a small index, or the first
    batches of a loader) is decoded faster in this thread than the pool starts: the
    pool's first use cost 11-57 ms of CPU in a process that has imported torch, against
    8-12 ms for the whole first read of a 20,000-row index without it.
    """
    chunks = [groups[c0 : c0 + _GROUPS_PER_READ] for c0 in range(0, len(groups), _GROUPS_PER_READ)]
    threads = len(chunks) == 1 and len(groups) > 1

    def one(chunk: list[int]) -> pa.Table:
        return read_row_groups(own(opened), chunk, names, threads=threads)

    if len(chunks) == 1 or _READ_THREADS == 1:
        for chunk in chunks:
            yield chunk, one(chunk)
        return
    with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(chunks))) as pool:
        todo = iter(chunks)
        running: deque[tuple[list[int], Future[pa.Table]]] = deque(
            (c, pool.submit(one, c)) for c in itertools.islice(todo, _READ_THREADS)
        )
        while running:
            chunk, future = running.popleft()
            table = future.result()
            nxt = next(todo, None)
            if nxt is not None:
                running.append((nxt, pool.submit(one, nxt)))
            yield chunk, table
