"""Coalescing of byte ranges: many small reads of one object become a few large ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Ranges closer than this are read together (the gap is read and thrown away).
DEFAULT_MAX_GAP = 64 * 1024
#: A merged read never grows past this many bytes unless a single range is larger.
DEFAULT_MAX_READ = 32 * 1024 * 1024


@dataclass(frozen=True)
class CoalescedRanges:
    """The plan for reading a set of ranges with fewer requests.

    Attributes:
        starts: start offset of each merged read, ascending.
        lengths: length of each merged read.
        read_of: for each input range, the index of the merged read that covers it.
        offset_in_read: for each input range, where it starts inside that merged read.
    """

    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    read_of: npt.NDArray[np.int64]
    offset_in_read: npt.NDArray[np.int64]

    @property
    def num_reads(self) -> int:
        """How many requests the plan issues."""
        return len(self.starts)


def coalesce_ranges(
    starts: npt.ArrayLike,
    lengths: npt.ArrayLike,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    max_read: int = DEFAULT_MAX_READ,
) -> CoalescedRanges:
    """Merge byte ranges that lie close together into fewer, larger reads.

    Ranges may come in any order and may overlap or repeat. Two ranges (in offset order)
    share a read when the gap between them is at most `max_gap` bytes and the merged read
    stays within `max_read` bytes.

    Args:
        starts: start offset of each range.
        lengths: length of each range (zero is allowed).
        max_gap: largest gap, in bytes, read through to join two ranges.
        max_read: largest merged read, in bytes (a single larger range is still one read).

    Returns:
        The merged reads and, for every input range, where its bytes sit in them.

    Raises:
        ValueError: if the inputs differ in length or hold negative values.

    Examples:
        >>> plan = coalesce_ranges([0, 100, 10_000_000], [50, 50, 10])
        >>> plan.num_reads, plan.starts.tolist(), plan.lengths.tolist()
        (2, [0, 10000000], [150, 10])
    """
    s = np.asarray(starts, dtype=np.int64).reshape(-1)
    n = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if s.shape != n.shape:
        raise ValueError(f"starts and lengths differ in length ({len(s)} != {len(n)})")
    if len(s) and (s.min() < 0 or n.min() < 0):
        raise ValueError("range starts and lengths must be non-negative")
    if max_gap < 0 or max_read <= 0:
        raise ValueError("max_gap must be >= 0 and max_read > 0")
    if len(s) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CoalescedRanges(empty, empty, empty, empty)

    order = np.argsort(s, kind="stable")
    ss, ee = s[order], s[order] + n[order]
    # A running maximum of ends handles ranges nested inside earlier ones.
    run_end = np.maximum.accumulate(ee)
    gap_ok = np.empty(len(ss), dtype=bool)
    gap_ok[0] = False
    gap_ok[1:] = ss[1:] - run_end[:-1] <= max_gap
    read_id = np.cumsum(~gap_ok) - 1
    first = np.flatnonzero(~gap_ok)
    rs = ss[first]
    re = np.maximum.reduceat(ee, first)
    if np.any(re - rs > max_read):
        read_id, rs, re = _split_oversized(ss, ee, gap_ok, max_read)
    read_of = np.empty(len(s), dtype=np.int64)
    read_of[order] = read_id
    return CoalescedRanges(rs, re - rs, read_of, s - rs[read_of])


def _split_oversized(
    ss: npt.NDArray[np.int64],
    ee: npt.NDArray[np.int64],
    gap_ok: npt.NDArray[np.bool_],
    max_read: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Sequential merge that also caps each read at `max_read` bytes (the rare slow path)."""
    read_id = np.empty(len(ss), dtype=np.int64)
    read_starts: list[int] = []
    read_ends: list[int] = []
    cur_start = cur_end = 0
    for i, (a, b, joinable) in enumerate(
        zip(ss.tolist(), ee.tolist(), gap_ok.tolist(), strict=True)
    ):
        if joinable and max(cur_end, b) - cur_start <= max_read:
            cur_end = max(cur_end, b)
            read_ends[-1] = cur_end
        else:
            cur_start, cur_end = a, b
            read_starts.append(a)
            read_ends.append(b)
        read_id[i] = len(read_starts) - 1
    return read_id, np.asarray(read_starts, dtype=np.int64), np.asarray(read_ends, dtype=np.int64)


@dataclass(frozen=True)
class ReadParts:
    """Reads cut into parts that are fetched in parallel.

    Attributes:
        starts: start offset of each part; the parts of one read are adjacent and in order.
        lengths: length of each part.
        read_of: for each part, the index of the read it belongs to (ascending).
        offset_in_read: for each part, where it starts inside its read.
    """

    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    read_of: npt.NDArray[np.int64]
    offset_in_read: npt.NDArray[np.int64]

    @property
    def num_parts(self) -> int:
        """How many requests the parts take."""
        return len(self.starts)


def split_reads(starts: npt.ArrayLike, lengths: npt.ArrayLike, part_size: int) -> ReadParts:
    """Cut every read longer than `part_size` into parts of about `part_size` bytes.

    A read of `n` bytes becomes `ceil(n / part_size)` parts of equal length (to a byte),
    so that none is much shorter than the others; shorter reads, and empty ones, stay
    one part.

    Args:
        starts: start offset of each read.
        lengths: length of each read.
        part_size: the largest part, in bytes.

    Returns:
        The parts, and for each the read it belongs to and where it sits inside it.

    Raises:
        ValueError: if the inputs differ in length or hold negative values, or
            `part_size` is not positive.

    Examples:
        >>> parts = split_reads([0, 100], [40, 10], part_size=16)
        >>> parts.starts.tolist(), parts.lengths.tolist(), parts.read_of.tolist()
        ([0, 14, 27, 100], [14, 13, 13, 10], [0, 0, 0, 1])
    """
    s = np.asarray(starts, dtype=np.int64).reshape(-1)
    n = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if s.shape != n.shape:
        raise ValueError(f"starts and lengths differ in length ({len(s)} != {len(n)})")
    if len(s) and (s.min() < 0 or n.min() < 0):
        raise ValueError("read starts and lengths must be non-negative")
    if isinstance(part_size, bool) or int(part_size) != part_size or part_size <= 0:
        raise ValueError(f"part_size must be a positive int, got {part_size!r}")
    count = np.maximum(1, -(-n // int(part_size)))
    read_of = np.repeat(np.arange(len(s), dtype=np.int64), count)
    first = np.cumsum(count) - count
    j = np.arange(len(read_of), dtype=np.int64) - first[read_of]
    base = (n // count)[read_of]
    extra = (n % count)[read_of]
    part_len = base + (j < extra)
    offset = j * base + np.minimum(j, extra)
    return ReadParts(s[read_of] + offset, part_len, read_of, offset)
