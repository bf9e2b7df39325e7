"""Batches handed from DataLoader workers to the main process through shared memory."""

from __future__ import annotations

import copy
import io
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")

from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import ferroload  # noqa: E402
from ferroload_loader import _torch_shared, make_loader  # noqa: E402
from ferroload_loader._torch_shared import RING_SLOTS, SharedRing, pack  # noqa: E402
from ferroload_loader.torch import FerroBatch, FerroIterableDataset  # noqa: E402

N = 64
BATCH = 4  # 16 batches: more than a worker's ring holds
OPTS = {"images": ["image"], "meta": ["label"], "resize": (8, 8), "batch_size": BATCH, "seed": 3}


def _png(i: int) -> bytes:
    img = np.full((5 + i % 4, 6, 3), i * 7 % 256, dtype=np.uint8)
    img[0, 0] = (i, 255 - i, 9)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    root: Path = tmp_path_factory.mktemp("torch-workers") / "ds"
    w = ferroload.Writer(str(root), "workers")
    w.declare("image", "png", "tensor", "image")
    for i in range(N):
        w.add(f"s{i:03d}", {"image": _png(i)}, {"label": i})
    w.close()
    return str(root)


def _expected(uri: str, epoch: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    dl = make_loader(uri, out="torch", **OPTS)  # type: ignore[arg-type]
    dl.set_epoch(epoch)
    out = {}
    for b in dl:
        out[b["sample_id"][0]] = (b["image"].clone(), b["label"].clone())
    return out


def _same(b: dict[str, object], want: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> bool:
    image, label = want[b["sample_id"][0]]  # type: ignore[index]
    return bool(torch.equal(b["image"], image) and torch.equal(b["label"], label))  # type: ignore[arg-type]


@pytest.mark.parametrize("persistent", [True, False])
def test_batches_kept_by_the_training_loop_stay_intact(uri: str, persistent: bool) -> None:
    """A worker reuses a slot only once the main process let go of it: batches kept
    (every one, then every third) still hold their samples after the epoch; the rest of
    the epoch comes through the ring's slots or, with all of them held, as copies."""
    ds = FerroIterableDataset(uri, **OPTS)  # type: ignore[arg-type]
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent)
    for epoch, keep_every in ((0, 1), (1, 3), (2, 1000)):
        want = _expected(uri, epoch)
        ds.set_epoch(epoch)
        kept, order = [], []
        for i, b in enumerate(dl):
            assert isinstance(b, FerroBatch)
            assert _same(b, want)
            order.append(b["sample_id"][0])
            if i % keep_every == 0:
                kept.append(b)
        assert order == list(want)  # the same batches in the same order
        assert all(_same(b, want) for b in kept)
        del kept
    rings = [k for k in _torch_shared._RECEIVED if k.startswith(ds._uid)]
    assert 1 <= len(rings) <= 2  # one per worker; exited workers' rings are dropped
    for key in rings:
        assert len(_torch_shared._RECEIVED[key].bases) <= RING_SLOTS


def test_ring_reuses_a_slot_once_both_sides_let_go() -> None:
    ring = SharedRing("test:0:image", keep=2)
    a = ring.empty((3, 4), np.uint8)
    a[:] = 7
    assert ring.held == [True]
    t = torch.from_numpy(a)
    del a
    assert ring.held == [True]  # the tensor still refers to it
    # as a worker sends it: torch's pickler hands shared memory over, not a copy
    sent = pickle.loads(ForkingPickler.dumps(pack(t)))
    assert torch.equal(sent, torch.full((3, 4), 7, dtype=torch.uint8))
    del t
    assert ring.held == [False] and ring.sent == [1]
    b = ring.empty((3, 4), np.uint8)  # slot 0 is still the main process's: a new slot
    assert len(ring.bases) == 2 and ring.find(torch.from_numpy(b)) == 1
    c = ring.empty((2, 2), np.uint8)  # every slot in use: a plain array
    assert ring.find(torch.from_numpy(c)) == -1
    del sent  # the main process lets go of slot 0
    d = ring.empty((2, 2), np.uint8)
    assert ring.find(torch.from_numpy(d)) == 0 and ring.reused == 1
    big = ring.empty((100,), np.float32)  # no slot is free
    assert ring.find(torch.from_numpy(big)) == -1
    del b
    big = ring.empty((100,), np.float32)  # slot 1 is free but small: new memory for it
    assert ring.find(torch.from_numpy(big)) == 1 and ring.announced[1] is False


def test_small_tensors_travel_inside_the_pickle() -> None:
    t = torch.arange(5)
    packed = pack(t)
    assert packed is not t
    assert torch.equal(pickle.loads(pickle.dumps(packed)), t)
    big = torch.zeros(_torch_shared.INLINE_BYTES + 1, dtype=torch.uint8)
    assert pack(big) is big  # torch's own pickling
    assert pack("a") == "a"


def test_ferro_batch_copies_and_pickles_in_the_main_process() -> None:
    b = FerroBatch({"x": torch.arange(3), "sample_id": ["a", "b", "c"]})
    for other in (copy.copy(b), copy.deepcopy(b), pickle.loads(pickle.dumps(b))):
        assert isinstance(other, FerroBatch)
        assert torch.equal(other["x"], b["x"]) and other["sample_id"] == b["sample_id"]
    assert copy.copy(b)["x"] is b["x"]
    assert copy.deepcopy(b)["x"] is not b["x"]
