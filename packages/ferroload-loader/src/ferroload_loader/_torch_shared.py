"""Shared memory of the torch datasets: positions every DataLoader worker reads, and batches.

`SharedInts` holds the seed and epoch of `FerroTorchDataset`'s per-sample choices (int64s:
`LoaderOptions` and loader states keep seeds and epochs inside that range);
`Passes` records where each worker's passes of a `FerroIterableDataset` start;
`SharedRing` is a worker's output arrays of one decoded field, in shared memory, which
`pack` hands to the main process as a slot number instead of a copy.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import secrets
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ferroload_loader._buffers import BatchBuffers
from ferroload_loader._checks import MAX_WORKERS


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

    A third slot per worker holds what a worker restored by `load_state_dict` says of its
    share of the restored pass (done or not), tagged with the resume it belongs to
    (`resume_tag`): the workers of one resume agree through it whether the epoch was
    consumed (see `FerroIterableDataset._settle_epoch_end`). The tag tells a word of
    this resume from one an earlier resume left, so nothing clears these slots.
    """

    SEED, EPOCH, CONSUMED, TOKEN, RUNNER, HEAD = 0, 1, 2, 3, 4, 5

    def __init__(self, seed: int) -> None:
        self._t = torch.zeros(self.HEAD + 3 * MAX_WORKERS, dtype=torch.int64)
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
        self._t[self.HEAD + MAX_WORKERS : self.HEAD + 2 * MAX_WORKERS] = 0

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

    def publish_share(self, worker: int, tag: int, *, done: bool) -> None:
        """Say, for the resume `tag`, whether this worker's share of its restored pass is
        done (one int64 store: a reader sees the old value or the new one)."""
        self._t[self.HEAD + 2 * MAX_WORKERS + worker] = (tag & _TAG_MASK) << 2 | (1 + done)

    def share_done(self, worker: int, tag: int) -> bool | None:
        """What `worker` said of its share for the resume `tag` (None: nothing yet)."""
        v = int(self._t[self.HEAD + 2 * MAX_WORKERS + worker])
        if v == 0 or (v >> 2) & _TAG_MASK != tag & _TAG_MASK:
            return None
        return v & 3 == 2


_TAG_MASK = (1 << 60) - 1


def resume_tag(worker: int) -> int | None:
    """A number that the DataLoader workers of one iterator share, and the workers of
    every later iterator of this process exceed: the running count of processes that
    `multiprocessing` started here (a worker's `_identity`), less the worker's id. The
    workers of an iterator start one after another, so theirs count up with their ids;
    None outside a `multiprocessing` child."""
    identity = multiprocessing.current_process()._identity
    return identity[-1] - worker if identity else None


# --------------------------------------------------------------------------- batch rings

#: Output arrays a DataLoader worker keeps per decoded field: the one being built, the
#: DataLoader's queue (`prefetch_factor`, 2 by default) and the training loop's batch
#: (two for a moment: `for b in dl` lets go of the last one after the next arrives).
RING_SLOTS = 6
#: Tensors up to this size that are not ring slots (labels, masks) travel inside the
#: pickle: a copy of a few KiB is cheaper than handing torch's shared memory over (a
#: file descriptor through a socket per tensor).
INLINE_BYTES = 1 << 16

_tokens = itertools.count()
# the rings of this process (a DataLoader worker), for `pack` to find a tensor's slot
_RINGS: weakref.WeakSet[SharedRing] = weakref.WeakSet()


class _Handout:
    """One array handed out from a ring slot (its numpy base): when the last view of it
    dies, this process no longer uses the slot."""

    def __init__(self, ring: SharedRing, slot: int, shape: tuple[int, ...], dtype: np.dtype[Any]):
        self._ring, self._slot = ring, slot
        ptr = ring.bases[slot].data_ptr()
        self.__array_interface__ = {
            "data": (ptr, False), "shape": shape, "typestr": dtype.str, "version": 3,
        }  # fmt: skip

    def __del__(self) -> None:
        self._ring.held[self._slot] = False


