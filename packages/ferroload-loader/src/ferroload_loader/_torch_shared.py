"""Shared memory of the torch datasets: a few int64s every DataLoader worker reads.

`SharedInts` holds the seed and epoch of `FerroTorchDataset`'s per-sample choices;
`Passes` records where each worker's passes of a `FerroIterableDataset` start.
"""

from __future__ import annotations

import os

import torch

_INT64 = (-(1 << 63), 1 << 63)


def check_seed(seed: int) -> int:
    """`seed`, which must fit in the int64 slot that shares it with the workers."""
    if not isinstance(seed, int) or not _INT64[0] <= seed < _INT64[1]:
        raise ValueError(f"seed must be an int that fits in 64 bits, got {seed!r}")
    return seed


class SharedInts:
    """A few int64s in shared memory: set in the main process, read by DataLoader workers,
    persistent ones included (forked or spawned: torch shares the storage)."""

    def __init__(self, *values: int) -> None:
        t = torch.tensor(values, dtype=torch.int64)
        self._t = t.share_memory_()  # type: ignore[no-untyped-call]

    def set(self, *values: int) -> None:
        self._t[: len(values)] = torch.tensor(values, dtype=torch.int64)

    def get(self) -> list[int]:
        return [int(v) for v in self._t.tolist()]


#: DataLoader workers an iterable dataset keeps pass records for.
MAX_WORKERS = 256


class Passes:
    """Where the passes of a `FerroIterableDataset` start, shared by all its processes.

    The main process writes the head (seed, epoch, position, resume token) in
    `set_epoch` and `load_state_dict`, between passes. Each DataLoader worker `w` (the
    main process is worker 0 of 1) writes only its own two slots: the resume token it
    has used, and the epoch of the last pass it began with whether it finished it
    (`2·epoch + 1`, `+1` when finished; 0 for none since the head was last set). So a
    pass's start is a pure function of this table, and every worker of a pass finds
    the same one without locks. The process id of whoever began the last pass tells
    the main process whether it knows the position itself.
    """

    SEED, EPOCH, CONSUMED, TOKEN, RUNNER, HEAD = 0, 1, 2, 3, 4, 5

    def __init__(self, seed: int) -> None:
        self._t = torch.zeros(self.HEAD + 2 * MAX_WORKERS, dtype=torch.int64)
        self._t[self.SEED] = seed
        self._t.share_memory_()  # type: ignore[no-untyped-call]

    def head(self) -> tuple[int, int, int, int]:
        seed, epoch, consumed, token = self._t[: self.RUNNER].tolist()
        return int(seed), int(epoch), int(consumed), int(token)

    @property
    def runner(self) -> int:
        """The process id that began the last pass since the head was set (0: none)."""
        return int(self._t[self.RUNNER])

    def set_head(self, seed: int, epoch: int, consumed: int, *, resume: bool) -> None:
        """A new position; `resume` makes the next pass of every worker start there."""
        token = self.head()[3]
        self._t[: self.HEAD] = torch.tensor([seed, epoch, consumed, token + resume, 0])
        if not resume:  # a pending resume is cancelled too
            self._t[self.HEAD : self.HEAD + MAX_WORKERS] = token
        self.clear_records()

    def clear_records(self) -> None:
        """Forget the workers' passes: the next pass starts the head's epoch."""
        self._t[self.HEAD + MAX_WORKERS :] = 0

    def seen(self, worker: int) -> int:
        return int(self._t[self.HEAD + worker])

    def see(self, worker: int, token: int) -> None:
        self._t[self.HEAD + worker] = token

    def record(self, worker: int, epoch: int, *, finished: bool) -> None:
        self._t[self.HEAD + MAX_WORKERS + worker] = 2 * epoch + 1 + finished
        if not finished:
            self._t[self.RUNNER] = os.getpid()

    def passes(self, workers: int) -> list[tuple[int, bool]]:
        """(epoch, finished) of the last pass of each worker that began one."""
        slots = self._t[self.HEAD + MAX_WORKERS : self.HEAD + MAX_WORKERS + workers].tolist()
        return [((v - 1) // 2, (v - 1) % 2 == 1) for v in slots if v > 0]
