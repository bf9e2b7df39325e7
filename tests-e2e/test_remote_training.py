"""End to end: a real `lightning.Trainer.fit` streaming its data from an S3 server (moto)
through a proxy that adds latency and injects 503s and dropped connections."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from _colours import write_colours  # noqa: E402
from torch import nn  # noqa: E402

import ferroload  # noqa: E402
from ferroload_loader.lightning import FerroDataModule  # noqa: E402
from ferroload_store import IOOptions  # noqa: E402
from ferroload_testing import FaultProxy, MotoServer  # noqa: E402

pytestmark = pytest.mark.s3

N, BATCH = 160, 16


def _write(uri: str, **kwargs: Any) -> None:
    write_colours(uri, "remote-train", N, seed=0, id_prefix="s", shard_size=8 << 10, **kwargs)


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[MotoServer, FaultProxy]]:
    with (
        MotoServer() as server,
        FaultProxy(*server.address, delay=0.005, error_rate=0.05, drop_rate=0.02, seed=1) as proxy,
    ):
        yield server, proxy


class Net(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)
        )
        self.seen: list[tuple[int, list[str]]] = []
        self.losses: list[float] = []

    def forward(self, images: Any) -> Any:
        return self.net(images.permute(0, 3, 1, 2).float() / 255.0)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        self.seen.append((self.current_epoch, list(batch["sample_id"])))
        loss = nn.functional.cross_entropy(self(batch["image"]), batch["label"].long())
        self.losses.append(float(loss))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.05)


def _fit(source: str, root: Path, **dm_kwargs: Any) -> Net:
    dm = FerroDataModule(
        source, batch_size=BATCH, images=["image"], resize=(16, 16), meta=["label"], seed=5,
        streaming=True, shuffle_buffer=64, threads=2, **dm_kwargs,
    )  # fmt: skip
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=root,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
    return model


def _epoch(model: Net, e: int) -> list[str]:
    return [s for ep, ids in model.seen if ep == e for s in ids]


def test_training_streams_from_s3_through_faults(
    s3: tuple[MotoServer, FaultProxy], tmp_path: Path
) -> None:
    server, proxy = s3
    server.create_bucket("train")
    uri = f"s3://train/{uuid.uuid4().hex}"
    _write(uri, storage_options=server.storage_options())
    options = server.storage_options(endpoint=proxy.endpoint)
    ds = ferroload.Dataset.open(uri, storage_options=options, io=IOOptions(backoff=0.001))
    proxy.reset_stats()
    remote = _fit(ds, tmp_path / "remote")  # type: ignore[arg-type]
    # every sample once per epoch, a new order each epoch, and the model learned
    for e in (0, 1):
        assert sorted(_epoch(remote, e)) == [f"s{i:03d}" for i in range(N)]
    assert _epoch(remote, 0) != _epoch(remote, 1)
    assert np.mean(remote.losses[-5:]) < np.mean(remote.losses[:5])
    faults = proxy.stats()
    assert faults.errors_injected + faults.drops_injected > 0
    assert ds.store.stats.retries > 0
    # the same seed over a local copy of the dataset: the very same batches
    local = tmp_path / "local"
    _write(str(local))
    assert _fit(str(local), tmp_path / "local-run").seen == remote.seen
