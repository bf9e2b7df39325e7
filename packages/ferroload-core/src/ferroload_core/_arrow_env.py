"""Options of the Arrow library's allocator, set before pyarrow loads.

pyarrow allocates through mimalloc, which asks Linux for transparent huge pages on its
arenas (`madvise(MADV_HUGEPAGE)` on a 1 GiB reservation). Where the kernel's THP setting
is `madvise` (the usual default), a page fault there may compact memory before it
returns: a loader's first index read took 12-44 ms of system time for a few MB (26 ms
against 1.2 ms with huge pages off), and every read after an allocator purge could
stall again. mimalloc reads `MIMALLOC_ALLOW_THP` once, when pyarrow's library loads; so
the first ferroload import sets it to 0, unless it is set already (set it to 1 before
importing ferroload to keep huge pages). It changes how mimalloc maps memory, never
what is allocated: the same bytes, without the compaction stalls.
"""

from __future__ import annotations

import os

#: The mimalloc option ferroload sets (unless the environment has it already).
MIMALLOC_THP = "MIMALLOC_ALLOW_THP"


def set_arrow_allocator_defaults() -> None:
    """Turn mimalloc's transparent huge pages off unless the environment chose already.

    Only a call before pyarrow's library loads has an effect; ferroload_core makes it
    when it is imported, and every ferroload package imports ferroload_core before
    pyarrow."""
    os.environ.setdefault(MIMALLOC_THP, "0")
