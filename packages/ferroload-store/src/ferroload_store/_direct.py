"""Range reads of an object straight from obstore, without a block cache (memory stores,
object stores opened with `cache=None`): coalesced, and cut back into one view per range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_store._errors import truncated_error
from ferroload_store._ranges import coalesce_ranges

#: read(starts, lengths) -> one buffer per read (shorter where the object ends early),
#: and the object's size when the backend reported it on a short read (else None).
Read = Callable[[Sequence[int], Sequence[int]], tuple[Sequence[Any], int | None]]


def direct_ranges(
    read: Read,
    uri: str,
    path: str,
    starts: npt.ArrayLike,
    lengths: npt.ArrayLike,
    *,
    max_gap: int,
    max_read: int,
) -> list[memoryview]:
    """Ranges of object `path` (of store `uri`), read as few merged reads of `read`.

    Raises:
        ObjectTruncatedError: if the object ends before one of the ranges does; `end` is
            the first offset past the data that could not be read.
    """
    plan = coalesce_ranges(starts, lengths, max_gap=max_gap, max_read=max_read)
    if plan.num_reads == 0:
        return []
    rs, rl = plan.starts.tolist(), plan.lengths.tolist()
    size = None
    # Empty reads (empty payloads) need no request, and object stores refuse them.
    fetch = [k for k, n in enumerate(rl) if n]
    got_bufs: Sequence[Any] = []
    if fetch:
        got_bufs, size = read([rs[k] for k in fetch], [rl[k] for k in fetch])
    bufs: list[Any] = [b""] * len(rl)
    for k, b in zip(fetch, got_bufs, strict=True):
        bufs[k] = b
    views = [memoryview(b) for b in bufs]
    ends = np.asarray(plan.offset_in_read) + np.asarray(lengths, dtype=np.int64).reshape(-1)
    got_len = np.asarray([len(b) for b in bufs], dtype=np.int64)[plan.read_of]
    short = ends > got_len
    if short.any():
        i = int(np.flatnonzero(short)[0])
        read_i = int(plan.read_of[i])
        end = int(rs[read_i] + ends[i])
        ends_at = size if size is not None else int(rs[read_i] + got_len[i])
        raise truncated_error(uri, path, end=end, size=ends_at)
    return [
        views[r][o : o + n]
        for r, o, n in zip(
            plan.read_of.tolist(),
            plan.offset_in_read.tolist(),
            np.asarray(lengths, dtype=np.int64).reshape(-1).tolist(),
            strict=True,
        )
    ]
