"""The loader and its torch and Lightning adapters on a dataset written by ferroload-rs
0.1.1, read as it is (no upgrade): the same batches as after an upgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")

from torch.utils.data import DataLoader  # noqa: E402

from ferroload_format import Dataset, upgrade  # noqa: E402
from ferroload_loader import make_loader  # noqa: E402
from ferroload_loader.lightning import FerroDataModule  # noqa: E402
from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset  # noqa: E402
from ferroload_testing import rs011_dataset  # noqa: E402

#: 0.1.1's README path: images decoded and resized, a label, torch out.
OPTS: dict[str, Any] = {"images": ["image"], "meta": ["label"], "resize": (16, 16)}


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(rs011_dataset("mixed", tmp_path / "mixed"))


def _by_id(batches: list[dict[str, Any]]) -> dict[str, tuple[bytes, int]]:
    out = {}
    for b in batches:
        for k, sid in enumerate(b["sample_id"]):
            out[sid] = (np.asarray(b["image"][k]).tobytes(), int(b["label"][k]))
    return out


@pytest.mark.parametrize("streaming", [False, True])
def test_make_loader_shuffled_and_streaming(root: str, streaming: bool) -> None:
    loader = make_loader(
        root, batch_size=8, shuffle=True, seed=3, streaming=streaming, out="torch", **OPTS
    )
    loader.set_epoch(1)
    batches = list(loader)
    assert sum(len(b["sample_id"]) for b in batches) == 30
    assert batches[0]["image"].dtype == torch.uint8 and batches[0]["image"].shape[1:] == (16, 16, 3)
    seen = _by_id(batches)
    assert sorted(seen) == [f"s{i:04d}" for i in range(30)]
    assert all(label == int(sid[1:]) % 5 for sid, (_, label) in seen.items())
    # the upgraded root gives the same pixels and labels
    upgrade(root)
    again = make_loader(
        root, batch_size=8, shuffle=True, seed=3, streaming=streaming, out="torch", **OPTS
    )
    again.set_epoch(1)
    assert _by_id(list(again)) == seen


def test_torch_map_style_iterable_with_workers_and_lightning(root: str) -> None:
    layer = FerroTorchDataset(root, meta=["square", "tag"])  # columns of the two layers
    assert (int(layer[9]["square"]), layer[9]["tag"]) == (81, "class4")
    ds = FerroTorchDataset(root, **OPTS)
    assert len(ds) == 30 and ds[9]["sample_id"] == "s0009"
    got = [s for b in DataLoader(ds, batch_size=10, num_workers=2) for s in b["sample_id"]]
    assert got == [f"s{i:04d}" for i in range(30)]
    it = FerroIterableDataset(root, batch_size=6, shuffle=False, **OPTS)
    ids = [s for b in DataLoader(it, batch_size=None, num_workers=2) for s in b["sample_id"]]
    assert sorted(ids) == [f"s{i:04d}" for i in range(30)]
    train = FerroDataModule(root, batch_size=5, **OPTS).train_dataloader()
    assert sum(len(b["sample_id"]) for b in train) == 30
    assert len(Dataset.open(root)) == 30  # nothing was written: still read as it is
