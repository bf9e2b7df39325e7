"""0.1.1 compatibility: the Python spellings of ferroload-rs 0.1.1, the Rust original
whose PyPI name ferroload 0.2 took (docs/migrating.md).

Every public name and documented call of 0.1.1 lives here, in one place, and does one of
three things: works as it did; works and emits a `FutureWarning` naming the 0.2 spelling;
or raises an error naming it. The facade (`ferroload`) registers these names; no package
below it knows them (`ferroload_loader` re-exports the loader names lazily, because
0.1.1's scripts import them from there). They are deprecated and go in `REMOVED_IN`.
"""

from __future__ import annotations

import warnings

#: The release that removes the 0.1.1 spellings.
REMOVED_IN = "0.4"


def deprecated(old: str, new: str, *, stacklevel: int = 3, why: str = "") -> None:
    """Warn that the 0.1.1 spelling `old` is deprecated in favour of `new` (a
    `FutureWarning`, shown by default, as for end users' code)."""
    extra = f" ({why})" if why else ""
    warnings.warn(
        f"{old} is ferroload-rs 0.1.1's spelling, deprecated and removed in ferroload "
        f"{REMOVED_IN}: use {new}{extra}. See docs/migrating.md",
        FutureWarning,
        stacklevel=stacklevel,
    )


class RemovedIn02Error(AttributeError, TypeError):
    """A 0.1.1 name or call that 0.2 cannot honour: the message names the 0.2 spelling.
    An `AttributeError` (a missing name) and a `TypeError` (a call that no longer fits)."""


def removed(old: str, new: str, why: str = "") -> RemovedIn02Error:
    """The error for a 0.1.1 spelling that 0.2 refuses."""
    extra = f": {why}" if why else ""
    return RemovedIn02Error(
        f"{old} was ferroload-rs 0.1.1's spelling and is gone in ferroload 0.2{extra}; "
        f"use {new}. See docs/migrating.md"
    )
