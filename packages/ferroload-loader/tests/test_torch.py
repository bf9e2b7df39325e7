from __future__ import annotations

import io
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")

from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, default_collate  # noqa: E402

import ferroload  # noqa: E402
from ferroload_codec import DecodeError  # noqa: E402
from ferroload_core import available_cpus  # noqa: E402
from ferroload_format import ColumnNotFoundError  # noqa: E402
from ferroload_loader import Sampler, make_loader, mix  # noqa: E402
from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset  # noqa: E402

N = 24  # divisible by the world sizes used below
ODD = "label < 23"  # a view of 23 samples: not divisible
SIZE = (6, 5)
BAD = {5, 17}  # samples whose image bytes are not an image (the `bad` dataset)


def _png(i: int) -> bytes:
    h, w = 4 + i % 5, 3 + i % 7  # sizes vary: resize matters
    img = np.full((h, w, 3), i * 10 % 256, dtype=np.uint8)
    img[0, 0] = (i, 255 - i, 7)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def _write(root: Path, bad: frozenset[int] = frozenset()) -> str:
    w = ferroload.Writer(str(root), "torchtest", shard_size=1500)  # several shards
    w.declare("image", "png", "tensor", "image")
    for i in range(N):
        data = b"this is not an image" if i in bad else _png(i)
        w.add(f"s{i:03d}", {"image": data}, {"label": i, "score": i / 4, "caption": f"c{i}"})
    w.close()
    return str(root)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _write(tmp_path_factory.mktemp("torch") / "ds")


@pytest.fixture(scope="module")
def bad_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _write(tmp_path_factory.mktemp("torch") / "bad", frozenset(BAD))


OPTS: dict[str, Any] = {"images": ["image"], "meta": ["label", "score", "caption"], "resize": SIZE}


def _ids(batches: list[dict[str, Any]]) -> list[list[str]]:
    return [list(b["sample_id"]) for b in batches]


