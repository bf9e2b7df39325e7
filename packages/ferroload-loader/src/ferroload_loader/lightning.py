"""Lightning adapter (extra `lightning`): `FerroDataModule` and `LightningLoader`.

Lightning drives a loader through a few duck-typed hooks, and `FerroDataModule` hands it
loaders that answer them the way its loops expect:

* every epoch the fit loop calls `loader.sampler.set_epoch(epoch)`: a new order per epoch;
* checkpoints store `loader.state_dict()` (the position after the batches the training
  loop received) and a resumed `fit(ckpt_path=...)` calls `loader.load_state_dict(...)`:
  the epoch continues exactly where it stopped;
* ranks come from the trainer (`global_rank`, `world_size`), so DDP needs nothing more.

Importing this module imports Lightning and torch; importing `ferroload_loader` does not.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any, Literal, Unpack

try:
    from lightning.pytorch import LightningDataModule
except ImportError as exc:  # pragma: no cover  (exercised only without the extra)
    raise ImportError(
        "ferroload_loader.lightning needs Lightning: pip install 'ferroload-loader[lightning]'"
    ) from exc

from ferroload_loader._augment import RandomResizedCrop
from ferroload_loader._fields import Crop
from ferroload_loader._loader import FerroLoader, make_loader
from ferroload_loader._options import (
    _DEFAULTS,
    LoaderKeywords,
    LoaderOptions,
    _differs,
    check_batch_size,
    take_options,
)

__all__ = ["FerroDataModule", "LightningLoader"]

#: Options the data module refuses (`take_options`), and what to do instead.
_REFUSED = {
    "out": "its loaders yield torch tensors",
    "rank": "the trainer sets the rank",
    "world_size": "the trainer sets the world size",
}


class LightningLoader(FerroLoader):
    """A `FerroLoader` shaped for Lightning's fit and evaluation loops.

    It is the same loader (same sampler, fields and prefetching); with `evaluation=True`
    every iteration runs the whole split from its first batch (validation after the
    sanity check, or a second `trainer.validate`, sees every sample), and `state_dict()`
    is not needed (Lightning stores only training state). What Lightning's fit loop needs
    of any loader — a whole-epoch `len()`, batches chosen at the first `next()`,
    `sampler.set_epoch`, `state_dict` — `FerroLoader` itself provides.

    Args:
        loader: the loader to adapt (from `make_loader`); its sampler, fields and options
            are shared, so use only the adapted one afterwards.
        evaluation: restart from the beginning of the epoch on every iteration.

    Examples:
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/lightning-loader", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i % 3})
        >>> base = make_loader("memory://docs/lightning-loader", batch_size=4,
        ...                    meta=["label"], out="numpy")
        >>> dl = LightningLoader(base)
        >>> it = iter(dl)
        >>> len(next(it)["sample_id"]), len(dl)
        (4, 3)
        >>> state = dl.state_dict()
        >>> resumed = LightningLoader(make_loader("memory://docs/lightning-loader",
        ...                                       batch_size=4, meta=["label"], out="numpy"))
        >>> resumed.load_state_dict(state)
        >>> len(resumed), [len(b["sample_id"]) for b in resumed]
        (3, [4, 2])
    """

    def __init__(self, loader: FerroLoader, *, evaluation: bool = False) -> None:
        # every option of the configured loader (read-ahead, transform, ...), checked once
        self.__dict__.update(loader.__dict__)
        self._worker = None
        self.evaluation = evaluation

    def _begin_pass(self) -> None:
        super()._begin_pass()
        if self.evaluation:  # the whole split, also after a restored training position
            self.sampler.consumed = 0

    def __repr__(self) -> str:
        kind = "evaluation" if self.evaluation else "training"
        return f"LightningLoader({kind}, {super().__repr__()})"


def _shown(source: Any) -> str:
    """A split's source in a repr: a URI as written, a dataset by its URI and size."""
    if isinstance(source, str | os.PathLike):
        return repr(os.fspath(source))
    uri, n = getattr(source, "uri", None), getattr(source, "__len__", None)
    if uri is not None and n is not None:
        n = len(source)
        return f"<{type(source).__name__} {uri} ({n} sample{'' if n == 1 else 's'})>"
    return repr(source)


