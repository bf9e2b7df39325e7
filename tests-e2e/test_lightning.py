"""`FerroDataModule` under a real `lightning.Trainer` (CPU): per-epoch reshuffling, seeds,
exact mid-epoch resume from checkpoints, and validation over the whole split."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
pytest.importorskip("PIL")

from _colours import write_colours  # noqa: E402
from _proctree import run_tree  # noqa: E402
from torch import nn  # noqa: E402

from ferroload_loader import FerroLoader  # noqa: E402
from ferroload_loader.lightning import FerroDataModule, LightningLoader  # noqa: E402

N_TRAIN, N_VAL, BATCH, VAL_BATCH = 96, 20, 8, 6
STEPS_PER_EPOCH = N_TRAIN // BATCH  # 12
EVERY = 4  # checkpoint every 4 steps: 4, 8, 12 (end of epoch 0), 16, 20, 24


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    base = tmp_path_factory.mktemp("lightning-data")
    return (
        write_colours(str(base / "train"), "train", N_TRAIN, seed=0, id_prefix="train-"),
        write_colours(str(base / "val"), "val", N_VAL, seed=1, id_prefix="val-"),
    )


class Net(L.LightningModule):  # type: ignore[misc]
    """A tiny conv net that records the sample ids of every batch it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
        )
        self.train_batches: list[tuple[int, list[str]]] = []
        self.val_runs: list[list[str]] = []
        self.val_correct = 0

    def forward(self, images: Any) -> Any:
        return self.net(images.permute(0, 3, 1, 2).float() / 255.0)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        self.train_batches.append((self.current_epoch, list(batch["sample_id"])))
        return nn.functional.cross_entropy(self(batch["image"]), batch["label"].long())

    def on_validation_epoch_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.val_runs.append([])
            self.val_correct = 0

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if not self.trainer.sanity_checking:
            self.val_runs[-1].extend(batch["sample_id"])
            pred = self(batch["image"]).argmax(1)
            self.val_correct += int((pred == batch["label"]).sum())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


@dataclass
class Run:
    model: Net
    warnings: list[str]
    ckpt_dir: Path | None


def _fit(
    data: tuple[str, str],
    root: Path,
    *,
    seed: int = 0,
    val: bool = True,
    checkpoints: bool = False,
    ckpt_path: Path | None = None,
) -> Run:
    train, val_uri = data
    dm = FerroDataModule(
        train, val=val_uri if val else None, batch_size=BATCH, val_batch_size=VAL_BATCH,
        images=["image"], resize=(16, 16), meta=["label"], seed=seed, threads=2,
    )  # fmt: skip
    ckpt_dir = root / "ckpt" if checkpoints else None
    callbacks = []
    if ckpt_dir is not None:
        callbacks.append(
            L.pytorch.callbacks.ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="{epoch}-{step}",
                every_n_train_steps=EVERY,
                save_top_k=-1,
            )
        )
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
        enable_model_summary=False, enable_checkpointing=ckpt_dir is not None,
        callbacks=callbacks, default_root_dir=root, deterministic=True,
    )  # fmt: skip
    torch.manual_seed(1234)
    model = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return Run(model, [str(w.message) for w in caught], ckpt_dir)


def _assert_clean(run: Run, *, val: bool = True) -> None:
    """Lightning found the loaders resumable and unshuffled where they should be (and,
    without `val` data, said only what it says of any module without a val loader)."""
    expected = "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop."
    bad = [
        w
        for w in run.warnings
        if any(k in w.lower() for k in ("resumable", "shuffl", "loader")) and (val or w != expected)
    ]
    assert not bad, bad


def _flat(batches: list[tuple[int, list[str]]], epoch: int) -> list[str]:
    return [sid for e, ids in batches if e == epoch for sid in ids]


