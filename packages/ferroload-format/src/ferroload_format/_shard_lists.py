"""Shard lists (docs/format.md §6.2): a version's older shards, in immutable files.

A manifest keeps its newest shards inline and the rest in shard lists, so that an append
rewrites O(log N) shard records (amortised) instead of every one. A commit that would
leave more than `MAX_INLINE_SHARDS` inline shards moves them into a new list, which takes
in the newest lists by the tiered rule of index parts (`_tiers.newest_taken`). Lists are
read only when the shards themselves are needed (reading samples, `verify`, `gc`), each
one checked (size, checksum, records, count) and kept in a bounded cache: it never
changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import xxhash

from ferroload_core import LRU, UnsafePathError
from ferroload_format._errors import ManifestError
from ferroload_format._manifest import MAX_MANIFEST_DEPTH, Manifest
from ferroload_format._paths import shard_list_path, version_path
from ferroload_format._record_json import JsonReader, check_json_depth
from ferroload_format._records import ShardInfo, ShardList, check_shard_paths
from ferroload_format._tiers import MERGE_FACTOR, newest_taken
from ferroload_store import ObjectNotFoundError, Store, StoreError

logger = logging.getLogger(__name__)

#: A commit that would leave more inline shards than this moves them into a shard list.
MAX_INLINE_SHARDS = 256
#: A new list takes in older lists only while it stays within this many shards (about
#: 57 MB of records): no append rewrites more than that (like `MAX_MERGE_ROWS`).
MAX_LIST_SHARDS = 1 << 18
#: The most bytes of a shard record's line in a list, and the most bytes of a list: a
#: list whose recorded size is larger than its records may take is refused before it is
#: read.
MAX_SHARD_RECORD_BYTES = 64 << 10
MAX_SHARD_LIST_BYTES = 1 << 31
#: The fewest bytes of a shard record's line (every field, one-character paths, no
#: spaces, the newline): a list whose recorded size is smaller than its `num_shards`
#: records take is refused before it is read.
MIN_SHARD_RECORD_BYTES = (
    len('{"path":"a","side_index":"a","size":0,"num_samples":0,"num_members":0,"version":0}') + 1
)
#: A list is read in pieces of this size (one read for every list an append writes: at
#: most `MAX_LIST_SHARDS` records of about 220 bytes), each parsed line by line.
READ_PIECE_BYTES = 64 << 20
#: Shard records kept in the cache of lists read (per process, least recently used out;
#: about 600 bytes of Python objects each, shared with the manifests that read them).
CACHE_SHARDS = 1 << 19

_ENCODE = json.JSONEncoder().encode
#: Lists read, by (store, path, size, checksum, shards), weighed by their shard records.
_cache: LRU[tuple[str, str, int, str, int], tuple[ShardInfo, ...]] = LRU(CACHE_SHARDS, weigh=len)


def checksum(data: bytes) -> str:
    """The checksum a `ShardList` records: xxh3-64 of `data`, 16 lowercase hex digits."""
    return xxhash.xxh3_64_hexdigest(data)


def encode_shard_list(shards: Sequence[ShardInfo]) -> bytes:
    """The bytes of a list file: one JSON record a line, each line ending in `\\n`."""
    return "".join(_ENCODE(s.to_json()) + "\n" for s in shards).encode()


def write_shard_list(
    store: Store, path: str, shards: Sequence[ShardInfo], version: int
) -> ShardList:
    """Write a list file of `shards` at `path` (written by `version`); its record."""
    data = encode_shard_list(shards)
    store.put(path, data)
    record = ShardList(
        path=path,
        num_shards=len(shards),
        size=len(data),
        checksum=checksum(data),
        shard_bytes=sum(s.size for s in shards),
        version=version,
    )
    _remember(store, record, tuple(shards))
    return record


def _key(store: Store, lst: ShardList) -> tuple[str, str, int, str, int]:
    return (store.uri, lst.path, lst.size, lst.checksum, lst.num_shards)


def _remember(store: Store, lst: ShardList, shards: tuple[ShardInfo, ...]) -> None:
    _cache.put(_key(store, lst), shards)


def forget_cached_lists() -> None:
    """Empty the cache of lists read (tests; a process that wants the memory back)."""
    _cache.clear()


def read_shard_list(
    store: Store, lst: ShardList, *, manifest_uri: str = "", cached: bool = True
) -> tuple[ShardInfo, ...]:
    """The shards of list `lst`, checked: the file must have exactly the recorded size
    and checksum and hold `num_shards` records, one JSON object a line, each a valid
    `ShardInfo` whose paths stay in the root, their sizes adding up to `shard_bytes`.

    The recorded size must fit `num_shards` records (`MIN_SHARD_RECORD_BYTES` to
    `MAX_SHARD_RECORD_BYTES` each, `MAX_SHARD_LIST_BYTES` in all) before anything is
    read; the file is then read in pieces of `READ_PIECE_BYTES` and each line parsed and
    checked as it comes, so a list is refused at its first bad line, or as soon as it
    holds more than `num_shards` lines, having held no more than a piece and the valid
    records before it.

    Args:
        store: the dataset root.
        lst: the list's record in a manifest.
        manifest_uri: the manifest that names it, for errors.
        cached: use (and fill) the cache of lists read; `verify` reads the file again.

    Raises:
        ManifestError: naming the list and the manifest, for a list missing, of another
            size or checksum, too large or too small for its records, or not holding
            `num_shards` valid records, one a line, of `shard_bytes` bytes.
        UnsafePathError: for a record whose path could leave the root.
    """
    if cached:
        got = _cache.get(_key(store, lst))
        if got is not None:
            return got
    where = f"shard list {lst.path} of {manifest_uri or store.uri}"

    def bad(why: str) -> ManifestError:
        return ManifestError(f"{where} {why}", uri=store.uri, shard_list=lst.path)

    most = min(MAX_SHARD_LIST_BYTES, lst.num_shards * MAX_SHARD_RECORD_BYTES)
    if not lst.num_shards * MIN_SHARD_RECORD_BYTES <= lst.size <= most:
        raise bad(
            f"claims {lst.size} bytes for {lst.num_shards} shards, which such a list cannot "
            f"hold ({MIN_SHARD_RECORD_BYTES} to {MAX_SHARD_RECORD_BYTES} bytes a shard "
            f"record, at most {MAX_SHARD_LIST_BYTES} bytes in all)"
        )
    try:
        size = store.head(lst.path).size
        if size != lst.size:
            raise bad(f"is {size} bytes, the manifest says {lst.size}")
        shards = _parse(_pieces(store, lst, bad), lst, where, bad)
    except ObjectNotFoundError:
        raise bad("is missing") from None
    except UnsafePathError:
        raise
    except (OSError, StoreError) as exc:
        raise bad(f"is unreadable: {exc}") from exc
    if cached:
        _remember(store, lst, shards)
    return shards


def _pieces(store: Store, lst: ShardList, bad: Callable[[str], ManifestError]) -> Iterator[bytes]:
    """The bytes of list `lst`: in one read up to `READ_PIECE_BYTES` (every list an
    append writes), else in ranges of that size."""
    if lst.size <= READ_PIECE_BYTES:
        data = store.get(lst.path)
        if len(data) != lst.size:
            raise bad(f"is {len(data)} bytes, the manifest says {lst.size}")
        yield data
        return
    for start in range(0, lst.size, READ_PIECE_BYTES):
        yield store.get_range(lst.path, start, min(READ_PIECE_BYTES, lst.size - start))


def _parse(
    pieces: Iterable[bytes], lst: ShardList, where: str, bad: Callable[[str], ManifestError]
) -> tuple[ShardInfo, ...]:
    """The records of a list read in `pieces`, each line parsed on its own (exactly one
    JSON value a line) and checked as it comes; then the count, checksum and bytes."""
    digest = xxhash.xxh3_64()
    reader = JsonReader()
    out: list[ShardInfo] = []
    total = 0
    rest = b""
    for piece in pieces:
        digest.update(piece)
        cut = piece.rfind(b"\n") + 1
        if cut == 0:  # no line ends in this piece
            rest += piece
        else:
            whole = memoryview(piece)[:cut]  # no copy of a piece read in one
            body, rest = (rest + whole if rest else whole), piece[cut:]
            for shard in _records(body, len(out), lst, reader, where, bad):
                total += shard.size
                out.append(shard)
        if len(rest) >= MAX_SHARD_RECORD_BYTES:
            raise bad(f"line {len(out) + 1} is longer than {MAX_SHARD_RECORD_BYTES} bytes")
    if rest:
        raise bad("does not end with a newline (one JSON record a line)")
    if len(out) != lst.num_shards:
        raise bad(f"holds {len(out)} lines, the manifest says {lst.num_shards} shards")
    if digest.hexdigest() != lst.checksum:
        raise bad(f"does not match its checksum {lst.checksum!r}: it was altered or damaged")
    if total != lst.shard_bytes:
        raise bad(
            f"lists {total} bytes of shards, the manifest says {lst.shard_bytes} (shard_bytes)"
        )
    return tuple(out)


def _records(
    body: bytes | memoryview,
    before: int,
    lst: ShardList,
    reader: JsonReader,
    where: str,
    bad: Callable[[str], ManifestError],
) -> Iterator[ShardInfo]:
    """The records of the whole lines `body` (each ending in a newline), which follow
    `before` lines of the list."""
    try:
        text = str(body, "utf-8")
    except UnicodeDecodeError as exc:
        line = before + bytes(body).count(b"\n", 0, exc.start) + 1
        raise bad(f"line {line} is not UTF-8: {exc.reason}") from None
    plain = ShardInfo.from_plain_json  # the Writer's records, without the general parser
    loads = reader.loads
    i, start, end = before, 0, text.find("\n")
    while end >= 0:
        i += 1
        if i > lst.num_shards:
            raise bad(f"holds more than {lst.num_shards} lines, the manifest says {i - 1} shards")
        if end - start >= MAX_SHARD_RECORD_BYTES:
            raise bad(f"line {i} is longer than {MAX_SHARD_RECORD_BYTES} bytes")
        try:
            raw = loads(text[start:end], what=f"line {i}")
        except RecursionError:
            raise bad(f"line {i} nests deeper than {MAX_MANIFEST_DEPTH} levels") from None
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":
                raise bad(f"line {i} holds more than one JSON value (one record a line)") from None
            raise bad(f"line {i} is not JSON: {exc}") from exc
        except ValueError as exc:  # a number no field may hold
            raise bad(f"is malformed: {exc}") from exc
        shard = plain(raw)
        if shard is None:
            key = f"line {i}"
            try:
                check_json_depth(raw, limit=MAX_MANIFEST_DEPTH, what=key)
                shard = ShardInfo.from_json(raw, key=key)
            except (TypeError, ValueError) as exc:
                raise bad(f"is malformed: {exc}") from exc
        yield check_shard_paths(shard, where=where)
        start, end = end + 1, text.find("\n", end + 1)


def read_shard_lists(store: Store, manifest: Manifest) -> tuple[ShardInfo, ...]:
    """The shards of every list of `manifest`, in order (see `read_shard_list`)."""
    uri = f"{store.uri}/{version_path(manifest.version)}"
    out: list[ShardInfo] = []
    for lst in manifest.shard_lists:
        out.extend(read_shard_list(store, lst, manifest_uri=uri))
    return tuple(out)


def spill(
    store: Store,
    manifest: Manifest,
    txn: str,
    *,
    base: Manifest | None = None,
) -> Manifest:
    """`manifest` with its inline shards moved into a new shard list when it has more
    than `MAX_INLINE_SHARDS` of them; the new list takes in the newest lists while each
    holds at most `MERGE_FACTOR` times the shards gathered so far (and the list stays
    within `MAX_LIST_SHARDS`). Only the lists taken in are read; the list is written at
    `shard_list_path(txn, manifest.version)`. `base` names the manifest the lists were
    read from, for errors. Returns `manifest` itself when nothing moves.
    """
    inline = manifest.inline_shards
    if len(inline) <= MAX_INLINE_SHARDS:
        return manifest
    lists = manifest.shard_lists
    k = newest_taken(
        [x.num_shards for x in lists], len(inline), factor=MERGE_FACTOR, limit=MAX_LIST_SHARDS
    )
    kept, taken = lists[: len(lists) - k], lists[len(lists) - k :]
    uri = f"{store.uri}/{version_path((base or manifest).version)}"
    shards: list[ShardInfo] = []
    for lst in taken:
        shards.extend(read_shard_list(store, lst, manifest_uri=uri))
    shards.extend(inline)
    new = write_shard_list(store, shard_list_path(txn, manifest.version), shards, manifest.version)
    logger.debug(
        "version %d of %s: %d shards into list %s (%d lists taken in)",
        manifest.version,
        store.uri,
        len(shards),
        new.path,
        k,
    )
    return manifest.derive(inline_shards=(), shard_lists=(*kept, new))


def fold(store: Store, manifest: Manifest, txn: str, version: int) -> Manifest:
    """`manifest` with every shard in one list (or all inline, when at most
    `MAX_INLINE_SHARDS`): what a compaction commits (reads every list)."""
    if len(manifest.shard_lists) == 1 and not manifest.inline_shards:
        return manifest
    shards = shards_of(store, manifest)
    if len(shards) <= MAX_INLINE_SHARDS:
        return manifest.derive(inline_shards=shards, shard_lists=())
    new = write_shard_list(store, shard_list_path(txn, version), shards, version)
    return manifest.derive(inline_shards=(), shard_lists=(new,))


def shards_of(store: Store, manifest: Manifest) -> tuple[ShardInfo, ...]:
    """Every base shard of `manifest`, its lists read through `store` (the manifest is
    bound to `store` when it was bound to none, so it keeps what it read)."""
    if not manifest.shard_lists:
        return manifest.inline_shards
    if manifest.store is None:
        manifest.bind(store)
    if manifest.store is store:
        return manifest.shards
    return read_shard_lists(store, manifest) + manifest.inline_shards