class SharedRing(BatchBuffers):
    """The output arrays of one decoded field in a DataLoader worker, in shared memory.

    A slot is free again once this process holds no view of it and the main process has
    let go of every batch sent from it: the worker counts what it sent of each slot, the
    main process counts (in a shared array) what it let go of, and a slot whose counts
    agree is free. The main process learns of a slot's memory once (torch's shared-memory
    hand-over) and then only receives its number. With every slot in use (a training
    loop that keeps batches), an array is made as usual and torch copies it.
    """

    def __init__(self, key: str, keep: int = RING_SLOTS) -> None:
        super().__init__(keep)
        self.keep = keep
        #: names the ring in the main process: the dataset, worker and field
        self.key = key
        #: this ring (a worker of another DataLoader, or a restarted one, has another)
        self.token = f"{os.getpid()}:{next(_tokens)}:{secrets.token_hex(4)}"
        self.bases: list[torch.Tensor] = []  # flat uint8, shared
        self.held: list[bool] = []  # a view of the slot lives in this process
        self.sent: list[int] = []  # batches sent from each slot
        self.announced: list[bool] = []  # the main process has the slot's memory
        self.returned = torch.zeros(keep, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._returned = self.returned.numpy()
        self.introduced = False  # the main process has `returned`
        _RINGS.add(self)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
        """A free slot's memory as an array of `shape` and `dtype` (uninitialised)."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        small = -1
        for i, base in enumerate(self.bases):
            if not self.held[i] and self.sent[i] == self._returned[i]:
                if base.numel() >= nbytes:
                    self.reused += 1
                    return self._hand(i, shape, dt)
                small = i
        if len(self.bases) < self.keep:
            self.bases.append(torch.empty(0, dtype=torch.uint8))
            self.held.append(False)
            self.sent.append(0)
            self.announced.append(False)
            small = len(self.bases) - 1
        elif small < 0:
            return np.empty(shape, dtype=dt)
        # a new slot, or a free one too small for this batch: new memory
        self.bases[small] = torch.empty(max(1, nbytes), dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        self.sent[small] = int(self._returned[small])
        self.announced[small] = False
        return self._hand(small, shape, dt)

    def _hand(self, slot: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        self.held[slot] = True
        return np.asarray(_Handout(self, slot, shape, dtype))

    def find(self, t: torch.Tensor) -> int:
        """The slot holding all of `t`'s memory, or -1."""
        ptr, end = t.data_ptr(), t.data_ptr() + t.nbytes
        for i, base in enumerate(self.bases):
            start = base.data_ptr()
            if start <= ptr and end <= start + base.numel() and base.numel():
                return i
        return -1


class _Received:
    """A worker's ring as the main process knows it: the slots' memory, and the shared
    counts of the batches it let go of."""

    def __init__(self, token: str, returned: torch.Tensor) -> None:
        self.token = token
        self.pid = int(token.split(":", 1)[0])
        self.returned = returned
        self._returned = returned.numpy()
        self.bases: dict[int, torch.Tensor] = {}
        # batches die in any thread (the training loop's, DataLoader's pin-memory one)
        self._lock = threading.Lock()

    def give_back(self, slot: int) -> None:
        with self._lock:
            self._returned[slot] += 1


class _Returned:
    """The numpy base of a batch tensor received from a ring slot: when the last view of
    it dies, the slot is counted as let go of."""

    def __init__(self, ring: _Received, slot: int, offset: int, nbytes: int) -> None:
        self._ring, self._slot = ring, slot
        self._base = ring.bases[slot]  # the memory stays mapped while a view lives
        ptr = self._base.data_ptr() + offset
        self.__array_interface__ = {
            "data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3,
        }  # fmt: skip

    def __del__(self) -> None:
        self._ring.give_back(self._slot)


# the rings the main process received batches from, by `SharedRing.key`
_RECEIVED: dict[str, _Received] = {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def forget_rings(prefix: str) -> None:
    """Drop the rings of a dataset (keys starting with `prefix`) in this process."""
    for key in [k for k in _RECEIVED if k.startswith(prefix)]:
        del _RECEIVED[key]


def _from_ring(
    key: str,
    token: str,
    slot: int,
    base: torch.Tensor | None,
    returned: torch.Tensor | None,
    offset: int,
    nbytes: int,
    dtype: torch.dtype,
    shape: tuple[int, ...],
) -> torch.Tensor:
    """Unpickling in the main process: the tensor in slot `slot` of ring `token`."""
    ring = _RECEIVED.get(key)
    if ring is None or ring.token != token:
        if returned is None:
            raise RuntimeError(
                f"a batch from ring slot {slot} of {key} arrived before its ring did"
            )
        # the rings of workers that exited (a DataLoader without persistent workers
        # starts new ones every pass) are dropped; a live worker's is kept
        prefix = key.split(":", 1)[0] + ":"  # the dataset's rings
        for k in [k for k, r in _RECEIVED.items() if k.startswith(prefix)]:
            if not _alive(_RECEIVED[k].pid):
                del _RECEIVED[k]
        ring = _Received(token, returned)
        _RECEIVED[key] = ring
    if base is not None:
        ring.bases[slot] = base
    arr = np.asarray(_Returned(ring, slot, offset, nbytes))
    return torch.from_numpy(arr).view(dtype).view(shape)


def _from_numpy(a: npt.NDArray[Any]) -> torch.Tensor:
    return torch.from_numpy(a)


class _Packed:
    """A tensor as `pack` sends it: its pickle is the reduction given."""

    def __init__(self, reduce: tuple[Any, tuple[Any, ...]]) -> None:
        self._reduce = reduce

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self._reduce


def pack(value: Any) -> Any:
    """`value` as a DataLoader worker sends it: a tensor in a ring slot as the slot's
    number (and the slot's memory the first time), a small tensor inside the pickle;
    anything else as it is (torch's own pickling)."""
    if (
        not isinstance(value, torch.Tensor)
        or value.device.type != "cpu"
        or value.requires_grad
        or not value.is_contiguous()
        or type(value) is not torch.Tensor
        or not value.nbytes
    ):
        return value
    for ring in _RINGS:
        slot = ring.find(value)
        if slot < 0:
            continue
        base = ring.bases[slot]
        returned = None if ring.introduced else ring.returned
        ring.introduced = True
        memory = None if ring.announced[slot] else base
        ring.announced[slot] = True
        ring.sent[slot] += 1
        offset = value.data_ptr() - base.data_ptr()
        args = (ring.key, ring.token, slot, memory, returned, offset, value.nbytes,
                value.dtype, tuple(value.shape))  # fmt: skip
        return _Packed((_from_ring, args))
    if value.nbytes <= INLINE_BYTES and value.dtype in _NUMPY_DTYPES:
        return _Packed((_from_numpy, (value.numpy(),)))
    return value


_NUMPY_DTYPES = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
     torch.float16, torch.float32, torch.float64}
)  # fmt: skip
