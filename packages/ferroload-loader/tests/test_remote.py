"""Loading from an object store (moto S3): streaming through the block cache with the
known-order read-ahead."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferroload_format import Dataset, Writer
from ferroload_loader import make_loader
from ferroload_loader._readahead import ReadAhead, plan_blocks
from ferroload_loader._source import resolve_source
from ferroload_store import BlockCache
from ferroload_testing import FaultProxy, MotoServer

pytestmark = pytest.mark.s3

BS = 16 << 10


def index_png(i: int, size: tuple[int, int]) -> bytes:
    """A PNG whose pixels spell its index (R = i % 256, G = i // 256), padded with noise
    rows so that shards span many cache blocks."""
    import io

    from PIL import Image

    img = np.random.default_rng(i).integers(0, 256, (*size, 3), dtype=np.uint8)
    img[0, 0] = (i % 256, i // 256, 7)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def decoded_index(images: np.ndarray) -> list[int]:
    return (images[:, 0, 0, 0].astype(int) + 256 * images[:, 0, 0, 1].astype(int)).tolist()


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="module")
def remote(moto: MotoServer) -> tuple[str, dict[str, Any]]:
    """600 samples (index-spelling PNGs with some padding so shards span many blocks)
    in shards of ~200 KiB, on S3."""
    options = moto.storage_options("loader")
    uri = f"s3://loader/{uuid.uuid4().hex}"
    with Writer(uri, "remote", shard_size=200 << 10, storage_options=options) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(600):
            w.add(f"s{i:05d}", {"image": index_png(i, (24, 24))}, {"label": i % 5})
    return uri, options


def cache(tmp_path: Path, name: str = "cache", max_bytes: int = 256 << 20) -> BlockCache:
    return BlockCache(tmp_path / name, max_bytes=max_bytes, block_size=BS)


def epoch(dl: Any) -> list[int]:
    """The samples of one epoch, by index (each image checked against its sample id)."""
    out = []
    for b in dl:
        got = decoded_index(np.asarray(b["image"]))
        assert got == [int(s[1:]) for s in b["sample_id"]]
        out.extend(got)
    return out


def test_streaming_from_s3_delivers_every_sample_once_in_the_local_order(
    remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, options = remote
    kw: dict[str, Any] = {"batch_size": 32, "images": ["image"], "resize": (24, 24), "meta": ["label"],
                          "out": "numpy", "seed": 3, "streaming": True}  # fmt: skip
    dl = make_loader(uri, storage_options=options, cache=cache(tmp_path), **kw)
    got = epoch(dl)
    assert sorted(got) == list(range(600))
    # the order is a function of (seed, epoch) and the layout: the same as a local copy's
    ds = Dataset.open(uri, storage_options=options, cache=None)
    assert len(ds) == 600
    local = tmp_path / "local"
    with Writer(local, "remote", shard_size=200 << 10) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(600):
            w.add(f"s{i:05d}", {"image": index_png(i, (24, 24))}, {"label": i % 5})
    assert epoch(make_loader(str(local), **kw)) == got


def test_first_batch_comes_before_the_first_shard_is_read_whole(
    remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, options = remote
    dl = make_loader(
        uri, batch_size=8, images=["image"], resize=(24, 24), out="numpy", streaming=True, shuffle_buffer=8,
        storage_options=options, cache=cache(tmp_path), readahead_bytes=2 * BS,
    )  # fmt: skip
    store = dl.source.datasets[0].store
    shard_size = min(s.size for s in dl.source.datasets[0].manifest.shards)
    store.stats.reset()
    it = iter(dl)
    next(it)
    assert store.stats.bytes_read < shard_size
    dl.close()


def _refuse_whole_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-column reads of the index (O(items)) fail when ferroload_loader calls them."""
    import sys

    for name in ("shard_of", "preload", "sizes", "offsets"):
        original = getattr(Dataset, name)

        def guarded(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            assert not caller.startswith("ferroload_loader"), f"{caller} called {_name}"
            return _original(*args, **kw)

        monkeypatch.setattr(Dataset, name, guarded)


def test_readahead_fetches_in_order_within_budget_and_marks_blocks_cold(
    remote: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, options = remote
    _refuse_whole_columns(monkeypatch)
    c = cache(tmp_path)
    dl = make_loader(
        uri, batch_size=16, images=["image"], resize=(24, 24), out="numpy", streaming=True,
        storage_options=options, cache=c, readahead_bytes=4 * BS,
    )  # fmt: skip
    store = dl.source.datasets[0].store
    count, batch_of = dl._rank_batches()
    batches = [batch_of(k) for k in range(count)]
    plan = plan_blocks(resolve_source(dl.source.datasets[0]), ["image"], batches)
    assert plan is not None
    assert (np.diff(plan.first) >= 0).all()  # in order of first use
    assert (plan.last >= plan.first).all()
    total = plan.total_bytes
    assert total == sum(s.size for s in dl.source.datasets[0].manifest.shards)
    dl.source.datasets[0].column("sample_id")  # index columns: read before counting
    store.stats.reset()
    got = epoch(dl)
    assert sorted(got) == list(range(600))
    # every block fetched once, whoever fetched it
    assert store.stats.bytes_read == total
    # after the epoch every shard block was read for the last time: all of them are cold
    # (the index part's blocks, read once at open, are not the loader's to judge)
    entries = [p for p in c.directory.rglob("*") if p.is_file() and len(p.name) == 32]
    assert sum(p.stat().st_mtime == 0 for p in entries) == len(plan)


def test_second_epoch_reads_the_cache_without_requests(
    remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, options = remote
    dl = make_loader(uri, batch_size=50, images=["image"], resize=(24, 24), out="numpy", streaming=True,
                     storage_options=options, cache=cache(tmp_path))  # fmt: skip
    store = dl.source.datasets[0].store
    first = epoch(dl)
    store.stats.reset()
    dl.set_epoch(1)
    second = epoch(dl)
    assert sorted(second) == sorted(first) and second != first
    assert store.stats.get_requests == 0


def test_streaming_survives_faults_and_latency(
    moto: MotoServer, remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, _ = remote
    from ferroload_store import IOOptions

    with FaultProxy(*moto.address, delay=0.01, error_rate=0.1, drop_rate=0.05, seed=4) as proxy:
        options = moto.storage_options(endpoint=proxy.endpoint)
        ds = Dataset.open(uri, storage_options=options, cache=cache(tmp_path),
                          io=IOOptions(retries=10, backoff=0.001))  # fmt: skip
        dl = make_loader(
            ds, batch_size=40, images=["image"], resize=(24, 24), out="numpy", streaming=True
        )
        assert sorted(epoch(dl)) == list(range(600))
        assert ds.store.stats.retries > 0
        assert proxy.stats().errors_injected + proxy.stats().drops_injected > 0


def test_resume_mid_epoch_from_s3(remote: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    uri, options = remote
    kw: dict[str, Any] = {"batch_size": 20, "images": ["image"], "resize": (24, 24), "out": "numpy",
                          "streaming": True, "storage_options": options, "seed": 9}  # fmt: skip
    full = epoch(make_loader(uri, cache=cache(tmp_path, "a"), **kw))
    dl = make_loader(uri, cache=cache(tmp_path, "b"), **kw)
    it = iter(dl)
    head = [i for _ in range(7) for i in decoded_index(np.asarray(next(it)["image"]))]
    state = dl.state_dict()
    dl.close()
    resumed = make_loader(uri, cache=cache(tmp_path, "b"), **kw)
    resumed.load_state_dict(state)
    assert head + epoch(resumed) == full


def test_opening_and_preloading_the_index_takes_a_few_requests(
    remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, options = remote
    ds = Dataset.open(uri, storage_options=options, cache=cache(tmp_path))
    opened = ds.store.stats.snapshot()
    assert opened["get_requests"] <= 3  # hint + manifest
    ds.preload(["sample_id", "label", "image"])
    st = ds.store.stats.snapshot()
    # per index part: the footer, then every asked column chunk in one coalesced fetch;
    # the shard column (dictionary-encoded) the same way
    assert st["get_requests"] - opened["get_requests"] <= 4 * len(ds.manifest.index_parts)
    # sizes come from the manifest; one HEAD per part reads its ETag, which keys the block
    # cache (a dataset re-created at this URI never serves this one's cached index)
    assert st["head_requests"] - opened["head_requests"] <= len(ds.manifest.index_parts)
    local = ds.to_table(["sample_id", "label"]).to_pylist()
    assert [r["sample_id"] for r in local] == [f"s{i:05d}" for i in range(600)]
    assert [r["label"] for r in local] == [i % 5 for i in range(600)]


def _add_layer(ds: Dataset) -> Dataset:
    """A layer with a `thumb` image modality (the index PNG again, smaller) and a
    `double` metadata column, for every other sample."""
    import pyarrow as pa

    from ferroload_format import LayerWriter, Modality

    w = LayerWriter(ds, "extra", identity="t1", columns={"double": pa.int64()},
                    modalities=[Modality("thumb", "png", "tensor", "image")])  # fmt: skip
    rows = np.arange(0, len(ds), 2, dtype=np.int64)
    w.write_partition(0, rows, {"double": [int(r) * 2 for r in rows]},
                      {"thumb": [index_png(int(r), (8, 8)) for r in rows]})  # fmt: skip
    return w.commit(1)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_loader_reads_layer_modalities_and_columns(
    where: str, remote: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    uri, options = remote
    remote_ = where == "s3"
    src = f"{uri}-layer-{uuid.uuid4().hex[:6]}" if remote_ else str(tmp_path / "local")
    opts = options if remote_ else None
    with Writer(src, "layered", shard_size=200 << 10, storage_options=opts) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(600):
            w.add(f"s{i:05d}", {"image": index_png(i, (24, 24))}, {"label": i % 5})
    ds = Dataset.open(src, storage_options=opts, cache=cache(tmp_path) if remote_ else None)
    layered = _add_layer(ds)
    dl = make_loader(layered, batch_size=50, images=["thumb"], resize=(8, 8), meta=["double"],
                     out="numpy", streaming=True)  # fmt: skip
    seen = 0
    for b in dl:
        ids = [int(s[1:]) for s in b["sample_id"]]
        present = b["thumb_present"]
        assert present.tolist() == [i % 2 == 0 for i in ids]
        got = decoded_index(np.asarray(b["thumb"])[present])
        assert got == [i for i in ids if i % 2 == 0]
        assert [d for d, i in zip(b["double"], ids, strict=True) if i % 2 == 0] == [
            2 * i for i in ids if i % 2 == 0
        ]
        seen += len(ids)
    assert seen == 600


def test_a_dataset_recreated_at_the_same_uri_never_serves_the_old_index(
    moto: MotoServer, tmp_path: Path
) -> None:
    options = moto.storage_options("loader")
    uri = f"s3://loader/{uuid.uuid4().hex}"
    shared = cache(tmp_path)

    def write(label: int) -> None:
        with Writer(uri, "recreated", storage_options=options) as w:
            w.declare("image", "png", "tensor", "image")
            for i in range(8):
                w.add(f"s{i:05d}", {"image": index_png(i, (8, 8))}, {"label": label})

    write(0)
    first = Dataset.open(uri, storage_options=options, cache=shared)
    assert first.subset("label = 1", return_indices=True).tolist() == []
    # delete the whole dataset, then write one with the same shape and other labels: the
    # manifest's version tags and sizes repeat, the objects' ETags do not
    for obj in first.store.list(""):
        first.store.delete(obj.path)
    write(1)
    again = Dataset.open(uri, storage_options=options, cache=shared)
    assert again.subset("label = 1", return_indices=True).tolist() == list(range(8))


def test_a_dataset_recreated_at_the_same_memory_uri_serves_the_new_index() -> None:
    uri = f"memory://recreated-{uuid.uuid4().hex}/ds"

    def write(label: int) -> None:
        with Writer(uri, "recreated") as w:
            w.declare("image", "png", "tensor", "image")
            for i in range(8):
                w.add(f"s{i:05d}", {"image": index_png(i, (8, 8))}, {"label": label})

    write(0)
    first = Dataset.open(uri)
    assert first.subset("label = 1", return_indices=True).tolist() == []
    for obj in first.store.list(""):
        first.store.delete(obj.path)
    write(1)
    assert Dataset.open(uri).subset("label = 1", return_indices=True).tolist() == list(range(8))


class _RecordingStore:
    """What ReadAhead calls on a store, recorded."""

    block_size = BS

    def __init__(self) -> None:
        self.prefetched: list[int] = []
        self.cold: list[int] = []
        self.log: list[tuple[str, int]] = []  # ("locate" | "fetch", items or blocks)

    def prefetch_blocks(self, path: str, blocks: Any, **_: Any) -> None:
        self.prefetched += np.asarray(blocks).tolist()
        self.log.append(("fetch", len(blocks)))

    def mark_cold_blocks(self, path: str, blocks: Any, **_: Any) -> None:
        self.cold += np.asarray(blocks).tolist()


class _BlockPerItem:
    """A dataset stand-in whose item i fills block i of one shard."""

    def __init__(self, store: _RecordingStore, n: int) -> None:
        self.store = store
        self.n = n
        self.located = 0

    def locate(self, name: str, pos: Any) -> Any:
        from types import SimpleNamespace

        pos = np.asarray(pos, dtype=np.int64)
        self.located += len(pos)
        self.store.log.append(("locate", len(pos)))
        return SimpleNamespace(present=np.ones(len(pos), bool), shard=np.zeros(len(pos), np.int32),
                               offset=pos * BS, length=np.full(len(pos), BS))  # fmt: skip

    def shard_ref(self, code: int) -> tuple[str, int, str]:
        return "shards/a.tar", self.n * BS, "v"


def _readahead(batches: list[list[int]], budget: int, **kw: Any) -> tuple[ReadAhead, Any]:
    from ferroload_loader._source import ResolvedSource

    store = _RecordingStore()
    ds = _BlockPerItem(store, 1 + max((i for b in batches for i in b), default=0))
    source = ResolvedSource([ds], np.zeros(1, np.int64))  # type: ignore[list-item]
    arrays = [np.asarray(b, dtype=np.int64) for b in batches]
    return ReadAhead(source, ["image"], arrays.__getitem__, len(arrays), budget, **kw), ds


def _wait_for(condition: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_blocks_the_readahead_never_fetched_are_marked_cold_after_their_last_use() -> None:
    """When the read-ahead falls behind, the batch builder fetches blocks itself; they
    must still turn cold after their last batch, or they crowd the cache."""
    # batch 0 reads block 0, batch 5 blocks 1 and 2, batch 6 block 3
    ahead, ds = _readahead([[0], [], [], [], [], [1, 2], [3]], budget=BS)
    store = ds.store
    try:
        deadline = time.monotonic() + 10
        while store.prefetched != [0] and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert store.prefetched == [0]  # room for one block: it waits before block 1
        ahead.done(5)  # batch 5 read blocks 1 and 2 (the builder fetched them)
        _wait_for(lambda: {0, 1, 2} <= set(store.cold))
        assert 3 not in store.cold
    finally:
        ahead.stop()


def test_the_plan_is_a_window_and_reuse_beyond_it_is_not_marked_cold_early() -> None:
    """Batches are planned a window ahead of the one marked: a block read again within
    the window stays warm; the plan never covers the whole epoch at once."""
    n = 200
    # block 0 is read by batch 0 and again by batch 3; every other batch reads a new block
    batches = [[0]] + [[k] for k in range(1, 3)] + [[0]] + [[k] for k in range(3, n)]
    ahead, ds = _readahead(batches, budget=2 * BS, horizon=4)
    try:
        ahead.done(0)
        assert 0 not in ds.store.cold  # batch 3 reads it again: within the planned window
        for k in range(1, 4):
            ahead.done(k)
        _wait_for(lambda: 0 in ds.store.cold)  # the plan reached past batch 3 + 4
        for k in range(4, len(batches)):
            ahead.done(k)  # the last one completes the plan: every block is marked
        assert sorted(ds.store.cold) == list(range(n))  # every block once cold
        assert ahead.planned_peak < 20  # a window of blocks, not the epoch's 200
    finally:
        ahead.stop()


def test_the_first_fetch_waits_for_its_own_batch_only() -> None:
    """A long cold-marking horizon (two shuffle windows) is planned in the background:
    the first batch's blocks are fetched after locating that batch alone."""
    ahead, ds = _readahead([[k] for k in range(2000)], budget=4 * BS, horizon=1000)
    try:
        _wait_for(lambda: ("fetch", 1) in ds.store.log)
        log = ds.store.log
        first = next(i for i, (what, _) in enumerate(log) if what == "fetch")
        assert sum(n for what, n in log[:first] if what == "locate") == 1
    finally:
        ahead.stop()