@pytest.fixture(scope="module")
def baseline(data: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Two uninterrupted epochs, seed 0, with a checkpoint every `EVERY` steps."""
    return _fit(data, tmp_path_factory.mktemp("baseline"), checkpoints=True)


def test_loader_types(data: tuple[str, str]) -> None:
    """The module hands Lightning `LightningLoader`s (FerroLoaders); no split -> no loader."""
    dm = FerroDataModule(data[0], val=data[1], batch_size=BATCH, meta=["label"])
    train, val = dm.train_dataloader(), dm.val_dataloader()
    assert isinstance(train, LightningLoader) and isinstance(train, FerroLoader)
    assert isinstance(val, LightningLoader) and val.evaluation and not val.sampler.shuffle
    assert train.sampler.shuffle and (train.sampler.rank, train.sampler.world_size) == (0, 1)
    assert len(train) == STEPS_PER_EPOCH and len(val) == -(-N_VAL // BATCH)
    with pytest.raises(ValueError, match="no 'train' source"):
        FerroDataModule(val=data[1], batch_size=BATCH).train_dataloader()
    dm.teardown("fit")


def test_a_missing_split_has_no_hook_and_the_module_prints(data: tuple[str, str]) -> None:
    """Lightning sees loaders only for the splits given (no `val_dataloader` warning for
    a module without validation data), and `print(dm)` describes without loading."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    with_val = FerroDataModule(data[0], val=data[1], batch_size=BATCH, meta=["label"])
    train_only = FerroDataModule(data[0], batch_size=BATCH, meta=["label"])
    assert is_overridden("val_dataloader", with_val)
    assert not is_overridden("val_dataloader", train_only)
    assert not is_overridden("test_dataloader", with_val)
    assert is_overridden("train_dataloader", train_only)
    for dm in (with_val, train_only):
        text = str(dm)
        assert text == repr(dm) and "batch_size=8" in text and f"train={data[0]!r}" in text
        print(dm)
        assert dm._loaders == []  # describing built no loader
    assert f"val={data[1]!r}" in str(with_val) and "val=" not in str(train_only)
    # what a batch holds: the images, their size, the augmentation, as they were given
    augmented = FerroDataModule(
        data[0], batch_size=BATCH, images=["image"], resize=16, crop="random", hflip=0.5
    )
    assert repr(augmented) == (
        f"FerroDataModule(train={data[0]!r}, batch_size=8, images=['image'], resize=16, "
        "crop='random', hflip=0.5, val_crop='center')"
    )
    # a split of no sample is still a split; options set on the module since are shown
    from ferroload_format import Dataset

    empty = Dataset.open(data[1]).subset(where="label < 0")
    assert len(empty) == 0
    dm = FerroDataModule(data[0], val=empty, batch_size=BATCH, seed=3)
    dm.seed, dm.shuffle = 0, False
    assert f"val=<{type(empty).__name__} " in repr(dm) and "(0 samples)>" in repr(dm)
    assert repr(dm).endswith(", batch_size=8, shuffle=False)")


class NoValidation(Net):
    """A module without `validation_step`, as many training scripts are."""

    validation_step = None  # type: ignore[assignment]


def test_no_validation_data_gives_no_warning(data: tuple[str, str], tmp_path: Path) -> None:
    dm = FerroDataModule(
        data[0], batch_size=BATCH, images=["image"], resize=(16, 16), meta=["label"], threads=2
    )
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=2, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        default_root_dir=tmp_path,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(NoValidation(), datamodule=dm)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "val" in m.lower()], messages
    assert trainer.global_step == 2


@pytest.mark.slow
def test_two_epochs_reshuffle_and_validate(baseline: Run) -> None:
    """(a) each epoch sees every sample once, in a new order; (d) validation sees the
    whole split, in dataset order, after the sanity check too."""
    _assert_clean(baseline)
    batches = baseline.model.train_batches
    assert len(batches) == 2 * STEPS_PER_EPOCH
    assert all(len(ids) == BATCH for _, ids in batches)
    everyone = sorted(f"train-{i:03d}" for i in range(N_TRAIN))
    e0, e1 = _flat(batches, 0), _flat(batches, 1)
    assert sorted(e0) == everyone and sorted(e1) == everyone
    assert e0 != e1 and e0 != sorted(e0)
    val_ids = [f"val-{i:03d}" for i in range(N_VAL)]
    assert baseline.model.val_runs == [val_ids, val_ids]
    assert baseline.model.val_correct >= 0.8 * N_VAL  # the labels are learnable


@pytest.mark.slow
def test_seed_fixes_the_order(data: tuple[str, str], baseline: Run, tmp_path: Path) -> None:
    """(b) the same seed gives the same batches, another seed other batches."""
    again = _fit(data, tmp_path / "again", seed=0, val=False)
    other = _fit(data, tmp_path / "other", seed=1, val=False)
    _assert_clean(again, val=False)
    assert again.model.train_batches == baseline.model.train_batches
    assert other.model.train_batches != baseline.model.train_batches
    assert sorted(_flat(other.model.train_batches, 0)) == sorted(
        _flat(baseline.model.train_batches, 0)
    )
    assert again.model.val_runs == []  # no val source: Lightning skips validation


