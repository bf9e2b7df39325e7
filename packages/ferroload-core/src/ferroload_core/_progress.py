"""One way to report progress from long-running calls: `progress=True | False | callable`.

Every long call of the Python API (`import_*`, `export_*`, `Dataset.copy_to`,
`Dataset.verify`, `Dataset.map`) takes `progress=` and resolves it here:

- `None` (the default): a bar when standard error is a terminal, else nothing;
  `FERROLOAD_PROGRESS=1` forces the bar, `FERROLOAD_PROGRESS=0` hides it.
- `True` / `False`: a bar / nothing.
- a callable: called as `progress(done, total)` (`total` may be None when unknown),
  nothing drawn.

Bars are drawn by tqdm (a dependency of the packages that draw them; imported only when a
bar is shown) on standard error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: `progress(done, total)`: `total` is None while unknown.
ProgressCallback = Callable[[int, "int | None"], None]
#: What a `progress=` argument accepts.
ProgressArg = bool | ProgressCallback | None


def progress_wanted(progress: ProgressArg) -> bool:
    """Whether `progress` asks for a bar (see the module docstring)."""
    if progress is None:
        forced = os.environ.get("FERROLOAD_PROGRESS", "")
        if forced in ("0", "1"):
            return forced == "1"
        return bool(getattr(sys.stderr, "isatty", lambda: False)())
    return progress is True


@contextmanager
def progress_reporter(
    progress: ProgressArg, *, desc: str, unit: str = "it", total: int | None = None
) -> Iterator[ProgressCallback]:
    """Resolve a `progress=` argument to a `report(done, total)` function for the length of
    the `with` block: it draws a tqdm bar, calls the user's callable, or does nothing.

    Args:
        progress: the caller's `progress=` argument.
        desc: the bar's label (e.g. `"import imagefolder"`).
        unit: what is counted (`"file"`, `"sample"`, …).
        total: the count when known up front (else pass it to `report` later).

    Raises:
        TypeError: for a `progress` that is neither a bool, None nor a callable.
    """
    if callable(progress):
        yield progress
        return
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(
            f"progress must be True, False, None or a callable(done, total), "
            f"got {type(progress).__name__}"
        )
    if not progress_wanted(progress):
        yield _ignore
        return
    from tqdm import tqdm  # type: ignore[import-untyped]

    bar: Any = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def report(done: int, total: int | None = None) -> None:
        if total is not None and total != bar.total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        bar.close()


def _ignore(done: int, total: int | None = None) -> None:
    """Nothing to report to."""
