"""The loader driven with the habits of torch, torchdata and Lightning users: passes,
epochs, lengths, `StatefulDataLoader` resume and misuse that must fail loudly."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from torch.utils.data import DataLoader  # noqa: E402

from ferroload_loader import FerroLoader, Sampler, make_loader  # noqa: E402
from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset  # noqa: E402

StatefulDataLoader = stateful.StatefulDataLoader
pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
N, B = 40, 8
OPTS: dict[str, Any] = {"images": ["image"], "meta": ["label"], "resize": (12, 16)}


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    from ferroload_format import Writer

    from .conftest import index_png

    root = str(tmp_path_factory.mktemp("conventions") / "ds")
    with Writer(root, "conventions", shard_size=1 << 12) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(N):
            w.add(f"s{i:05d}", {"image": index_png(i)}, {"label": i})
    return root


def flat(batches: Any) -> list[str]:
    return [s for b in batches for s in b["sample_id"]]


def epoch_order(uri: str, epoch: int, **kw: Any) -> list[str]:
    dl = make_loader(uri, batch_size=B, seed=3, out="numpy", **OPTS, **kw)
    dl.set_epoch(epoch)
    return flat(dl)


# ---------------------------------------------------------------------- passes (make_loader)


def test_every_iter_starts_a_pass_at_the_start_of_the_epoch(uri: str) -> None:
    dl = make_loader(uri, batch_size=B, seed=3, out="numpy", **OPTS)
    assert len(dl) == N // B
    head = next(iter(dl))["sample_id"]  # a peek, as people do
    dl.close()
    first = flat(dl)  # then the loop: the whole epoch, not the 32 after the peek
    assert len(first) == N and first[:B] == list(head)
    assert first == epoch_order(uri, 0)

    for b in itertools.islice(dl, 3):  # a pass cut short by `break`
        assert len(b["sample_id"]) == B
    dl.close()
    assert len(dl) == N // B and dl.remaining() == N // B - 3
    again = flat(dl)  # replays its epoch whole (it did not finish)
    assert again == epoch_order(uri, 1)  # ...of epoch 1: `first` had finished epoch 0


def test_a_finished_pass_moves_on_and_set_epoch_wins(uri: str) -> None:
    dl = make_loader(uri, batch_size=B, seed=3, out="numpy", **OPTS)
    passes = [flat(dl) for _ in range(3)]
    assert passes == [epoch_order(uri, e) for e in range(3)]
    assert len(set(map(tuple, passes))) == 3 and all(sorted(p) == sorted(passes[0]) for p in passes)
    dl.set_epoch(1)  # explicit: replays epoch 1
    assert flat(dl) == passes[1]
    dl.set_epoch(7)
    assert flat(dl) == epoch_order(uri, 7)
    assert dl.epoch == 7


@pytest.mark.parametrize("world", [1, 2, 4])
def test_the_automatic_epochs_are_the_same_for_every_world_size(uri: str, world: int) -> None:
    loaders = [
        make_loader(uri, batch_size=5, seed=3, rank=r, world_size=world, out="numpy", **OPTS)
        for r in range(world)
    ]
    for epoch in range(2):
        per_rank = [flat(dl) for dl in loaders]
        interleaved = [per_rank[i % world][i // world] for i in range(N)]
        assert interleaved == epoch_order(uri, epoch)
        assert all(dl.epoch == epoch for dl in loaders)


def test_sampler_passes_and_lengths() -> None:
    s = Sampler(10, seed=1, rank=1, world_size=4)
    assert len(s) == 3 and s.remaining() == 3
    it = iter(s)
    next(it)
    assert (len(s), s.remaining(), s.consumed) == (3, 2, 4)
    again = list(s)  # a new pass: the whole epoch again
    assert len(again) == 3 and s.epoch == 0
    assert list(s) != again and s.epoch == 1  # the finished pass moved on
    assert len(Sampler(10, rank=1, world_size=4, drop_last=True)) == 2


# ---------------------------------------------------------------------- torch DataLoader


def test_map_style_dataloader_passes_follow_the_sampler(uri: str) -> None:
    ds = FerroTorchDataset(uri, seed=3, **OPTS)
    sampler = ds.sampler()
    dl = DataLoader(ds, batch_size=B, sampler=sampler)
    assert len(dl) == N // B
    first, second = flat(dl), flat(dl)
    assert first == epoch_order(uri, 0) and second == epoch_order(uri, 1)
    assert ds.epoch == 1  # the dataset's per-sample random choices follow
    for _ in dl:
        break
    assert flat(dl) == epoch_order(uri, 2)  # the cut pass was epoch 2: replayed whole


@pytest.mark.parametrize("persistent", [False, True])
def test_iterable_dataloader_passes(uri: str, persistent: bool) -> None:
    ds = FerroIterableDataset(uri, batch_size=B, seed=3, **OPTS)
    dl = DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="fork",
        persistent_workers=persistent,
    )  # fmt: skip
    assert len(dl) == N // B
    assert flat(dl) == epoch_order(uri, 0)
    assert flat(dl) == epoch_order(uri, 1)  # workers moved to the next epoch together
    for _ in itertools.islice(dl, 2):
        pass
    assert flat(dl) == epoch_order(uri, 2)  # a cut pass replays its epoch
    ds.set_epoch(0)
    assert flat(dl) == epoch_order(uri, 0)


def test_dataloader_batching_an_iterable_dataset_again_fails_loudly(uri: str) -> None:
    ds = FerroIterableDataset(uri, batch_size=B, **OPTS)
    for kw in ({}, {"batch_size": B}):  # DataLoader's default batch_size is 1
        with pytest.raises(TypeError, match="batch_size=None"):
            next(iter(DataLoader(ds, **kw)))
    batch = next(iter(DataLoader(ds, batch_size=None)))
    assert batch["image"].shape == (B, 12, 16, 3)


# ---------------------------------------------------------------------- torchdata


def _resume_run(make: Any, stop: int) -> tuple[list[str], list[str], list[str]]:
    """Take `stop` batches, save, resume in a new loader: (before, after, next epoch)."""
    dl = make()
    it = iter(dl)
    before = flat(next(it) for _ in range(stop))
    state = dl.state_dict()
    del it, dl
    resumed = make()
    resumed.load_state_dict(state)
    after = flat(resumed)
    return before, after, flat(resumed)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop", [1, 3])
def test_stateful_dataloader_map_style_resumes_exactly(uri: str, workers: int, stop: int) -> None:
    def make() -> Any:
        ds = FerroTorchDataset(uri, seed=3, **OPTS)
        sampler = ds.sampler()
        sampler.set_epoch(1)
        extra = {"multiprocessing_context": "fork"} if workers else {}
        return StatefulDataLoader(ds, batch_size=B, sampler=sampler, num_workers=workers, **extra)

    before, after, following = _resume_run(make, stop)
    assert before + after == epoch_order(uri, 1)  # no duplicate, none missing
    assert len(before) == stop * B
    assert following == epoch_order(uri, 2)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop", [1, 3])
def test_stateful_dataloader_iterable_resumes_exactly(uri: str, workers: int, stop: int) -> None:
    def make() -> Any:
        ds = FerroIterableDataset(uri, batch_size=B, seed=3, **OPTS)
        ds.set_epoch(1)
        extra = {"multiprocessing_context": "fork"} if workers else {}
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers, **extra)

    before, after, following = _resume_run(make, stop)
    assert before + after == epoch_order(uri, 1)
    assert not [s for s, c in Counter(before + after).items() if c > 1]
    assert following == epoch_order(uri, 2)


def _iterable_stateful(
    uri: str, batch_size: int, workers: int, *, ds: Any = None, **extra: Any
) -> Any:
    if ds is None:
        ds = FerroIterableDataset(uri, batch_size=batch_size, seed=3, **OPTS)
        ds.set_epoch(1)
    if workers:
        extra.setdefault("multiprocessing_context", "fork")
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers, **extra)


def _ids(batches: Any) -> list[list[str]]:
    return [list(b["sample_id"]) for b in batches]


def _epoch_end_states(uri: str, batch_size: int, workers: int, **extra: Any) -> Any:
    """An uninterrupted run (epochs 1, 2, 3 batch by batch) and the loader states saved
    one batch before the end of epoch 1 and right after its last batch (before the loop
    sees the end of the pass)."""
    dl = _iterable_stateful(uri, batch_size, workers, **extra)
    it = iter(dl)
    epoch1, states = [], []
    for _ in range(len(dl)):
        states.append(dl.state_dict())
        epoch1.append(list(next(it)["sample_id"]))
    states.append(dl.state_dict())
    with pytest.raises(StopIteration):
        next(it)
    runs = [epoch1, _ids(dl), _ids(dl)]
    assert [flat({"sample_id": s} for s in run) for run in runs] == [
        epoch_order(uri, e) for e in (1, 2, 3)
    ]
    return runs, states[-2], states[-1]


@pytest.mark.parametrize(
    ("batch_size", "workers"),
    [(8, 2), (10, 2), (8, 3), (10, 3), (8, 1)],
    ids=["5-batches-2-workers", "4-batches-2-workers", "5-batches-3-workers",
         "4-batches-3-workers", "5-batches-1-worker"],
)  # fmt: skip
def test_stateful_dataloader_iterable_resumes_an_epoch_end_with_the_next_epoch(
    uri: str, batch_size: int, workers: int
) -> None:
    """A state saved after an epoch's last batch: the workers agree that the epoch was
    consumed, and the resumed loader goes straight on with the next epoch."""
    (epoch1, epoch2, epoch3), before_last, at_end = _epoch_end_states(uri, batch_size, workers)
    assert len(epoch1) == N // batch_size + (N % batch_size > 0)

    resumed = _iterable_stateful(uri, batch_size, workers)
    resumed.load_state_dict(at_end)
    assert _ids(resumed) == epoch2  # not an empty pass first
    assert _ids(resumed) == epoch3

    # one batch before the end: exactly the remaining batch, then the end of the pass
    resumed = _iterable_stateful(uri, batch_size, workers)
    resumed.load_state_dict(before_last)
    it = iter(resumed)
    assert list(next(it)["sample_id"]) == epoch1[-1]
    with pytest.raises(StopIteration):
        next(it)
    assert _ids(resumed) == epoch2


@pytest.mark.slow
def test_stateful_dataloader_iterable_resumes_an_epoch_end_in_spawned_workers(uri: str) -> None:
    spawn = {"multiprocessing_context": "spawn", "persistent_workers": True}
    (_, epoch2, epoch3), _, at_end = _epoch_end_states(uri, 8, 2, **spawn)
    resumed = _iterable_stateful(uri, 8, 2, **spawn)
    resumed.load_state_dict(at_end)
    assert _ids(resumed) == epoch2
    assert _ids(resumed) == epoch3


def test_stateful_dataloader_resumes_an_epoch_end_on_each_rank(uri: str) -> None:
    def make(rank: int) -> Any:
        ds = FerroIterableDataset(uri, batch_size=4, seed=3, rank=rank, world_size=2, **OPTS)
        return _iterable_stateful(uri, 4, 2, ds=ds)

    for rank in (0, 1):
        dl = make(rank)
        epoch0 = _ids(dl)
        assert len(epoch0) == 5  # 20 samples a rank, in batches of 4
        it = iter(dl)
        for _ in range(5):
            next(it)
        at_end = dl.state_dict()
        epoch2 = _ids(dl)  # the pass that `it` began finished epoch 1
        resumed = make(rank)
        resumed.load_state_dict(at_end)
        assert _ids(resumed) == epoch2


@pytest.mark.parametrize("persistent", [False, True])
def test_one_dataset_resumed_from_two_epoch_ends_in_turn(uri: str, persistent: bool) -> None:
    """The workers' agreement is the current resume's: what the workers of an earlier
    resume of the same dataset object left in its shared memory does not count."""
    (epoch1, epoch2, _), before_last, at_end = _epoch_end_states(uri, 8, 2)
    ds = FerroIterableDataset(uri, batch_size=8, seed=3, **OPTS)
    dl = _iterable_stateful(uri, 8, 2, ds=ds, persistent_workers=persistent)
    for state, want in [(at_end, epoch2), (before_last, epoch1[-1:]), (at_end, epoch2),
                        (before_last, epoch1[-1:]), (before_last, epoch1[-1:])]:  # fmt: skip
        dl.load_state_dict(state)
        assert _ids(dl) == want
    again = _iterable_stateful(uri, 8, 2, ds=ds, persistent_workers=persistent)
    again.load_state_dict(at_end)
    assert _ids(again) == epoch2


def _owner_late(worker: int) -> None:
    """A `worker_init_fn` (torchdata runs it before it restores the worker's state): the
    owner of the epoch's last batch (worker 0 of 2 for 5 batches) restores late."""
    if worker == 0:
        time.sleep(0.5)


def test_a_worker_waits_for_the_word_of_this_resume(uri: str) -> None:
    """The owner of the epoch's last batch restores late: a worker whose share is done
    waits for the owner's word of this resume, not the one an earlier resume of the same
    dataset object left in shared memory (which would start the next epoch while the
    owner still builds the last batch)."""
    (epoch1, epoch2, _), before_last, at_end = _epoch_end_states(uri, 8, 2)
    ds = FerroIterableDataset(uri, batch_size=8, seed=3, **OPTS)
    for state, want in [(at_end, epoch2), (before_last, epoch1[-1:]), (at_end, epoch2)]:
        dl = _iterable_stateful(uri, 8, 2, ds=ds, worker_init_fn=_owner_late)
        dl.load_state_dict(state)
        assert _ids(dl) == want


def test_the_main_process_does_not_guess_where_workers_are(uri: str) -> None:
    ds = FerroIterableDataset(uri, batch_size=B, seed=3, **OPTS)
    start = ds.state_dict()  # nothing ran: the start of epoch 0
    assert (start["sampler"]["epoch"], start["sampler"]["consumed"]) == (0, 0)
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    for _ in itertools.islice(dl, 2):
        pass
    with pytest.raises(RuntimeError, match="StatefulDataLoader"):
        ds.state_dict()  # part-way through a pass that only the workers know
    assert len(flat(dl)) == N  # a whole pass (the cut one is replayed)
    end = ds.state_dict()  # the workers finished it: the end of that epoch
    assert (end["sampler"]["epoch"], end["sampler"]["consumed"]) == (0, N)
    ds.set_epoch(4)
    assert ds.state_dict()["sampler"]["epoch"] == 4


def test_a_worker_state_cannot_be_loaded_by_hand(uri: str) -> None:
    ds = FerroIterableDataset(uri, batch_size=B, **OPTS)
    worker_state = {**ds.state_dict(), "worker": 1, "num_workers": 2, "batches": 1}
    with pytest.raises(ValueError, match="StatefulDataLoader"):
        ds.load_state_dict(worker_state)
    dl: FerroLoader = make_loader(uri, batch_size=B, out="numpy", **OPTS)
    with pytest.raises(ValueError, match="StatefulDataLoader"):
        dl.load_state_dict(worker_state)
    with pytest.raises(ValueError, match="not a loader state"):
        dl.load_state_dict({"epoch": 1})


def test_lengths_follow_torch(uri: str) -> None:
    dl = make_loader(uri, batch_size=B, out="numpy", rank=1, world_size=3, **OPTS)
    per_rank = -(-N // 3)
    assert len(dl.sampler) == per_rank and len(dl) == -(-per_rank // B)
    it = iter(dl)
    next(it)
    assert len(dl) == -(-per_rank // B) and dl.remaining() == len(dl) - 1
    dl.close()
    ds = FerroIterableDataset(uri, batch_size=B, rank=1, world_size=3, **OPTS)
    assert len(ds) == len(dl)


# ---------------------------------------------------------------------- augmentation


AUG: dict[str, Any] = {
    "crop": "random", "hflip": 0.5, "layout": "NCHW", "dtype": torch.float32,
    "normalize": ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3)),
}  # fmt: skip


def by_id(batches: Any) -> dict[str, Any]:
    return {s: b["image"][i] for b in batches for i, s in enumerate(b["sample_id"])}


def assert_same_images(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for s, image in want.items():
        assert torch.equal(got[s], image), s


@pytest.mark.parametrize("workers", [0, 2])
def test_augmented_batches_are_bit_identical_in_dataloader_workers(uri: str, workers: int) -> None:
    ref = make_loader(uri, batch_size=B, seed=3, **OPTS, **AUG)
    ref.set_epoch(2)
    want = list(ref)
    assert want[0]["image"].shape == (B, 3, 12, 16) and want[0]["image"].dtype == torch.float32

    def add_one(batch: dict[str, Any], rng: Any) -> dict[str, Any]:
        batch["noise"] = torch.from_numpy(rng.random(len(batch["sample_id"])))
        return batch

    ds = FerroIterableDataset(uri, batch_size=B, seed=3, transform=add_one, **OPTS, **AUG)
    ds.set_epoch(2)
    extra = {"multiprocessing_context": "fork"} if workers else {}
    got = list(DataLoader(ds, batch_size=None, num_workers=workers, **extra))
    assert flat(got) == flat(want)
    assert_same_images(by_id(got), by_id(want))
    assert got[0]["noise"].shape == (B,)  # the transform ran in the worker, seeded:
    ds.set_epoch(2)
    again = list(DataLoader(ds, batch_size=None))
    assert all(torch.equal(a["noise"], b["noise"]) for a, b in zip(again, got, strict=True))

    mds = FerroTorchDataset(uri, seed=3, **OPTS, **AUG)
    sampler = mds.sampler()
    sampler.set_epoch(2)
    per_sample = list(DataLoader(mds, batch_size=5, sampler=sampler, num_workers=workers, **extra))
    assert_same_images(by_id(per_sample), by_id(want))  # other batch size, same samples


def test_augmented_resume_with_stateful_dataloader(uri: str) -> None:
    ref = make_loader(uri, batch_size=B, seed=3, **OPTS, **AUG)
    ref.set_epoch(1)
    want = by_id(ref)

    def make() -> Any:
        ds = FerroIterableDataset(uri, batch_size=B, seed=3, **OPTS, **AUG)
        ds.set_epoch(1)
        return StatefulDataLoader(
            ds, batch_size=None, num_workers=2, multiprocessing_context="fork"
        )

    dl = make()
    it = iter(dl)
    head = [next(it) for _ in range(2)]
    state = dl.state_dict()
    del it, dl
    resumed = make()
    resumed.load_state_dict(state)
    assert_same_images({**by_id(head), **by_id(resumed)}, want)


@pytest.mark.parametrize("workers", [None, 0, 2], ids=["make_loader", "0-workers", "2-workers"])
def test_an_epoch_end_with_drop_last_resumes_with_the_next_epoch(uri: str, workers: Any) -> None:
    """With `drop_last`, the position after the epoch's last whole batch still has the
    dropped items before it: it was taken for a position inside the epoch, and resumed
    as an empty pass."""

    def make() -> Any:
        if workers is None:
            return make_loader(uri, batch_size=7, seed=3, drop_last=True, out="numpy", **OPTS)
        ds = FerroIterableDataset(uri, batch_size=7, seed=3, drop_last=True, **OPTS)
        return _iterable_stateful(uri, 7, workers, ds=ds)

    dl = make()
    assert N % 7 and len(dl) == N // 7  # items left over, dropped
    it = iter(dl)
    for _ in range(len(dl)):
        next(it)
    state = dl.state_dict()
    assert list(it) == []  # the end of that pass, then the next epoch
    following = _ids(dl)
    assert len(following) == N // 7
    resumed = make()
    resumed.load_state_dict(state)
    assert _ids(resumed) == following  # straight on with the next epoch
