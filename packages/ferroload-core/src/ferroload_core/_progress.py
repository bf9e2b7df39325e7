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
import time
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
    first_tick: list[float] = []  # when the first work was reported

    def report(done: int, total: int | None = None) -> None:
        if total is not None and total != bar.total:
            bar.total = total
        # the time to the first tick is mostly start-up (imports, threads, opening the
        # input): a rate and a time left drawn from it are far off (`1/1200 [00:01<19:50]`),
        # so they show only once work has been reported for a while
        if done > 0 and not first_tick:
            first_tick.append(time.monotonic())
        settled = bool(first_tick) and time.monotonic() - first_tick[0] >= _SETTLE_SECONDS
        bar.bar_format = None if settled or not bar.total else _NO_ESTIMATE
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        bar.close()


#: Seconds of reported work before a bar shows its rate and time left.
_SETTLE_SECONDS = 0.5
#: tqdm's bar with a known total, without the rate and time left.
_NO_ESTIMATE = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<?, ?{unit}/s{postfix}]"


def _ignore(done: int, total: int | None = None) -> None:
    """Nothing to report to."""
