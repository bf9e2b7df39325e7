"""The one check of each loader number and flag, and the bounds they keep.

`LoaderOptions` checks its options here when it is made, the `Sampler` its arguments,
`resolve_rank` a rank and world size from the environment, and `_state` the numbers of a
loader state: a value is accepted or refused the same way wherever it enters. An int is
an `int` (not a bool, float, str or numpy scalar), a flag a `bool`; the bounds keep
every count inside the int64 arithmetic of the orders and the shared memory of
DataLoader workers, so nothing overflows while iterating.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferroload_codec import DEFAULT_MAX_PIXELS
from ferroload_loader._errors import LoaderOptionError

INT64_MAX = (1 << 63) - 1
#: Seeds are `0 ≤ seed ≤ MAX_SEED`: numpy's `SeedSequence` takes no negative entropy,
#: and DataLoader workers share the seed in an int64.
MAX_SEED = INT64_MAX
#: Epochs are `0 ≤ epoch ≤ MAX_EPOCH` (shared with DataLoader workers in an int64).
MAX_EPOCH = INT64_MAX
#: The most ranks (`world_size`) and streaming lanes a loader takes: far above any
#: cluster, far below where `rank + j × world_size` could leave int64.
MAX_WORLD_SIZE = 1 << 20
#: The largest `shuffle_buffer` (items): more than any dataset holds, and its windows'
#: doubling ramp stays inside int64.
MAX_SHUFFLE_BUFFER = 1 << 40
#: DataLoader workers an iterable dataset keeps pass records for.
MAX_WORKERS = 256


def shown(value: Any) -> str:
    """`value` for an error message: its repr (an int of thousands of digits by its size,
    a long repr cut), and its type when it is not an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value) if value.bit_length() <= 256 else f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # an int of over 4,300 digits inside a container
        text = "..."
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"{text} (a {type(value).__name__})"


def int_expected(
    value: Any, low: int, high: int | None = None, *, none: bool = False, why: str = ""
) -> str | None:
    """None when `value` is an int (not a bool) in `[low, high]` (or None, with `none`);
    else what it must be (`why`: what `high` is)."""
    if none and value is None:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and value >= low and (high is None or value <= high):
        return None
    kind = {0: "a non-negative int", 1: "a positive int"}.get(low, f"an int >= {low}")
    kind += " or None" if none else ""
    return kind if high is None else f"{kind} (at most {high:,}{', ' + why if why else ''})"


def check_int(
    option: str, value: Any, *, low: int, high: int | None = None, none: bool = False
) -> None:
    """Refuse `value` for `option` unless it is an int in `[low, high]` (or None, with
    `none`).

    Raises:
        LoaderOptionError: naming the option and the value.
    """
    want = int_expected(value, low, high, none=none)
    if want is not None:
        raise LoaderOptionError(
            f"{option} must be {want}, got {shown(value)}", option=option, value=value
        )


def check_bool(option: str, value: Any) -> None:
    """Refuse anything but True or False for a flag (a string 'False' would be true).

    Raises:
        LoaderOptionError: naming the option and the value.
    """
    if not isinstance(value, bool):
        raise LoaderOptionError(
            f"{option} must be True or False, got {shown(value)}", option=option, value=value
        )


def check_seed(seed: Any) -> None:
    """Refuse a seed that is not an int in `[0, MAX_SEED]`."""
    check_int("seed", seed, low=0, high=MAX_SEED)


def check_epoch(epoch: Any) -> None:
    """Refuse an epoch that is not an int in `[0, MAX_EPOCH]`."""
    check_int("epoch", epoch, low=0, high=MAX_EPOCH)


def check_lanes(lanes: Any) -> None:
    """Refuse `lanes` that is neither None nor a positive int of at most
    `MAX_WORLD_SIZE`."""
    check_int("lanes", lanes, low=1, high=MAX_WORLD_SIZE, none=True)


def check_rank(rank: Any, world_size: Any) -> None:
    """Refuse a `world_size` outside `[1, MAX_WORLD_SIZE]` or a `rank` outside
    `[0, world_size)` (None: to be found later, from torch.distributed or the
    environment)."""
    check_int("world_size", world_size, low=1, high=MAX_WORLD_SIZE, none=True)
    high = MAX_WORLD_SIZE - 1 if world_size is None else world_size - 1
    if rank is not None and int_expected(rank, 0, high) is not None:
        raise LoaderOptionError(
            f"rank must be in [0, {high + 1}), got {shown(rank)}", option="rank", value=rank
        )


def check_resize(resize: Any, images: Any = (), video: Any = (), *, option: str = "resize") -> None:
    """Refuse an output size that is not a positive int or `(height, width)` of them,
    or whose pixels exceed what the fields may decode: the codec's
    `DEFAULT_MAX_PIXELS`, or the largest `max_pixels` a field of `images` / `video`
    raises it to. Each field's own `size` option is checked alike.

    An image a batch holds is allocated whole for every sample: an output of
    `(10**6, 10**6)` would otherwise fail with a `MemoryError` at the first batch.

    Raises:
        LoaderOptionError: naming the option, the size and the limit.
    """
    specs = [s for s in (images, video) if isinstance(s, Mapping)]
    given = [o.get("max_pixels") for spec in specs for o in spec.values() if isinstance(o, Mapping)]
    limit = max(
        [DEFAULT_MAX_PIXELS, *(m for m in given if isinstance(m, int) and not isinstance(m, bool))]
    )
    _check_size(option, resize, limit)
    for kind, spec in (("images", images), ("video", video)):
        if not isinstance(spec, Mapping):
            continue
        for name, opts in spec.items():
            if isinstance(opts, Mapping) and opts.get("size") is not None:
                _check_size(f"{kind}[{name!r}]['size']", opts["size"], limit)


def _check_size(option: str, size: Any, limit: int) -> None:
    if size is None:
        return
    dims = (size, size) if isinstance(size, int) and not isinstance(size, bool) else size
    if (
        not isinstance(dims, tuple | list)
        or len(dims) != 2
        or any(int_expected(v, 1) is not None for v in dims)
    ):
        raise LoaderOptionError(
            f"{option} must be (height, width) of positive ints or an int, got {shown(size)}",
            option=option,
            value=size,
        )
    pixels = dims[0] * dims[1]
    if pixels > limit:
        count = f"{pixels:,}" if pixels.bit_length() <= 256 else "more than 2**256"
        raise LoaderOptionError(
            f"{option}=({shown(dims[0])}, {shown(dims[1])}) makes images of {count} pixels, "
            f"over the limit of "
            f"{limit:,} (ferroload_codec.DEFAULT_MAX_PIXELS, or the largest max_pixels= "
            "of a field's options)",
            option=option,
            value=size,
        )
