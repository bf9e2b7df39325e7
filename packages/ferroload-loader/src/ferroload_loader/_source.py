"""What a loader reads from: one dataset (or view), or a weighted mixture of several."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_format import Dataset


class Mixture:
    """Several datasets drawn from with fixed weights (see `mix`).

    Attributes:
        datasets: the datasets, in the order given.
        weights: their probabilities (normalised to sum to 1).
        num_samples: items per epoch.
    """

    def __init__(
        self,
        sources: Sequence[str | os.PathLike[str] | Dataset],
        weights: Sequence[float],
        *,
        num_samples: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not sources:
            raise ValueError("mix() needs at least one dataset")
        if len(weights) != len(sources):
            raise ValueError(f"{len(weights)} weights for {len(sources)} datasets")
        w = np.asarray(weights, dtype=np.float64)
        if not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"weights must be non-negative with a positive sum, got {list(weights)}"
            )
        self.datasets = [
            s if isinstance(s, Dataset) else Dataset.open(s, storage_options=storage_options)
            for s in sources
        ]
        empty = [d.uri for d, wi in zip(self.datasets, w, strict=True) if wi > 0 and len(d) == 0]
        if empty:
            raise ValueError(f"cannot draw from empty datasets: {empty}")
        self.weights = w / w.sum()
        self.num_samples = (
            sum(len(d) for d in self.datasets) if num_samples is None else num_samples
        )
        if not isinstance(self.num_samples, int) or self.num_samples < 0:
            raise ValueError(f"num_samples must be a non-negative int, got {num_samples!r}")

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{d.name}: {w:.3g}" for d, w in zip(self.datasets, self.weights, strict=True)
        )
        return f"Mixture({parts}; {self.num_samples} samples per epoch)"


def mix(
    sources: Sequence[str | os.PathLike[str] | Dataset],
    weights: Sequence[float],
    *,
    num_samples: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Mixture:
    """Mix datasets with fixed weights: pass the result to `make_loader` as its source.

    Every slot of an epoch draws its dataset with probability `weights` (seeded by the
    loader's seed and the epoch), then takes the next item of that dataset's own shuffled
    order; a dataset drawn more often than it has items starts a new shuffled pass. The
    result is deterministic and resumable like a single dataset. The datasets must have
    the columns the loader asks for.

    Args:
        sources: datasets or their URIs.
        weights: relative weights (normalised).
        num_samples: items per epoch (default: the datasets' total length).
        storage_options: for URIs, as in `Dataset.open`.

    Examples:
        >>> from ferroload_format import Writer
        >>> for name in ("a", "b"):
        ...     with Writer(f"memory://docs/mix-{name}", name) as w:
        ...         for i in range(4):
        ...             w.add(f"{name}{i}", None, {"label": i})
        >>> m = mix(["memory://docs/mix-a", "memory://docs/mix-b"], [3, 1], num_samples=8)
        >>> m.weights.tolist(), m.num_samples
        ([0.75, 0.25], 8)
    """
    return Mixture(sources, weights, num_samples=num_samples, storage_options=storage_options)


@dataclass
class ResolvedSource:
    """The datasets behind a loader and how item ids map onto them."""

    datasets: list[Dataset]
    offsets: npt.NDArray[np.int64]  # item id of each dataset's first item
    mixture: Mixture | None = None

    @property
    def num_items(self) -> int:
        """Items per epoch."""
        if self.mixture is not None:
            return self.mixture.num_samples
        return int(sum(len(d) for d in self.datasets))

    def split(
        self, items: npt.NDArray[np.int64]
    ) -> list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
        """Group item ids by dataset: (dataset index, slots in `items`, positions in it)."""
        if len(self.datasets) == 1:
            return [(0, np.arange(len(items)), items)]
        which = np.searchsorted(self.offsets, items, side="right") - 1
        out = []
        for d in np.unique(which).tolist():
            slots = np.flatnonzero(which == d)
            out.append((d, slots, items[slots] - self.offsets[d]))
        return out


def resolve_source(
    source: Any,
    *,
    where: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache: Any = "default",
) -> ResolvedSource:
    """A URI, a Dataset (or view) or a Mixture, with `where` applied to each dataset."""
    if isinstance(source, Mixture):
        datasets = list(source.datasets)
        mixture: Mixture | None = source
    elif isinstance(source, Dataset):
        datasets, mixture = [source], None
    elif isinstance(source, str | os.PathLike):
        ds = Dataset.open(source, storage_options=storage_options, cache=cache)
        datasets, mixture = [ds], None
    else:
        raise TypeError(
            f"source must be a URI, a Dataset or a mix(...), got {type(source).__name__}"
        )
    if where is not None:
        datasets = [d.subset(where) for d in datasets]
        if mixture is not None:
            mixture = Mixture(datasets, mixture.weights.tolist(), num_samples=mixture.num_samples)
    sizes = np.asarray([len(d) for d in datasets], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return ResolvedSource(datasets, offsets, mixture)
