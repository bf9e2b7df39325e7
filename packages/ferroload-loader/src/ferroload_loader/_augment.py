"""The loader's augmentation and output options for images, and the per-batch transform.

Images are cropped, flipped and converted in the codec's decode threads
(`ferroload_codec.ImageDecoder`); this module turns the loader's options (`crop`,
`hflip`, `layout`, `dtype`, `normalize`) into decoder options, and runs a user's
`transform` on each finished batch, with a generator seeded from the batch's items.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ferroload_codec._augment import DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE, check_crop

Layout = Literal["NHWC", "NCHW"]
LAYOUTS = {"NHWC": "HWC", "NCHW": "CHW"}
#: The image dtypes a loader delivers (bfloat16 needs torch: numpy has no such dtype).
DTYPES = ("uint8", "float32", "float16", "bfloat16")
Normalize = tuple[Sequence[float], Sequence[float]]


@dataclass(frozen=True)
class RandomResizedCrop:
    """A seeded random resized crop of every image (torchvision's `RandomResizedCrop`).

    Pass it as `make_loader(crop=RandomResizedCrop(...), resize=(h, w))`; `crop="random"`
    is the same with the defaults. For each image and epoch, a box of a random area and
    aspect ratio is cut out and resized to `resize`, in the decode threads; the choice is
    drawn from the sample's seed (a function of the loader's seed, the epoch and the
    sample), so it is the same whatever the threads, workers, ranks or a resume.

    Attributes:
        scale: the range of the box's area, as a fraction of the image's.
        ratio: the range of the box's aspect ratio (width / height), drawn log-uniformly.

    Raises:
        ValueError: a scale outside (0, 1], a ratio that is not positive, or a range whose
            low end is above its high end.

    Examples:
        >>> RandomResizedCrop(scale=(0.35, 1.0))
        RandomResizedCrop(scale=(0.35, 1.0), ratio=(0.75, 1.3333333333333333))
    """

    scale: tuple[float, float] = DEFAULT_CROP_SCALE
    ratio: tuple[float, float] = DEFAULT_CROP_RATIO

    def __post_init__(self) -> None:
        scale, ratio = check_crop(self.scale, self.ratio)
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "ratio", ratio)


#: `crop=` names and the decoder's resize mode for each.
_CROP_MODES: dict[str | None, str] = {
    None: "exact", "center": "shorter", "pad": "longer", "random": "random",
    "shortest_edge": "exact",  # at each image's own size (`PaddedImageField`)
}  # fmt: skip


def crop_options(crop: Any) -> dict[str, Any]:
    """The `ImageDecoder` options of `crop=` (`resize`, and `crop_scale` / `crop_ratio`).

    Raises:
        ValueError: for anything but None, `center`, `pad`, `random` or a
            `RandomResizedCrop`.
    """
    if isinstance(crop, RandomResizedCrop):
        return {"resize": "random", "crop_scale": crop.scale, "crop_ratio": crop.ratio}
    if isinstance(crop, str | None) and crop in _CROP_MODES:
        return {"resize": _CROP_MODES[crop]}
    raise ValueError(
        "crop must be None, 'center', 'pad', 'random', 'shortest_edge' or a "
        f"RandomResizedCrop(scale=, ratio=), got {crop!r}"
    )


def dtype_name(dtype: Any) -> str | None:
    """The name of an image dtype given as a string, a numpy or a torch dtype (None stays
    None).

    Raises:
        ValueError: for a dtype other than uint8, float32, float16 or bfloat16.
    """
    if dtype is None:
        return None
    if type(dtype).__module__ == "torch":  # torch.float32 and friends, without torch
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in DTYPES:
        raise ValueError(
            f"dtype must be one of {', '.join(DTYPES)} (a name, a numpy or a torch dtype), "
            f"got {dtype!r}"
        )
    return name


def output_options(layout: Any, dtype: Any, normalize: Any) -> tuple[dict[str, Any], str | None]:
    """The `ImageDecoder` options of `layout=`, `dtype=` and `normalize=`, and the torch
    dtype the batch is viewed as afterwards (`bfloat16`, decoded as its bit patterns;
    None for none).

    Raises:
        ValueError: an unknown layout or dtype, a `normalize` that is not `(mean, std)`,
            or `normalize` with uint8.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'NHWC' or 'NCHW', got {layout!r}")
    name = dtype_name(dtype)
    opts: dict[str, Any] = {"layout": LAYOUTS[layout]}
    if normalize is not None:
        if not isinstance(normalize, Sequence) or isinstance(normalize, str) or len(normalize) != 2:
            raise ValueError(
                "normalize must be (mean, std), per channel on the [0, 1] scale, e.g. "
                f"((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)); got {normalize!r}"
            )
        if name == "uint8":
            raise ValueError("normalize gives float images: pass dtype='float32' (or none)")
        opts["mean"], opts["std"] = normalize
        name = name or "float32"
    name = name or "uint8"
    return {**opts, "dtype": name}, None if name != "bfloat16" else name


