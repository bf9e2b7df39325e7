"""Batch arrays reused once the consumer has let go of them.

A fresh output array per batch costs a page fault per page (or per huge page) and the
kernel's zeroing of it, paid in the decode threads as they first write: for a batch of
64 float32 224x224 images (38.5 MB) that is about a third of decoding it on two cores.
A decoded field therefore keeps the last few arrays it handed out and writes a new batch
into one of them once nothing else refers to it: not the prefetch queue, not the
training loop's batch, not a tensor made from it (`torch.from_numpy` keeps a reference
to the array, and every numpy view or torch view keeps one to it as well). Reference
counts tell: an array referred to only by this pool is free.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import numpy.typing as npt

#: Arrays kept per field: the one being built, the training loop's, and a couple queued.
KEEP = 4
# Free-threaded CPython's reference counts are not exact while other threads run.
_EXACT_REFCOUNTS = getattr(sys, "_is_gil_enabled", lambda: True)()


class BatchBuffers:
    """Output arrays of one field, reused once only this pool refers to them."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep if _EXACT_REFCOUNTS else 0
        self._arrays: list[npt.NDArray[Any]] = []
        #: arrays handed out again (for tests and benchmarks)
        self.reused = 0

    def empty(self, shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
        """An uninitialised array of `shape` and `dtype` that nobody else refers to."""
        dt = np.dtype(dtype)
        for arr in self._arrays:
            # references: the list, the loop variable, getrefcount's argument
            if sys.getrefcount(arr) == 3 and arr.shape == shape and arr.dtype == dt:
                self.reused += 1
                return arr
        arr = np.empty(shape, dtype=dt)
        if len(self._arrays) < self.keep:
            self._arrays.append(arr)
        else:  # replace a free array of another shape (a last, shorter batch), if any
            for i, old in enumerate(self._arrays):
                if sys.getrefcount(old) == 3:
                    self._arrays[i] = arr
                    break
        return arr