@pytest.mark.slow
@pytest.mark.parametrize(
    ("epoch", "step"),
    [(0, 8), (0, 12), (1, 20)],
    ids=["mid-epoch-0", "end-of-epoch-0", "mid-epoch-1"],
)
def test_resume_continues_exactly(
    data: tuple[str, str], baseline: Run, tmp_path: Path, epoch: int, step: int
) -> None:
    """(c) resuming from a checkpoint continues the uninterrupted run batch for batch,
    and ends with the same weights."""
    assert baseline.ckpt_dir is not None
    ckpt = baseline.ckpt_dir / f"epoch={epoch}-step={step}.ckpt"
    assert ckpt.exists(), sorted(p.name for p in baseline.ckpt_dir.iterdir())
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    [loader_state] = state["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state["sampler"]["epoch"] == epoch
    assert loader_state["sampler"]["consumed"] == (step - epoch * STEPS_PER_EPOCH) * BATCH

    resumed = _fit(data, tmp_path, ckpt_path=ckpt)
    _assert_clean(resumed)
    full = baseline.model.train_batches
    assert full[:step] + resumed.model.train_batches == full
    seen = Counter(sid for _, ids in full[:step] + resumed.model.train_batches for sid in ids)
    assert set(seen.values()) == {2}  # every sample exactly once per epoch
    for name, value in baseline.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


_DIST_ENV = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
}

# Runs as its own program: Lightning's DDP launcher starts rank 1 by running it again.
_DDP_SCRIPT = """
import json, sys
import lightning as L, torch
from ferroload_loader.lightning import FerroDataModule

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.batches = []
    def training_step(self, batch, batch_idx):
        self.batches.append((self.current_epoch, list(batch["sample_id"])))
        x = batch["image"].float().mean(dim=(1, 2)) / 255.0
        return torch.nn.functional.cross_entropy(self.lin(x), batch["label"].long())
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    train, out = sys.argv[1], sys.argv[2]
    dm = FerroDataModule(train, batch_size=BATCH, images=["image"], resize=(16, 16),
                         meta=["label"], seed=0, threads=1)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp",
                        enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    model = Net()
    trainer.fit(model, datamodule=dm)
    with open(f"{out}/rank{trainer.global_rank}.json", "w") as f:
        json.dump({"world_size": trainer.world_size, "batches": model.batches}, f)
"""


@pytest.mark.slow
def test_ddp_ranks_share_one_global_order(
    data: tuple[str, str], baseline: Run, tmp_path: Path
) -> None:
    """Under DDP (2 CPU processes), each rank takes its share of the same global order that
    a single process sees: rank r gets positions r, r+2, … of each epoch."""
    script = tmp_path / "ddp_fit.py"
    script.write_text(_DDP_SCRIPT.replace("BATCH", str(BATCH // 2)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in _DIST_ENV}
    proc = run_tree([sys.executable, script, data[0], tmp_path], timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    for epoch in (0, 1):
        single = _flat(baseline.model.train_batches, epoch)
        for r, got in enumerate(ranks):
            assert [sid for e, ids in got["batches"] if e == epoch for sid in ids] == single[r::2]


def test_augmentation_is_for_training_and_model_ready_output_for_all(
    data: tuple[str, str],
) -> None:
    """Random crops, flips and the transform shape training batches; validation crops
    the centre; layout, dtype and normalisation hold for every split."""
    calls: list[int] = []

    def count(batch: dict[str, Any]) -> dict[str, Any]:
        calls.append(len(batch["sample_id"]))
        return batch

    dm = FerroDataModule(
        data[0], val=data[1], batch_size=BATCH, images=["image"], resize=(16, 16),
        meta=["label"], crop="random", hflip=0.5, layout="NCHW", dtype=torch.float32,
        normalize=((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)), transform=count,
    )  # fmt: skip
    train, val = dm.train_dataloader(), dm.val_dataloader()
    vb = next(iter(val))
    assert calls == []  # the transform is for training batches only
    tb = next(iter(train))
    assert calls and calls[0] == BATCH
    for b in (tb, vb):
        assert b["image"].shape[1:] == (3, 16, 16) and b["image"].dtype == torch.float32
    assert train.fields[0].decoder.resize == "random" and train.fields[0].decoder.hflip == 0.5
    assert val.fields[0].decoder.resize == "shorter" and val.fields[0].decoder.hflip == 0.0
    dm.teardown("fit")