def _reference(uri: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(make_loader(uri, out="torch", **OPTS, **kwargs))


def _assert_same_batches(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert _ids(got) == _ids(want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for k in w:
            if isinstance(w[k], torch.Tensor):
                assert g[k].dtype == w[k].dtype, k
                assert torch.equal(g[k], w[k]), k
            else:
                assert list(g[k]) == list(w[k]), k


# ---------------------------------------------------------------------- map-style


def test_map_style_sample(uri: str) -> None:
    ds = FerroTorchDataset(uri, **OPTS)
    assert len(ds) == N
    s = ds[7]
    assert s["sample_id"] == "s007"
    assert s["image"].dtype == torch.uint8 and s["image"].shape == (*SIZE, 3)
    assert s["label"].shape == () and int(s["label"]) == 7
    assert float(s["score"]) == 7 / 4
    assert s["caption"] == "c7"
    assert ds[-1]["sample_id"] == f"s{N - 1:03d}"
    with pytest.raises(IndexError, match="out of range"):
        ds[N]
    # the sample is what the loader decodes for it
    want = next(iter(make_loader(uri, batch_size=N, shuffle=False, **OPTS)))
    assert torch.equal(s["image"], want["image"][7])


def test_map_style_rejects_bad_options(uri: str) -> None:
    with pytest.raises(ValueError, match="on_error"):
        FerroTorchDataset(uri, meta=["label"], on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resize"):
        FerroTorchDataset(uri, images=["image"])
    with pytest.raises(ColumnNotFoundError, match="nope"):
        FerroTorchDataset(uri, meta=["nope"])


@pytest.mark.parametrize(
    ("rank", "world_size", "where", "workers"), [(0, 1, None, 0), (2, 3, ODD, 2)]
)
def test_map_style_default_collate_matches_make_loader(
    uri: str, rank: int, world_size: int, where: str | None, workers: int
) -> None:
    ds = FerroTorchDataset(uri, where=where, seed=3, **OPTS)
    sampler = Sampler(len(ds), seed=3, rank=rank, world_size=world_size)
    got = list(DataLoader(ds, batch_size=5, sampler=sampler, num_workers=workers))
    want = _reference(uri, where=where, batch_size=5, seed=3, rank=rank, world_size=world_size)
    _assert_same_batches(got, want)
    # torch's per-sample path gives the same batches
    per_sample = [default_collate([ds[i] for i in b.tolist()]) for b in _index_batches(ds, want)]
    _assert_same_batches(per_sample, want)


def _index_batches(ds: FerroTorchDataset, batches: list[dict[str, Any]]) -> list[Any]:
    pos = {ds[i]["sample_id"]: i for i in range(len(ds))}
    return [torch.tensor([pos[s] for s in b["sample_id"]]) for b in batches]


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_map_style_workers_follow_the_sampler_epochs(uri: str, context: str) -> None:
    ds = FerroTorchDataset(uri, seed=1, **OPTS)
    sampler = ds.sampler(rank=1, world_size=2)
    dl = DataLoader(
        ds, batch_size=4, sampler=sampler, num_workers=2 if context == "fork" else 1,
        multiprocessing_context=context, persistent_workers=True,
    )  # fmt: skip
    ref = make_loader(uri, batch_size=4, seed=1, rank=1, world_size=2, **OPTS)
    orders = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        ref.set_epoch(epoch)
        assert ds.epoch == epoch
        got = list(dl)
        _assert_same_batches(got, list(ref))
        orders.append(_ids(got))
    assert orders[0] != orders[1]


def test_map_style_sampler_matches_streaming_and_mixture_orders(uri: str, tmp_path: Path) -> None:
    ds = FerroTorchDataset(uri, seed=2, **OPTS)
    got = list(DataLoader(ds, batch_size=6, sampler=ds.sampler(streaming=True, shuffle_buffer=5)))
    want = _reference(uri, batch_size=6, seed=2, streaming=True, shuffle_buffer=5)
    _assert_same_batches(got, want)

    other = _write(tmp_path / "other")
    m = mix([uri, other], [3, 1], num_samples=20)
    mds = FerroTorchDataset(m, seed=2, **OPTS)
    assert len(mds) == 2 * N  # the item ids of both datasets
    sampler = mds.sampler()
    assert len(sampler) == 20
    got = list(DataLoader(mds, batch_size=6, sampler=sampler))
    _assert_same_batches(got, list(make_loader(m, batch_size=6, seed=2, **OPTS)))


def test_map_style_on_error(bad_uri: str) -> None:
    ds = FerroTorchDataset(bad_uri, on_error="skip", **OPTS)
    batches = list(DataLoader(ds, batch_size=4, sampler=Sampler(N, shuffle=False)))
    assert [len(b["sample_id"]) for b in batches] == [4, 3, 4, 4, 3, 4]
    seen = [s for b in batches for s in b["sample_id"]]
    assert seen == [f"s{i:03d}" for i in range(N) if i not in BAD]
    assert all(b["image"].shape[0] == len(b["sample_id"]) == len(b["label"]) for b in batches)
    with pytest.raises(DecodeError, match="s005"):
        ds[5]  # a single sample has nothing to skip to
    with pytest.raises(DecodeError, match="every sample of this batch"):
        ds.__getitems__([5, 17])
    strict = FerroTorchDataset(bad_uri, **OPTS)
    with pytest.raises(DecodeError, match="s005"):
        list(DataLoader(strict, batch_size=4, sampler=Sampler(N, shuffle=False)))


def test_map_style_pickles_without_its_state(uri: str) -> None:
    ds = FerroTorchDataset(uri, where=ODD, seed=4, **OPTS)
    ds.set_epoch(3)
    first = ds[0]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._state is None  # rebuilt on first use
    assert len(copy) == N - 1 and (copy.seed, copy.epoch) == (4, 3)
    again = copy[0]
    assert again["sample_id"] == first["sample_id"] and torch.equal(again["image"], first["image"])
    assert copy._state is not None


# ---------------------------------------------------------------------- iterable


def _batches(ds: FerroIterableDataset, workers: int, context: str = "fork", **kw: Any) -> Any:
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    return list(DataLoader(ds, batch_size=None, num_workers=workers, **extra, **kw))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_iterable_order_is_independent_of_workers(uri: str) -> None:
    want = _reference(uri, where=ODD, batch_size=4, seed=7, rank=0, world_size=2)
    assert len(want) == 3
    ds = FerroIterableDataset(uri, where=ODD, batch_size=4, seed=7, rank=0, world_size=2, **OPTS)
    assert len(ds) == 3
    for workers in (0, 1, 2, 3):
        ds.set_epoch(0)  # else each finished pass moves on to the next epoch
        _assert_same_batches(_batches(ds, workers), want)
    assert len(DataLoader(ds, batch_size=None, num_workers=2)) == 3


@pytest.mark.parametrize(("where", "world_size"), [(None, 3), (ODD, 3), (None, 2)])
def test_iterable_ranks_cover_the_epoch(uri: str, where: str | None, world_size: int) -> None:
    n = N if where is None else N - 1
    per_rank = []
    for rank in range(world_size):
        ds = FerroIterableDataset(
            uri, where=where, batch_size=3, seed=5, rank=rank, world_size=world_size, **OPTS
        )
        per_rank.append([s for b in _batches(ds, 2) for s in b["sample_id"]])
    assert len({len(ids) for ids in per_rank}) == 1  # every rank the same count
    counts = Counter(s for ids in per_rank for s in ids)
    assert len(counts) == n  # nothing missing
    extra = -(-n // world_size) * world_size - n  # wrapped around to pad the last round
    assert sum(counts.values()) == n + extra
    assert sum(c - 1 for c in counts.values()) == extra


def test_iterable_is_deterministic_and_epochs_differ(uri: str) -> None:
    runs = [
        _ids(_batches(FerroIterableDataset(uri, batch_size=6, seed=11, **OPTS), 2))
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    ds = FerroIterableDataset(uri, batch_size=6, seed=11, **OPTS)
    ds.set_epoch(1)
    assert _ids(_batches(ds, 2)) != runs[0]


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_iterable_set_epoch_reaches_persistent_workers(uri: str, context: str) -> None:
    ds = FerroIterableDataset(uri, batch_size=5, seed=2, rank=1, world_size=2, **OPTS)
    dl = DataLoader(
        ds, batch_size=None, num_workers=2, persistent_workers=True,
        multiprocessing_context=context,
    )  # fmt: skip
    ref = make_loader(uri, batch_size=5, seed=2, rank=1, world_size=2, **OPTS)
    orders = []
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        ref.set_epoch(epoch)
        got = list(dl)
        _assert_same_batches(got, list(ref))
        orders.append(_ids(got))
    assert orders[0] != orders[1] != orders[2]


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_iterable_resume_matches_make_loader(uri: str) -> None:
    kw: dict[str, Any] = {"batch_size": 4, "seed": 9, "rank": 0, "world_size": 2, **OPTS}
    ref = make_loader(uri, **kw)
    ref.set_epoch(1)
    full = list(ref)
    ref.set_epoch(1)
    it = iter(ref)
    for _ in range(2):
        next(it)
    saved = ref.state_dict()
    ref.close()

    ds = FerroIterableDataset(uri, **kw)
    ds.set_epoch(1)
    received = []
    for batch in DataLoader(ds, batch_size=None):
        received.append(batch)
        if len(received) == 2:
            break
    state = ds.state_dict()
    assert state == saved  # the same state as make_loader's
    _assert_same_batches(received, full[:2])

    resumed = FerroIterableDataset(uri, **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the current epoch: keeps the position
    assert len(resumed) == len(full)  # the whole epoch, as torch counts
    _assert_same_batches(_batches(resumed, 3), full[2:])
    assert resumed.epoch == 1
    # that pass finished the epoch: the next one is epoch 2, from its start
    ref.set_epoch(2)
    epoch2 = list(ref)
    _assert_same_batches(_batches(resumed, 2), epoch2)
    # a state taken at the very end of an epoch resumes into the next one
    end = FerroIterableDataset(uri, **kw)
    end.set_epoch(1)
    assert len(_batches(end, 0)) == len(full)
    at_end = end.state_dict()
    assert at_end["sampler"]["consumed"] == N
    again = FerroIterableDataset(uri, **kw)
    again.load_state_dict(at_end)
    _assert_same_batches(_batches(again, 0), epoch2)


def test_iterable_resume_under_another_world_size(uri: str) -> None:
    ref = make_loader(uri, batch_size=4, seed=1, rank=0, world_size=2, **OPTS)
    it = iter(ref)
    next(it), next(it)  # 2 batches of 4 on 2 ranks: the first 16 items used
    state = ref.state_dict()
    ref.close()
    seen = {s for b in _reference(uri, batch_size=16, seed=1)[:1] for s in b["sample_id"]}
    rest = []
    for rank in range(4):  # the 8 items left, 2 per rank
        r = FerroIterableDataset(uri, batch_size=3, seed=1, rank=rank, world_size=4, **OPTS)
        r.load_state_dict(state)
        rest += [s for b in _batches(r, 2) for s in b["sample_id"]]
    assert sorted(rest) == sorted(f"s{i:03d}" for i in range(N) if f"s{i:03d}" not in seen)


def test_iterable_on_error_skip(bad_uri: str) -> None:
    ds = FerroIterableDataset(bad_uri, batch_size=4, shuffle=False, on_error="skip", **OPTS)
    batches = _batches(ds, 2)
    assert [len(b["sample_id"]) for b in batches] == [4, 3, 4, 4, 3, 4]
    assert [s for b in batches for s in b["sample_id"]] == [
        f"s{i:03d}" for i in range(N) if i not in BAD
    ]
    strict = FerroIterableDataset(bad_uri, batch_size=4, shuffle=False, **OPTS)
    with pytest.raises(DecodeError, match="s005"):
        _batches(strict, 0)


def test_iterable_pickles_without_its_state(uri: str) -> None:
    ds = FerroIterableDataset(uri, where=ODD, batch_size=5, seed=3, **OPTS)
    ds.set_epoch(2)
    want = _batches(ds, 0)
    blob = pickle.dumps(ds)
    copy = pickle.loads(blob)
    assert copy._state is None and copy._sampler._cache is None
    assert copy.epoch == 2 and len(copy) == len(want)
    copy.set_epoch(2)  # its last pass finished epoch 2: replay it
    _assert_same_batches(_batches(copy, 0), want)


def _check_threads(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    _, fields = info.dataset._runtime()
    threads = fields[0].decoder.pool.threads
    if threads != max(1, available_cpus() // info.num_workers):
        raise AssertionError(f"worker {worker_id} decodes on {threads} threads")


def test_decode_threads_are_shared_out_among_workers(uri: str) -> None:
    ds = FerroIterableDataset(uri, batch_size=8, **OPTS)
    assert len(_batches(ds, 2, worker_init_fn=_check_threads)) == 3
    pinned = FerroIterableDataset(uri, batch_size=8, threads=1, **OPTS)
    assert pinned._runtime()[1][0].decoder.pool.threads == 1


def test_adapters_compute_batches_on_demand(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither adapter materialises a rank's items: the iterable computes each batch it
    builds, the map-style sampler yields items a chunk at a time."""
    import sys

    def refuse(name: str) -> Any:
        original = getattr(Sampler, name)

        def guarded(*args: Any, **kw: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            assert not caller.startswith("ferroload_loader"), f"{caller} called {name}"
            return original(*args, **kw)

        return guarded

    for name in ("global_order", "indices"):
        monkeypatch.setattr(Sampler, name, refuse(name))
    want = _reference(uri, where=ODD, batch_size=4, seed=7, rank=1, world_size=2)
    ds = FerroIterableDataset(uri, where=ODD, batch_size=4, seed=7, rank=1, world_size=2, **OPTS)
    _assert_same_batches(_batches(ds, 0), want)
    state = ds.state_dict()  # the position by formula too
    assert state["sampler"]["consumed"] == 23  # the whole epoch (padding counts no further)
    mapped = FerroTorchDataset(uri, where=ODD, seed=7, **OPTS)
    sampler = mapped.sampler(rank=1, world_size=2)
    got = [b["sample_id"] for b in DataLoader(mapped, batch_size=4, sampler=sampler)]
    assert got == [b["sample_id"] for b in want]
