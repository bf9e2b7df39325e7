"""`ShardSequence`: the tar shards of one write, filled in turn, each with its side index.

Also what goes into them: `sample_members` checks a sample's payloads and names them as
tar members.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ferroload_format._errors import (
    InvalidPayloadError,
    InvalidSampleIdError,
    UndeclaredModalityError,
)
from ferroload_format._index import write_part
from ferroload_format._names import MAX_MEMBER_NAME, member_name
from ferroload_format._paths import shard_paths
from ferroload_format._records import Modality, ShardInfo
from ferroload_format._tar import END_OF_ARCHIVE, ShardMembers, ShardWriter
from ferroload_store import Store

_BYTES_LIKE = (bytes, bytearray, memoryview)


class ShardSequence:
    """The shards a `Writer` fills one after another.

    A sample goes to the current shard unless it would take that shard (already holding
    a sample) past `shard_size`; then the shard is finished (closed, its side index
    written, docs/format.md §4) and the next one opened.

    Args:
        store: the dataset's store.
        txn: the write's transaction id (it names the shards).
        shard_size: the target size of one shard, in bytes.
    """

    def __init__(self, store: Store, txn: str, shard_size: int) -> None:
        self._store = store
        self._txn = txn
        self._shard_size = shard_size
        self.finished: list[ShardInfo] = []
        """The shards finished so far, in order (a shard's code is its place here)."""
        self._shard: ShardWriter | None = None

    def for_sample(self, sample_bytes: int) -> ShardWriter:
        """The shard the next sample (`sample_bytes` of members) goes to; its code is
        `len(finished)`."""
        shard = self._shard
        if (
            shard is not None
            and shard.num_samples
            and (shard.size + sample_bytes + len(END_OF_ARCHIVE) > self._shard_size)
        ):
            self.finish()
            shard = None
        if shard is None:
            path, _ = shard_paths(self._txn, len(self.finished))
            shard = self._shard = ShardWriter(self._store.open_writer(path), path)
        return shard

    def finish(self) -> None:
        """Finish the current shard, if any: close it and write its side index."""
        shard = self._shard
        if shard is None:
            return
        self._shard = None
        size = shard.close()
        path, side_path = shard_paths(self._txn, len(self.finished))
        write_side_index(self._store, side_path, shard.members)
        self.finished.append(
            ShardInfo(path, side_path, size, shard.num_samples, len(shard.members.names), 0)
        )

    def abort(self) -> list[str]:
        """Drop the current shard (nothing of it stays); the paths the finished shards
        and their side indexes left behind (for the caller to delete)."""
        if self._shard is not None:
            self._shard.abort()
            self._shard = None
        return [p for s in self.finished for p in (s.path, s.side_index)]


def write_side_index(store: Store, path: str, members: ShardMembers) -> None:
    """Write the side index of a shard (docs/format.md §4) to `path`."""
    side = pa.table(
        {
            "member": pa.array(members.names, type=pa.string()),
            "offset": pa.array(members.offsets, type=pa.int64()),
            "length": pa.array(members.lengths, type=pa.int64()),
            "checksum": pa.array(members.checksums, type=pa.uint64()),
        }
    )
    store.put(path, write_part(side))


def sample_members(
    sid: str, data: Mapping[str, Any], modalities: Mapping[str, Modality], *, uri: str
) -> list[tuple[str, str, Any, int]]:
    """(modality, member name, payload, size) of each payload of sample `sid`, in the
    order of `modalities` (the declared ones, by name), checked: declared, bytes-like,
    and a member name that fits a tar header."""
    if not isinstance(data, Mapping):
        raise InvalidPayloadError(
            f"data of sample {sid!r} must be a mapping of modality -> bytes, "
            f"got {type(data).__name__}",
            uri=uri,
            sample_id=sid,
        )
    for key, value in data.items():
        if key not in modalities:
            raise UndeclaredModalityError(
                f"sample {sid!r} has a payload for {key!r}, which is not declared; "
                f"declared: {list(modalities) or 'none'} (call declare() first)",
                uri=uri,
                sample_id=sid,
                column=str(key),
            )
        if not isinstance(value, _BYTES_LIKE):
            hint = " (encode text first: s.encode())" if isinstance(value, str) else ""
            raise InvalidPayloadError(
                f"payload {key!r} of sample {sid!r} is {type(value).__name__}, not bytes{hint}",
                uri=uri,
                sample_id=sid,
                column=key,
            )
    out = []
    for m in modalities.values():
        if m.name in data:
            name = member_name(sid, m.name, m.ext)
            if len(name) > MAX_MEMBER_NAME:
                raise InvalidSampleIdError(
                    f"tar member name {name!r} of sample {sid!r} is longer than "
                    f"{MAX_MEMBER_NAME} characters; use a shorter sample id",
                    uri=uri,
                    sample_id=sid,
                )
            value = data[m.name]
            size = value.nbytes if isinstance(value, memoryview) else len(value)
            out.append((m.name, name, value, size))
    return out
