"""Loader states checked whole when they are loaded (`_state`): an edited or foreign
checkpoint is refused by `load_state_dict`, naming the key and value, before anything
changes — never a silent resume at the wrong place, nor an error while iterating.

Hostile states from a checkpoint edited by hand, through every loader: `make_loader`,
`Sampler`, `FerroIterableDataset` in the main process and in DataLoader workers, and
`FerroTorchDataset`'s sampler, the last two through torchdata's `StatefulDataLoader`
with 0 and 2 workers.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from ferroload_core import FerroloadError
from ferroload_format import Writer
from ferroload_loader import LoaderStateError, Sampler, make_loader

N, B = 80, 8
META: dict[str, Any] = {"meta": ["label"], "seed": 3}
INF = float("inf")


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("state") / "ds")
    with Writer(root, "state", shard_size=1 << 10) as w:
        for i in range(N):
            w.add(f"s{i:03d}", None, {"label": i})
    return root


def flat(batches: Any) -> list[str]:
    return [s for b in batches for s in b["sample_id"]]


#: (edit of the sampler's state, the key the error names): each once accepted (and
#: resumed somewhere else, or converted) or failed only while iterating.
BAD_SAMPLER: list[tuple[dict[str, Any], str]] = [
    *[({"consumed": v}, "sampler.consumed") for v in ("16", 1.5, True, N + 1, 10**18, -8, INF)],
    ({"consumed": 10**5000}, "sampler.consumed"),  # no repr of 5,000 digits either
    ({"epoch": -1}, "sampler.epoch"),
    ({"epoch": True}, "sampler.epoch"),
    ({"epoch": 2**63}, "sampler.epoch"),
    ({"epoch": "1"}, "sampler.epoch"),
    ({"seed": -1}, "sampler.seed"),
    ({"seed": 2**63}, "sampler.seed"),
    ({"seed": 3.0}, "sampler.seed"),
    ({"num_items": True}, "sampler.num_items"),
    ({"num_items": 81}, "sampler.num_items"),
    ({"mode": "shard_block"}, "sampler.mode"),
    ({"version": True}, "sampler.version"),
    ({"lanes": 2}, "sampler.lanes"),  # a permutation order has no lanes
    ({"extra": 1}, "sampler.extra"),
    *[({k: None}, f"sampler.{k}") for k in ("version", "seed", "epoch", "consumed", "mode")],
]


def _edit(sampler_state: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any]:
    """The state with `edit` applied (None: that key removed)."""
    out = {**sampler_state, **edit}
    return {k: v for k, v in out.items() if v is not None}


def _ids(cases: list[tuple[dict[str, Any], str]]) -> list[str]:
    def short(v: Any) -> str:
        return f"int{v.bit_length()}b" if isinstance(v, int) and v > 10**100 else repr(v)[:14]

    return [",".join(f"{k}={short(v)}" for k, v in edit.items()) for edit, _ in cases]


def _refused(load: Any, state: Any, key: str) -> LoaderStateError:
    with pytest.raises(LoaderStateError) as info:
        load(state)
    err = info.value
    assert isinstance(err, FerroloadError) and isinstance(err, ValueError)
    assert err.key == key and key in str(err), str(err)
    return err


@pytest.mark.parametrize(("edit", "key"), BAD_SAMPLER, ids=_ids(BAD_SAMPLER))
def test_make_loader_refuses_an_edited_state_when_loading_it(
    uri: str, edit: dict[str, Any], key: str
) -> None:
    dl = make_loader(uri, batch_size=B, out="numpy", **META)
    it = iter(dl)
    first = [next(it) for _ in range(2)]
    state = dl.state_dict()
    resumed = make_loader(uri, batch_size=B, out="numpy", **META)
    resumed.load_state_dict(state)
    bad = {**state, "sampler": _edit(state["sampler"], edit)}
    err = _refused(resumed.load_state_dict, bad, key)
    value = next(iter(edit.values()))
    if value is not None and not (isinstance(value, int) and value > 10**100):
        assert repr(value) in str(err)  # the value is named too
    # nothing changed: the loader resumes the good state it had
    assert flat(first) + flat(resumed) == flat(make_loader(uri, batch_size=B, out="numpy", **META))
    # the sampler alone checks the same way
    sampler = Sampler(N, seed=3)
    with pytest.raises(LoaderStateError, match=key.split(".")[1]):
        sampler.load_state_dict(bad["sampler"])
    assert (sampler.epoch, sampler.consumed) == (0, 0)


BAD_LOADER: list[tuple[dict[str, Any], str]] = [
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": True}, "batch_size"),
    ({"batch_size": "8"}, "batch_size"),
    ({"batch_size": None}, "batch_size"),  # missing
    ({"epoch": 1}, "epoch"),  # unknown at the top
    ({"sampler": [1, 2]}, "sampler"),
    ({"worker": 0}, "batches"),  # a worker's keys come together
    ({"worker": 0, "num_workers": 2, "batches": 1}, "worker"),  # one worker's position
    ({"worker": 0, "num_workers": 1, "batches": 0}, "num_workers"),
]


@pytest.mark.parametrize(("edit", "key"), BAD_LOADER, ids=_ids(BAD_LOADER))
def test_a_loader_state_is_checked_at_the_top_too(uri: str, edit: dict[str, Any], key: str) -> None:
    dl = make_loader(uri, batch_size=B, out="numpy", **META)
    _refused(dl.load_state_dict, _edit(dl.state_dict(), edit), key)
    with pytest.raises(LoaderStateError, match="pass what state_dict"):
        dl.load_state_dict([1])  # type: ignore[arg-type]


def test_a_state_at_the_end_of_its_epoch_is_accepted(uri: str) -> None:
    dl = make_loader(uri, batch_size=B, out="numpy", **META)
    state = dl.state_dict()
    dl.load_state_dict({**state, "sampler": {**state["sampler"], "consumed": N}})
    assert dl.remaining() == 0
    assert flat(dl) == _epoch(uri, 1)  # the next pass starts the next epoch


def _epoch(uri: str, epoch: int) -> list[str]:
    dl = make_loader(uri, batch_size=B, out="numpy", **META)
    dl.set_epoch(epoch)
    return flat(dl)


# ----------------------------------------------------------------------- torch, torchdata

torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset  # noqa: E402

StatefulDataLoader = stateful.StatefulDataLoader
FORK = {"multiprocessing_context": "fork"}


def _iterable_loader(workers: int, uri: str, **kw: Any) -> Any:
    ds = FerroIterableDataset(uri, batch_size=B, **META, **kw)
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers, **(FORK if workers else {}))


def _saved(make: Any, stop: int = 4) -> tuple[list[str], dict[str, Any]]:
    dl = make()
    it = iter(dl)
    head = flat(next(it) for _ in range(stop))
    state = dl.state_dict()
    del it, dl
    return head, state


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
@pytest.mark.parametrize(("edit", "key"), BAD_SAMPLER[:12], ids=_ids(BAD_SAMPLER[:12]))
def test_an_iterable_dataset_refuses_an_edited_state(
    uri: str, edit: dict[str, Any], key: str
) -> None:
    """Its own load_state_dict in the main process, and StatefulDataLoader with 0 workers."""
    ds = FerroIterableDataset(uri, batch_size=B, **META)
    state = ds.state_dict()
    bad = {**state, "sampler": _edit(state["sampler"], edit)}
    _refused(ds.load_state_dict, bad, key)
    assert flat(torch.utils.data.DataLoader(ds, batch_size=None)) == _epoch(uri, 0)

    _, saved = _saved(lambda: _iterable_loader(0, uri))
    saved = copy.deepcopy(saved)
    saved["dataset_state"]["sampler"] = _edit(saved["dataset_state"]["sampler"], edit)
    resumed = _iterable_loader(0, uri)
    resumed.load_state_dict(saved)
    with pytest.raises(LoaderStateError, match=key.replace(".", r"\.")):
        iter(resumed)  # torchdata loads the dataset's state when the iterator starts


#: Edits of a DataLoader worker's state (worker 0 of 2, after 2 of its batches).
BAD_WORKER: list[tuple[dict[str, Any], str]] = [
    ({"batches": -5}, "batches"),  # resumed 2 workers with 40 of 80 items repeated
    ({"batches": True}, "batches"),
    ({"batches": 6}, "batches"),  # worker 0 has 5 batches of the epoch's 10
    ({"batches": 1.0}, "batches"),
    ({"worker": 5}, "worker"),
    ({"worker": 1}, "worker"),  # worker 1's position handed to worker 0
    ({"num_workers": 3}, "num_workers"),
    ({"num_workers": 10**6}, "num_workers"),
    ({"batch_size": 4}, "batch_size"),  # batches counted in another size
    ({"batches": None}, "batches"),
    ({"first": 2}, "first"),  # the worker that builds a pass's first batch
    ({"first": "1"}, "first"),
    ({"extra": 0}, "extra"),
    ({"sampler": {"consumed": -16}}, "sampler.consumed"),  # was a raw IndexError
    ({"sampler": {"consumed": "16"}}, "sampler.consumed"),
    ({"sampler": {"epoch": -1}}, "sampler.epoch"),
    ({"sampler": {"seed": -1}}, "sampler.seed"),
]


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
@pytest.mark.parametrize(("edit", "key"), BAD_WORKER, ids=_ids(BAD_WORKER))
def test_a_dataloader_worker_refuses_an_edited_state(
    uri: str, edit: dict[str, Any], key: str
) -> None:
    head, saved = _saved(lambda: _iterable_loader(2, uri))
    workers = saved["_snapshot"]["_worker_snapshots"]
    mine = workers["worker_0"]["dataset_state"]
    assert (mine["worker"], mine["num_workers"], mine["batches"]) == (0, 2, 2)
    bad = copy.deepcopy(saved)
    state = bad["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    if "sampler" in edit:
        state["sampler"] = _edit(state["sampler"], edit["sampler"])
    else:
        bad["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"] = _edit(state, edit)
    resumed = _iterable_loader(2, uri)
    resumed.load_state_dict(bad)
    # the worker's load_state_dict refuses it; StatefulDataLoader raises it when its
    # iterator starts, before any batch
    with pytest.raises(LoaderStateError, match=key.replace(".", r"\.")):
        next(iter(resumed))

    resumed = _iterable_loader(2, uri)  # the state as saved resumes exactly
    resumed.load_state_dict(saved)
    rest = flat(resumed)
    assert sorted(head + rest) == sorted(_epoch(uri, 0))
    assert not [s for s, c in Counter(head + rest).items() if c > 1]


BAD_MAP: list[tuple[dict[str, Any], str]] = [
    ({"consumed": -8}, "sampler.consumed"),
    ({"consumed": "16"}, "sampler.consumed"),
    ({"consumed": 1 + N}, "sampler.consumed"),
    ({"seed": -1}, "sampler.seed"),
    ({"epoch": True}, "sampler.epoch"),
    ({"mode": None}, "sampler.mode"),
]


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("edit", "key"), BAD_MAP, ids=_ids(BAD_MAP))
def test_a_map_style_sampler_refuses_an_edited_state(
    uri: str, workers: int, edit: dict[str, Any], key: str
) -> None:
    """FerroTorchDataset's sampler: StatefulDataLoader hands it the state in the main
    process, whatever the workers."""

    def make() -> Any:
        ds = FerroTorchDataset(uri, **META)
        extra = FORK if workers else {}
        return StatefulDataLoader(
            ds, batch_size=B, sampler=ds.sampler(), num_workers=workers, **extra
        )

    _, saved = _saved(make, stop=2)
    bad = copy.deepcopy(saved)
    main = bad["_snapshot"]["_main_snapshot"] if workers else bad
    sampler_state = main["_sampler_iter_state"]["sampler_state"]
    assert sampler_state["consumed"] == 2 * B
    main["_sampler_iter_state"]["sampler_state"] = _edit(sampler_state, edit)
    resumed = make()
    resumed.load_state_dict(bad)
    with pytest.raises(LoaderStateError, match=key.split(".")[1]):
        next(iter(resumed))


def test_an_iterable_dataset_resumes_a_streaming_state_in_its_lanes(
    make_dataset: Any,
) -> None:
    """A streaming state brings its lanes to the iterable dataset, as to make_loader's
    sampler (the dataset kept its own and resumed into another order)."""
    src = make_dataset(60, shard_size=1 << 11)
    kw: dict[str, Any] = {"meta": ["label"], "streaming": True, "shuffle_buffer": 16, "seed": 5}
    saver = FerroIterableDataset(src, batch_size=4, world_size=2, rank=0, **kw)
    it = iter(torch.utils.data.DataLoader(saver, batch_size=None))
    next(it)
    state = saver.state_dict()
    assert state["sampler"]["lanes"] == 2
    want = make_loader(src, batch_size=4, out="numpy", **kw)  # one rank now: lanes=1
    want.load_state_dict(state)
    resumed = FerroIterableDataset(src, batch_size=4, **kw)
    resumed.load_state_dict(state)
    assert resumed._sampler.lanes == want.sampler.lanes == 2
    assert flat(torch.utils.data.DataLoader(resumed, batch_size=None)) == flat(want)


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
def test_a_bucketed_epoch_finished_by_workers_reloads(make_dataset: Any) -> None:
    """With `drop_last` a bucketed epoch has fewer items than the dataset: the state the
    main process gives after its workers finished it is at that epoch's end."""
    src = make_dataset(43)
    kw: dict[str, Any] = {"meta": ["label"], "bucket_by": "label", "buckets": 3}
    ds = FerroIterableDataset(src, batch_size=4, drop_last=True, **kw)
    assert ds._sampler.epoch_items < 43
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, **FORK)
    assert len(flat(dl)) == ds._sampler.epoch_items
    state = ds.state_dict()
    assert state["sampler"]["consumed"] == ds._sampler.epoch_items
    resumed = FerroIterableDataset(src, batch_size=4, drop_last=True, **kw)
    resumed.load_state_dict(state)  # the end of epoch 0: the next pass is epoch 1
    ref = make_loader(src, batch_size=4, drop_last=True, out="numpy", **kw)
    ref.set_epoch(1)
    assert flat(torch.utils.data.DataLoader(resumed, batch_size=None)) == flat(ref)
