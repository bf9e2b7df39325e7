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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

try:
    from lightning.pytorch import LightningDataModule
except ImportError as exc:  # pragma: no cover  (exercised only without the extra)
    raise ImportError(
        "ferroload_loader.lightning needs Lightning: pip install 'ferroload-loader[lightning]'"
    ) from exc

from ferroload_loader._augment import Layout, Normalize, RandomResizedCrop
from ferroload_loader._fields import ColumnSpec, Crop, OnError
from ferroload_loader._loader import DEFAULT_PREFETCH_BYTES, FerroLoader, make_loader
from ferroload_loader._order import DEFAULT_SHUFFLE_BUFFER

__all__ = ["FerroDataModule", "LightningLoader"]


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

    `images`, `audio`, `video`, `meta`, `resize`, `layout`, `dtype` and `normalize`
    (what a batch holds, for every split), `crop`, `hflip` and `transform`
    (augmentation: training only) and `threads`, `prefetch_bytes`, `streaming`
    (training only), `shuffle_buffer`, `pin_memory`, `on_error` and `storage_options`
    are the options of `make_loader`. The other splits crop with `val_crop`: by default
    `"center"` when training crops at random, else the training `crop`.

    Args:
        train: the training data: a dataset URI, a `Dataset` (or a subset view), or
            `mix(...)`; `None` for a module used only to validate, test or predict.
        val: the validation split (a URI or a `Dataset`), optional.
        test: the test split, optional.
        predict: the prediction split, optional.
        batch_size: training samples per batch on each rank.
        val_batch_size: samples per batch of the other splits (default: `batch_size`).
        seed: with the epoch, fixes the training order.
        shuffle: shuffle the training data (the other splits are never shuffled).
        drop_last: drop the last, incomplete training batch.
        where: a SQL WHERE clause over the index, applied to every split (pass subset
            views for per-split filters).
        val_crop: how validation, test and predict images are cropped (default: see
            above).

    Raises:
        ValueError: when no source is given for a split that Lightning asks for, or an
            option is invalid (raised when the loader is built).

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
        batch_size: int,
        val_batch_size: int | None = None,
        images: ColumnSpec = (),
        audio: ColumnSpec = (),
        video: ColumnSpec = (),
        meta: Sequence[str] = (),
        resize: int | tuple[int, int] | None = None,
        crop: Crop = None,
        hflip: float = 0.0,
        layout: Layout = "NHWC",
        dtype: Any = None,
        normalize: Normalize | None = None,
        transform: Callable[..., Any] | None = None,
        val_crop: Crop | Literal["auto"] = "auto",
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        where: str | None = None,
        threads: int | None = None,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        streaming: bool = False,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        pin_memory: bool = False,
        on_error: OnError = "raise",
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if val_batch_size is not None and (
            not isinstance(val_batch_size, int) or val_batch_size < 1
        ):
            raise ValueError(f"val_batch_size must be a positive int, got {val_batch_size!r}")
        self.sources: dict[str, Any] = {
            "train": train, "val": val, "test": test, "predict": predict,
        }  # fmt: skip
        self.batch_size = batch_size
        self.val_batch_size = batch_size if val_batch_size is None else val_batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.streaming = streaming
        self.shuffle_buffer = shuffle_buffer
        self._options: dict[str, Any] = {
            "images": images, "audio": audio, "video": video, "meta": meta, "resize": resize,
            "layout": layout, "dtype": dtype, "normalize": normalize, "where": where,
            "threads": threads, "prefetch_bytes": prefetch_bytes, "pin_memory": pin_memory,
            "on_error": on_error, "storage_options": storage_options,
        }  # fmt: skip
        self._augment: dict[str, Any] = {"crop": crop, "hflip": hflip, "transform": transform}
        if val_crop == "auto":
            val_crop = "center" if crop == "random" or isinstance(crop, RandomResizedCrop) else crop
        self._evaluation: dict[str, Any] = {"crop": val_crop}
        self._loaders: list[FerroLoader] = []

    # ------------------------------------------------------------------ loaders

    def _rank(self) -> tuple[int | None, int | None]:
        """Rank and world size from the attached trainer (else torch.distributed / env)."""
        trainer = self.trainer
        if trainer is None:
            return None, None
        return trainer.global_rank, trainer.world_size

    def _source(self, split: str) -> Any:
        source = self.sources[split]
        if source is None:
            raise ValueError(
                f"FerroDataModule has no {split!r} source: pass {split}=<uri or Dataset> "
                "to FerroDataModule(...)"
            )
        return source

    def _evaluation_loader(self, split: str) -> LightningLoader:
        rank, world_size = self._rank()
        base = make_loader(
            self._source(split), batch_size=self.val_batch_size, shuffle=False,
            seed=self.seed, drop_last=False, rank=rank, world_size=world_size, out="torch",
            **self._options, **self._evaluation,
        )  # fmt: skip
        loader = LightningLoader(base, evaluation=True)
        self._loaders.append(loader)
        return loader

    def train_dataloader(self) -> LightningLoader:
        """The training loader: shuffled per (seed, epoch), this rank's share, resumable.

        Raises:
            ValueError: when the module has no `train` source.
        """
        rank, world_size = self._rank()
        base = make_loader(
            self._source("train"), batch_size=self.batch_size, shuffle=self.shuffle,
            seed=self.seed, drop_last=self.drop_last, streaming=self.streaming,
            shuffle_buffer=self.shuffle_buffer, rank=rank, world_size=world_size, out="torch",
            **self._options, **self._augment,
        )  # fmt: skip
        loader = LightningLoader(base)
        self._loaders.append(loader)
        return loader

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
        splits = [k for k, v in self.sources.items() if v is not None]
        return (
            f"FerroDataModule(splits={splits}, batch_size={self.batch_size}, "
            f"val_batch_size={self.val_batch_size}, seed={self.seed}, shuffle={self.shuffle})"
        )

    #: Lightning's `__str__` builds and iterates every loader; ours only describes them.
    __str__ = __repr__