def image_options(
    crop: Any, hflip: Any, layout: Any, dtype: Any, normalize: Any, field: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """One image field's `ImageDecoder` options and its torch dtype (see
    `output_options`): the loader's options, overridden by the field's own.

    The field's own options are `ImageDecoder`'s; its `dtype` may also be `bfloat16` or a
    torch dtype.
    """
    opts = {**crop_options(crop), "hflip": hflip}
    out, torch_dtype = output_options(layout, dtype, normalize)
    opts.update(out)
    own = dict(field)
    if "dtype" in own:
        name = dtype_name(own.pop("dtype")) or "uint8"
        torch_dtype = name if name == "bfloat16" else None
        own["dtype"] = name
    opts.update(own)
    return opts, torch_dtype


class BatchTransform:
    """A user's per-batch callable, run on each finished batch.

    When it has a parameter named `rng`, it is called with `rng=` a
    `numpy.random.Generator` seeded from the per-sample seeds of the batch's items (each a
    function of the loader's seed, the epoch and the item), so its randomness is as
    deterministic as the loader's. An exception it raises keeps its type and gets a note
    naming the transform and the batch.

    Args:
        fn: `fn(batch) -> batch` or `fn(batch, rng=...) -> batch`; the batch it returns
            is a dict that keeps the `sample_id` column.

    Raises:
        TypeError: when `fn` is not callable.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"transform must be callable, got {fn!r}")
        self.fn = fn
        self.name = getattr(fn, "__qualname__", None) or repr(fn)
        try:
            self.takes_rng = "rng" in inspect.signature(fn).parameters
        except (TypeError, ValueError):  # builtins without a signature
            self.takes_rng = False

    def __call__(self, batch: dict[str, Any], seeds: Sequence[int]) -> dict[str, Any]:
        """`fn(batch)`, with `rng=` seeded from `seeds` when `fn` takes one.

        Raises:
            TypeError: when `fn` returns anything but a batch: a dict that keeps the
                `sample_id` column (the loader counts samples with it).
        """
        try:
            if self.takes_rng:
                rng = np.random.default_rng(np.asarray(seeds, dtype=np.uint64))
                result = self.fn(batch, rng=rng)
            else:
                result = self.fn(batch)
        except Exception as exc:
            ids = batch.get("sample_id") or ["?"]
            exc.add_note(
                f"raised by the loader's transform {self.name} on a batch of {len(ids)} "
                f"samples (the first: {ids[0]!r})"
            )
            raise
        if not isinstance(result, Mapping) or "sample_id" not in result:
            raise TypeError(
                f"transform {self.name} returned {type(result).__name__}: it must return the "
                "batch, a dict that keeps its 'sample_id' column"
            )
        return result if isinstance(result, dict) else dict(result)

    def __repr__(self) -> str:
        return f"BatchTransform({self.name}, rng={self.takes_rng})"