class _SplitHook:
    """A `*_dataloader` hook that exists only for the splits the module has.

    Lightning decides whether a module defines a loader by asking whether the hook
    overrides `LightningDataModule`'s; a module without `val` data must answer no, or
    Lightning warns that a `val_dataloader` has no `validation_step`. For such a split,
    the attribute is Lightning's own (not overridden) hook, which raises if called.
    """

    def __init__(self, split: str, fn: Callable[..., Any]) -> None:
        self.split = split
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: object | None, cls: type[Any] | None = None) -> Any:
        if obj is None:
            return self.fn
        sources = getattr(obj, "sources", None)
        if sources is not None and sources.get(self.split) is None:
            return getattr(LightningDataModule, self.fn.__name__).__get__(obj, cls)
        return self.fn.__get__(obj, cls)


def _split_hook(split: str) -> Callable[[Callable[..., Any]], Any]:
    return lambda fn: _SplitHook(split, fn)


class FerroDataModule(LightningDataModule):
    """A `LightningDataModule` over ferroload datasets: deterministic, resumable, DDP-aware.

    `train_dataloader()` shuffles with `seed` (a new order every epoch, which Lightning
    selects through `sampler.set_epoch`) and takes rank and world size from the trainer,
    so under DDP every rank reads its own share of one global order. Checkpoints hold
    the loader's position (Lightning saves `state_dict()` of stateful loaders), and
    `trainer.fit(..., ckpt_path=...)` continues a mid-epoch checkpoint batch for batch:
    no sample is lost or repeated. (Lightning counts the batches of a resumed epoch
    itself, so resume mid-epoch with the same batch size and number of devices; after a
    change, resume from a checkpoint taken at the end of an epoch.)
    Validation, test and predict loaders keep dataset
    order and run their whole split every time; under DDP they pad the last batches by
    wrapping around, as `DistributedSampler` does. A split without a source has no
    loader hook of its own, so Lightning skips it without a warning.

    It takes the options of `make_loader` (see `LoaderOptions`), as keywords or as
    `options=LoaderOptions(...)`; `batch_size` is required. What a batch holds
    (`images`, `audio`, `video`, `meta`, `resize`, `layout`, `dtype`, `normalize`) and
    how it is built (`where`, `threads`, `prefetch_bytes`, `readahead_bytes`,
    `pin_memory`, `on_error`, `storage_options`, `cache`) apply to every split; the
    batch size, order (`shuffle`, `seed`, `drop_last`, `streaming`, `shuffle_buffer`,
    `lanes`) and augmentation (`crop`, `hflip`, `transform`) to training only. The
    other splits crop with `val_crop`: by default `"center"` when training crops at
    random, else the training `crop`. It refuses `out` (its loaders yield tensors),
    `rank` and `world_size` (the trainer's).

    Args:
        train: the training data: a dataset URI, a `Dataset` (or a subset view), or
            `mix(...)`; `None` for a module used only to validate, test or predict.
        val: the validation split (a URI or a `Dataset`), optional.
        test: the test split, optional.
        predict: the prediction split, optional.
        val_batch_size: samples per batch of the other splits (default: `batch_size`).
        val_crop: how validation, test and predict images are cropped (default: see
            above).
        options: every loader option at once, as a `LoaderOptions` (then no keyword
            options).
        **keywords: the options of `LoaderOptions` (`batch_size`: training samples per
            batch on each rank; `seed`, `shuffle`, `drop_last`: of the training order;
            `where`: applied to every split (pass subset views for per-split filters),
            ...).

    Raises:
        TypeError: for an option it does not take, or both `options` and keywords.
        ValueError: when no source is given for a split that Lightning asks for, or an
            option is invalid (those checked against a dataset: when the loader is
            built).

    Examples:
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/datamodule", "demo") as w:
        ...     for i in range(20):
        ...         w.add(f"s{i:02d}", None, {"x": float(i), "label": i % 2})
        >>> dm = FerroDataModule("memory://docs/datamodule", val="memory://docs/datamodule",
        ...                      batch_size=8, meta=["x", "label"], seed=1)
        >>> dl = dm.train_dataloader()
        >>> len(dl), sorted(sid for b in dl for sid in b["sample_id"]) == [
        ...     f"s{i:02d}" for i in range(20)]
        (3, True)

        With a trainer: ``lightning.Trainer(max_epochs=2).fit(model, datamodule=dm)``.
    """

    def __init__(
        self,
        train: Any = None,
        *,
        val: Any = None,
        test: Any = None,
        predict: Any = None,
        val_batch_size: int | None = None,
        val_crop: Crop | Literal["auto"] = "auto",
        options: LoaderOptions | None = None,
        **keywords: Unpack[LoaderKeywords],
    ) -> None:
        super().__init__()
        o = take_options("FerroDataModule", options, keywords, refused=_REFUSED)
        assert o.batch_size is not None  # take() requires it
        if val_batch_size is not None:
            check_batch_size(val_batch_size, "val_batch_size")
        self.sources: dict[str, Any] = {
            "train": train, "val": val, "test": test, "predict": predict,
        }  # fmt: skip
        # attributes read whenever a loader is made (Lightning's batch size finder sets
        # `batch_size`); the other options are fixed
        self.batch_size = o.batch_size
        self.val_batch_size = o.batch_size if val_batch_size is None else val_batch_size
        self.seed, self.shuffle, self.drop_last = o.seed, o.shuffle, o.drop_last
        self.streaming, self.shuffle_buffer = o.streaming, o.shuffle_buffer
        self._options = o
        if val_crop == "auto":
            crop = o.crop
            val_crop = "center" if crop == "random" or isinstance(crop, RandomResizedCrop) else crop
        # the other splits: dataset order, whole split, no augmentation
        self._evaluation = {
            "shuffle": False, "drop_last": False, "streaming": False, "crop": val_crop,
            "hflip": 0.0, "transform": None,
        }  # fmt: skip
        self._loaders: list[FerroLoader] = []

    # ------------------------------------------------------------------ loaders

    def _rank(self) -> tuple[int | None, int | None]:
        """Rank and world size from the attached trainer (else torch.distributed / env)."""
        trainer = self.trainer
        if trainer is None:
            return None, None
        return trainer.global_rank, trainer.world_size

    def _current(self) -> dict[str, Any]:
        """The training options the module's attributes hold now (read whenever a loader
        is made; Lightning's batch size finder sets `batch_size`)."""
        return {
            "batch_size": self.batch_size, "seed": self.seed, "shuffle": self.shuffle,
            "drop_last": self.drop_last, "streaming": self.streaming,
            "shuffle_buffer": self.shuffle_buffer,
        }  # fmt: skip

    def _source(self, split: str) -> Any:
        source = self.sources[split]
        if source is None:
            raise ValueError(
                f"FerroDataModule has no {split!r} source: pass {split}=<uri or Dataset> "
                "to FerroDataModule(...)"
            )
        return source

    def _loader(self, split: str, **options: Any) -> LightningLoader:
        """A loader of `split` with the module's options, changed by `options`."""
        rank, world_size = self._rank()
        current = {**self._current(), "rank": rank, "world_size": world_size}
        o = dataclasses.replace(self._options, **{**current, **options})
        loader = LightningLoader(
            make_loader(self._source(split), options=o), evaluation=split != "train"
        )
        self._loaders.append(loader)
        return loader

    def _evaluation_loader(self, split: str) -> LightningLoader:
        return self._loader(split, batch_size=self.val_batch_size, **self._evaluation)

    def train_dataloader(self) -> LightningLoader:
        """The training loader: shuffled per (seed, epoch), this rank's share, resumable.

        Raises:
            ValueError: when the module has no `train` source.
        """
        return self._loader("train", batch_size=self.batch_size)

    @_split_hook("val")
    def val_dataloader(self) -> LightningLoader:
        """The validation loader in dataset order.

        Without a `val` source this is Lightning's own hook, so Lightning sees no
        validation data (and skips the loop without a warning).
        """
        return self._evaluation_loader("val")

    @_split_hook("test")
    def test_dataloader(self) -> LightningLoader:
        """The test loader in dataset order (Lightning's own hook without `test`)."""
        return self._evaluation_loader("test")

    @_split_hook("predict")
    def predict_dataloader(self) -> LightningLoader:
        """The predict loader in dataset order (Lightning's own hook without `predict`)."""
        return self._evaluation_loader("predict")

    def teardown(self, stage: str) -> None:
        """Stop the prefetch threads of the loaders this module made."""
        for loader in self._loaders:
            loader.close()
        self._loaders.clear()

    def __repr__(self) -> str:
        sources = ", ".join(
            f"{split}={_shown(source)}"
            for split, source in self.sources.items()
            if source is not None  # an empty dataset is a split too
        )
        options = self._options.changed()
        for name, value in self._current().items():  # as a loader made now would take it
            if name == "batch_size" or _differs(value, _DEFAULTS[name]):
                options[name] = value
            else:
                options.pop(name, None)
        if self.val_batch_size != self.batch_size:
            options["val_batch_size"] = self.val_batch_size
        if self._evaluation["crop"] != self._options.crop:
            options["val_crop"] = self._evaluation["crop"]
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
        return f"FerroDataModule({sources}, {shown})"

    #: Lightning's `__str__` builds and iterates every loader; ours only describes them.
    __str__ = __repr__
