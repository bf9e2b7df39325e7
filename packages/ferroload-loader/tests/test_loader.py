from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from ferroload_codec import DecodeError
from ferroload_format import ColumnNotFoundError, Dataset
from ferroload_loader import FerroLoader, make_loader, mix

from .conftest import MakeDataset, decoded_index


def ids(loader: FerroLoader) -> list[list[str]]:
    return [list(b["sample_id"]) for b in loader]


def numpy_loader(uri: object, **kw: object) -> FerroLoader:
    opts: dict[str, object] = {
        "batch_size": 16,
        "images": ["image"],
        "meta": ["label", "name"],
        "resize": (12, 16),
        "out": "numpy",
        "seed": 0,
    }
    opts.update(kw)
    return make_loader(uri, **opts)  # type: ignore[arg-type]


def test_batches_hold_the_right_pixels_and_metadata(make_dataset: MakeDataset) -> None:
    dl = numpy_loader(make_dataset(50), batch_size=8)
    assert len(dl) == 7
    seen = []
    for b in dl:
        idx = [int(s[1:]) for s in b["sample_id"]]
        assert decoded_index(b["image"]) == idx
        assert b["image"].dtype == np.uint8 and b["image"].shape[1:] == (12, 16, 3)
        assert b["label"].tolist() == [i % 7 for i in idx]
        assert b["name"] == [f"n{i}" for i in idx]
        assert "image_present" not in b  # every sample has an image
        seen += idx
    assert sorted(seen) == list(range(50))
    assert dl.stats.batches == 7 and dl.stats.samples == 50


def test_the_order_is_deterministic_and_changes_per_epoch(make_dataset: MakeDataset) -> None:
    uri = make_dataset(64)
    a, b = numpy_loader(uri), numpy_loader(uri)
    first = ids(a)
    assert first == ids(b)
    a.set_epoch(1)
    second = ids(a)
    assert second != first
    assert ids(b) == second  # a finished pass moves to the next epoch by itself
    assert ids(numpy_loader(uri, seed=1)) != first
    assert ids(numpy_loader(uri, threads=1)) == ids(numpy_loader(uri, threads=2)) == first


def test_ranks_share_the_epoch(make_dataset: MakeDataset) -> None:
    uri = make_dataset(60)
    per_rank = [
        sum(ids(numpy_loader(uri, rank=r, world_size=3, batch_size=7)), []) for r in range(3)
    ]
    assert [len(p) for p in per_rank] == [20, 20, 20]
    assert sorted(sum(per_rank, [])) == [f"s{i:05d}" for i in range(60)]
    # rank r holds items r, r+3, … of the single-process order
    single = sum(ids(numpy_loader(uri, batch_size=60)), [])
    assert per_rank[1] == single[1::3]


@pytest.mark.parametrize(("world2", "batch2"), [(1, 16), (2, 5), (3, 8)])
def test_resume_mid_epoch_continues_exactly(
    make_dataset: MakeDataset, world2: int, batch2: int
) -> None:
    uri = make_dataset(96)
    first = [numpy_loader(uri, rank=r, world_size=2, batch_size=6, seed=4) for r in range(2)]
    first[0].set_epoch(3)
    first[1].set_epoch(3)
    iters = [iter(dl) for dl in first]
    done = [s for _ in range(5) for it in iters for s in next(it)["sample_id"]]
    state = first[0].state_dict()
    assert state == first[1].state_dict()
    for dl in first:
        dl.close()
    rest = []
    for r in range(world2):
        dl = numpy_loader(uri, rank=r, world_size=world2, batch_size=batch2, seed=4)
        dl.load_state_dict(state)
        assert dl.epoch == 3
        rest += sum(ids(dl), [])
    everything = sorted(done + rest)
    assert everything[: len(set(everything))] == sorted(set(everything))
    assert set(everything) == {f"s{i:05d}" for i in range(96)}
    assert len(done) + len(rest) == 96 + (-(96 - 60) % world2)  # padding only at the very end


def test_resuming_keeps_the_position_through_set_epoch(make_dataset: MakeDataset) -> None:
    uri = make_dataset(40)
    dl = numpy_loader(uri, batch_size=10)
    it = iter(dl)
    head = next(it)["sample_id"]
    state = dl.state_dict()
    dl.close()
    again = numpy_loader(uri, batch_size=10)
    again.load_state_dict(state)
    again.set_epoch(0)  # Lightning does this on resume: it must not rewind
    rest = sum(ids(again), [])
    assert sorted(head + rest) == [f"s{i:05d}" for i in range(40)]
    fresh = numpy_loader(uri, batch_size=10)
    fresh.set_epoch(1)
    assert ids(again) == ids(fresh)  # then the next epoch


def test_missing_modalities_get_a_mask(make_dataset: MakeDataset) -> None:
    dl = numpy_loader(make_dataset(30, missing=(3, 4, 20)), batch_size=30, shuffle=False)
    (b,) = list(dl)
    assert b["image_present"].tolist() == [i not in (3, 4, 20) for i in range(30)]
    assert not b["image"][3].any() and b["image"][5].any()


def test_decode_failures_follow_on_error(
    make_dataset: MakeDataset, caplog: pytest.LogCaptureFixture
) -> None:
    uri = make_dataset(30, corrupt=(7, 12))
    with pytest.raises(DecodeError, match=r"s000(07|12)"):
        list(numpy_loader(uri, batch_size=30))
    dl = numpy_loader(uri, batch_size=10, on_error="skip")
    got = sum(ids(dl), [])
    assert sorted(got) == [f"s{i:05d}" for i in range(30) if i not in (7, 12)]
    assert dl.stats.skipped == 2 and set(dl.stats.skipped_ids) == {"s00007", "s00012"}
    warn = numpy_loader(uri, batch_size=10, on_error="warn")
    list(warn)
    assert sum("left a sample out" in r.message for r in caplog.records) == 2


def test_where_and_dataset_views(make_dataset: MakeDataset) -> None:
    uri = make_dataset(50)
    got = sum(ids(numpy_loader(uri, where="label = 3")), [])
    assert sorted(got) == [f"s{i:05d}" for i in range(50) if i % 7 == 3]
    view = Dataset.open(uri).take([5, 9, 11])
    assert sorted(sum(ids(numpy_loader(view)), [])) == ["s00005", "s00009", "s00011"]


def test_streaming_order_is_shard_local_deterministic_and_complete(
    make_dataset: MakeDataset,
) -> None:
    uri = make_dataset(200, shard_size=2048)  # a few samples per shard
    dl = numpy_loader(uri, streaming=True, shuffle_buffer=16, batch_size=20)
    order = sum(ids(dl), [])
    assert sorted(order) == [f"s{i:05d}" for i in range(200)]
    assert order == sum(
        ids(numpy_loader(uri, streaming=True, shuffle_buffer=16, batch_size=20)), []
    )
    assert order != [f"s{i:05d}" for i in range(200)]
    assert dl.sampler.mode == "shard_block"


def test_mixtures_draw_by_weight_and_resume(make_dataset: MakeDataset) -> None:
    a, b = make_dataset(40, name="a"), make_dataset(40, name="b")
    m = mix([a, b], [3, 1], num_samples=200)
    dl = numpy_loader(m, batch_size=20, meta=["label"])
    got = ids(dl)
    assert len(got) == 10
    ds_a = Dataset.open(a)
    assert ds_a.name == "a"
    # ids are shared between the two datasets; count via the loader's items instead
    first_src = (dl.sampler.global_order() < 40).mean()
    assert 0.65 < first_src < 0.85
    dl2 = numpy_loader(mix([a, b], [3, 1], num_samples=200), batch_size=20, meta=["label"])
    it = iter(dl2)
    head = [next(it)["sample_id"] for _ in range(3)]
    state = dl2.state_dict()
    dl2.close()
    dl3 = numpy_loader(mix([a, b], [3, 1], num_samples=200), batch_size=20, meta=["label"])
    dl3.load_state_dict(state)
    assert head + ids(dl3) == got


def test_prefetch_stays_within_its_budget(make_dataset: MakeDataset) -> None:
    uri = make_dataset(120)
    per_batch = 10 * (12 * 16 * 3 + 8 + 8 + 64)  # images + label + name + ids, per 10 samples
    dl = numpy_loader(uri, batch_size=10, prefetch_bytes=3 * per_batch)
    for _ in dl:
        time.sleep(0.01)  # a slow consumer: the prefetcher runs ahead, up to the budget
    assert per_batch <= dl.stats.peak_prefetch_bytes <= 3 * per_batch
    tiny = numpy_loader(uri, batch_size=10, prefetch_bytes=0)  # still makes progress
    assert len(sum(ids(tiny), [])) == 120
    assert tiny.stats.peak_prefetch_bytes <= per_batch


def test_breaking_out_stops_the_prefetch_thread(make_dataset: MakeDataset) -> None:
    uri = make_dataset(200)
    before = threading.active_count()
    dl = numpy_loader(uri, batch_size=5)
    for i, _ in enumerate(dl):
        if i == 2:
            break
    dl.close()
    deadline = time.monotonic() + 5
    while (
        any(t.name in ("ferroload-prefetch", "ferroload-read") for t in threading.enumerate())
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert not any(
        t.name in ("ferroload-prefetch", "ferroload-read") for t in threading.enumerate()
    )
    assert threading.active_count() <= before + 2  # decode pool threads may stay


def test_torch_output(make_dataset: MakeDataset) -> None:
    torch = pytest.importorskip("torch", reason="the torch extra is installed in the workspace")
    dl = make_loader(
        make_dataset(20), batch_size=8, images=["image"], meta=["label", "score"], resize=(12, 16)
    )
    b = next(iter(dl))
    assert isinstance(b["image"], torch.Tensor) and b["image"].dtype == torch.uint8
    assert b["label"].dtype == torch.int64 and b["score"].dtype == torch.float64
    assert isinstance(b["sample_id"], list)
    dl.close()


def test_numpy_output_needs_no_torch(make_dataset: MakeDataset) -> None:
    uri = make_dataset(10)
    code = f"""
import sys
sys.modules["torch"] = None  # torch is "not installed"
from ferroload_loader import make_loader
dl = make_loader({uri!r}, batch_size=4, images=["image"], resize=8, out="numpy")
print(sum(len(b["sample_id"]) for b in dl))
try:
    make_loader({uri!r}, batch_size=4, out="torch")
except ImportError as e:
    print("ImportError", "pip install" in str(e))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["10", "ImportError", "True"]


def test_make_loader_preloads_its_image_codecs(make_dataset: MakeDataset) -> None:
    """`make_loader` starts loading the libraries its image modalities decode through
    (PNG here: libspng and libtiff, no JPEG library) before the first batch reads its
    index; a loader without images loads none."""
    uri = make_dataset(10)
    code = f"""
import sys
from ferroload_codec import _backends
from ferroload_loader import make_loader
make_loader({uri!r}, batch_size=4, meta=["label"], out="numpy")
print(len(_backends._preloading))
dl = make_loader({uri!r}, batch_size=4, images=["image"], resize=8, out="numpy")
_backends._join_preloads()
print(sorted(m for m in ("imagecodecs._spng", "imagecodecs._tiff", "turbojpeg", "simplejpeg")
             if m in sys.modules))
print(sum(len(b["sample_id"]) for b in dl))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["0", "['imagecodecs._spng', 'imagecodecs._tiff']", "10"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"out": "jax"}, ValueError, "out"),
        ({"crop": "sideways"}, ValueError, "crop"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"resize": None}, ValueError, "needs an output size"),
        ({"images": ["nope"]}, ColumnNotFoundError, "no modality 'nope'"),
        ({"images": ["label"]}, ColumnNotFoundError, "pass it in meta"),
        ({"meta": ["nope"]}, ColumnNotFoundError, "no metadata column 'nope'"),
        ({"meta": ["label", "label"]}, ValueError, "once"),
        ({"audio": ["image"]}, ValueError, "fixed length"),
        ({"video": {"image": {"num_frames": None}}}, ValueError, "fixed shape"),
        ({"images": "image"}, TypeError, "list of names"),
        ({"streaming": True, "seed": "x"}, ValueError, "seed"),
    ],
)
def test_bad_options(
    make_dataset: MakeDataset, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    uri = make_dataset(5)
    with pytest.raises(error, match=match):
        numpy_loader(uri, **kwargs)


def test_bad_sources() -> None:
    with pytest.raises(TypeError, match="source must be"):
        make_loader(42, batch_size=2, out="numpy")
    with pytest.raises(ValueError, match="weights"):
        mix(["a"], [1, 2])


def _wav(seconds: float, rate: int = 8000, channels: int = 2) -> bytes:
    import io

    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    x = np.stack([np.sin(2 * np.pi * 440 * t)] * channels, axis=1).astype(np.float32) * 0.5
    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _video(frames: int = 12, size: int = 32) -> bytes:
    import io

    av = pytest.importorskip("av", reason="the video extra is installed in the workspace")
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="avi") as c:
        s = c.add_stream("mjpeg", rate=10)
        s.width = s.height = size
        s.pix_fmt = "yuvj420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(
                np.full((size, size, 3), i * 20, np.uint8), format="rgb24"
            )
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return buf.getvalue()


def _av_dataset(tmp_path: object, n: int) -> str:
    """`n` samples, each a WAV clip of 0.5 + i/10 s (`audio`) and an AVI clip (`clip`)."""
    from ferroload_format import Writer

    root = str(tmp_path) + "/av"  # type: ignore[operator]
    with Writer(root, "av") as w:
        w.declare("audio", "wav", "tensor", "audio")
        w.declare("clip", "avi", "tensor", "video")
        for i in range(n):
            w.add(f"a{i}", {"audio": _wav(0.5 + i / 10), "clip": _video()}, {"label": i})
    return root


def test_audio_and_video_fields(tmp_path: object) -> None:
    root = _av_dataset(tmp_path, 6)
    dl = make_loader(
        root, batch_size=3, out="numpy", meta=["label"], seed=1,
        audio={"audio": {"length": 2000, "sample_rate": 4000}},
        video={"clip": {"num_frames": 4, "size": 16}},
    )  # fmt: skip
    batches = list(dl)
    b = batches[0]
    assert b["audio"].shape == (3, 1, 2000) and b["audio"].dtype == np.float32
    assert b["clip"].shape == (3, 4, 16, 16, 3)
    # uniform frames 4 of 12: increasing grey levels
    assert (np.diff(b["clip"][0, :, 8, 8, 0].astype(int)) > 0).all()
    again = list(make_loader(
        root, batch_size=3, out="numpy", meta=["label"], seed=1,
        audio={"audio": {"length": 2000, "sample_rate": 4000}},
        video={"clip": {"num_frames": 4, "size": 16}},
    ))  # fmt: skip
    # random audio crops are seeded per (seed, epoch, item): the same run gives the same crops
    assert all(np.array_equal(x["audio"], y["audio"]) for x, y in zip(batches, again, strict=True))
    # audio alone: the image options would do nothing, as without any field
    with pytest.raises(ValueError, match=r"resize=16, hflip=0\.5 shape decoded images"):
        make_loader(
            root, batch_size=3, out="numpy", resize=16, hflip=0.5,
            audio={"audio": {"length": 2000, "sample_rate": 4000}},
        )  # fmt: skip


def test_payloads_read_whole_are_read_ahead_audio_crops_are_not(
    tmp_path: object, make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a batch is prepared, the payloads its decoders read whole (images, video) go
    to `read_ahead` (large views of mapped shards are read ahead beside decoding); audio
    crops read a part of each clip (their reader reads ahead of each read instead)."""
    import ferroload_loader._fields as fields_module

    seen: list[list[Any]] = []

    def spy(items: Any, *, largest: int) -> None:
        seen.append(list(items))
        assert largest == max(len(v) for v in seen[-1])  # the sizes, from the index

    monkeypatch.setattr(fields_module, "read_ahead", spy)
    list(make_loader(make_dataset(10), batch_size=4, images=["image"], resize=8, out="numpy"))
    assert len(seen) == 3 and sum(map(len, seen)) == 10
    assert all(type(v) is memoryview for batch in seen for v in batch)  # mapped, not copied
    root = _av_dataset(tmp_path, 4)
    seen.clear()
    list(
        make_loader(
            root, batch_size=2, out="numpy", audio={"audio": {"length": 2000, "sample_rate": 4000}}
        )
    )
    assert seen == []
    list(
        make_loader(root, batch_size=2, out="numpy", video={"clip": {"num_frames": 4, "size": 16}})
    )
    assert len(seen) == 2 and sum(map(len, seen)) == 4


def test_video_decodes_on_one_thread_more_than_the_cpus_unless_threads_is_given(
    tmp_path: object,
) -> None:
    """PyAV holds the GIL between packets: a video field's pool has a thread more than the
    image and audio fields' default, and exactly `threads=` when given."""
    import io

    from PIL import Image

    from ferroload_core import available_cpus
    from ferroload_format import Writer

    png = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png, "PNG")
    root = str(tmp_path) + "/v"  # type: ignore[operator]
    with Writer(root, "v") as w:
        w.declare("image", "png", "tensor", "image")
        w.declare("clip", "avi", "tensor", "video")
        w.add("a", {"image": png.getvalue(), "clip": _video()}, {})
    opts: dict[str, Any] = {
        "batch_size": 1, "images": ["image"], "resize": (4, 4),
        "video": {"clip": {"num_frames": 2, "size": 8}},
    }  # fmt: skip
    image, clip = make_loader(root, out="numpy", **opts).fields
    assert image.decoder.pool.threads == available_cpus()  # type: ignore[attr-defined]
    assert clip.pool.threads == available_cpus() + 1  # type: ignore[attr-defined]
    image, clip = make_loader(root, out="numpy", threads=2, **opts).fields
    assert image.decoder.pool.threads == clip.pool.threads == 2  # type: ignore[attr-defined]

    # inside a DataLoader worker: the CPUs shared out among the workers, video one more
    torch = pytest.importorskip("torch", reason="the torch adapters need the torch extra")
    from ferroload_loader.torch import FerroIterableDataset

    class Info:
        num_workers = 2

    ds = FerroIterableDataset(root, **opts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.utils.data, "get_worker_info", lambda: Info())
        ds._pid = None  # as in a forked worker: the fields are built again
        image, clip = ds._runtime()[1]
    per_worker = max(1, available_cpus() // 2)
    assert image.decoder.pool.threads == per_worker  # type: ignore[attr-defined]
    assert clip.pool.threads == per_worker + 1  # type: ignore[attr-defined]


def test_meta_must_be_a_list(make_dataset: MakeDataset) -> None:
    with pytest.raises(TypeError, match="list of column names"):
        numpy_loader(make_dataset(3), meta="label")


def test_length_is_the_whole_epoch_and_batches_are_chosen_lazily(make_dataset: MakeDataset) -> None:
    uri = make_dataset(30)
    dl = numpy_loader(uri, batch_size=8)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    dl.close()
    resumed = numpy_loader(uri, batch_size=8)
    resumed.load_state_dict(state)
    assert (len(resumed), resumed.remaining()) == (4, 3)  # torch/Lightning read len()
    lazy = iter(resumed)  # Lightning builds the iterator, then calls set_epoch
    resumed.set_epoch(1)
    first = next(lazy)["sample_id"]
    fresh = numpy_loader(uri, batch_size=8)
    fresh.set_epoch(1)
    assert first == next(iter(fresh))["sample_id"]
    resumed.close()
    fresh.close()


def _refused_from_the_loader(name: str, original: object) -> object:
    """`original`, except when code of ferroload_loader calls it directly."""

    def guarded(*args: object, **kwargs: object) -> object:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("ferroload_loader"):
            raise AssertionError(f"{caller} called {name}: O(items) on the loader's path")
        return original(*args, **kwargs)  # type: ignore[operator]

    return guarded


@pytest.mark.parametrize(
    "kw", [{}, {"streaming": True, "shuffle_buffer": 8}, {"shuffle": False}, {"mix": True}]
)
def test_the_loader_never_materialises_the_order_or_whole_columns(
    make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch, kw: dict[str, object]
) -> None:
    from ferroload_loader import Sampler

    uri = make_dataset(60, shard_size=2048)
    for name in ("global_order", "indices"):
        monkeypatch.setattr(Sampler, name, _refused_from_the_loader(name, getattr(Sampler, name)))
    for name in ("shard_of", "preload", "sizes", "offsets"):
        monkeypatch.setattr(Dataset, name, _refused_from_the_loader(name, getattr(Dataset, name)))
    source: object = uri
    if kw.pop("mix", False):
        source = mix([uri, uri], [1, 1], num_samples=60)
    dl = numpy_loader(source, batch_size=7, **kw)
    got = sum(ids(dl), [])
    assert len(got) == 60
    if source == uri:
        assert sorted(got) == [f"s{i:05d}" for i in range(60)]


def test_the_loader_reads_the_index_a_window_of_batches_at_a_time(
    make_dataset: MakeDataset,
) -> None:
    dl = numpy_loader(make_dataset(60), batch_size=4)
    got = sum(ids(dl), [])
    assert sorted(got) == [f"s{i:05d}" for i in range(60)]
    assert dl._worker is not None
    window = dl._worker._window
    assert window is not None and 1 <= window.windows <= 4  # growing windows, not 15 reads


def test_batch_items_are_computed_once_a_chunk_at_a_time() -> None:
    import numpy as np

    from ferroload_loader import Sampler
    from ferroload_loader._prefetch import BatchItems

    view = Sampler(100_000, seed=1, rank=1, world_size=3).view()
    items = BatchItems(view, 100, -(-len(view) // 100))
    computed = view.order.computed
    assert np.array_equal(items(0), view.batch(0, 100))
    assert view.order.computed == computed + 200  # the first batch alone (and the reference)
    for k in [1, 5, 81, 82, 333, 334]:
        assert np.array_equal(items(k), view.batch(k, 100))
    computed = view.order.computed
    assert np.array_equal(items(3), view.batch(3, 100))  # from batch 1's chunk: no work
    assert view.order.computed == computed + 100  # (the reference call above only)
    items.forget(81)  # prepared: dropped, and not kept again
    computed = view.order.computed
    items(5)
    assert view.order.computed > computed
    assert len(items(10_000)) == 0  # past the end of the rank's items

    # a DataLoader worker's batches: every 3rd of the view from batch 2, those computed only
    count = -(-len(view) // 100)
    mine = range(2, count, 3)
    items = BatchItems(view, 100, len(mine), first=mine.start, stride=3)
    items(0)
    computed = view.order.computed
    got = [items(k) for k in range(len(mine))]
    assert all(np.array_equal(g, view.batch(m, 100)) for g, m in zip(got, mine, strict=True))
    # the worker's own items but batch 0's (computed before), and the references above:
    # nothing of the other workers' batches, nothing past its last batch
    own = sum(len(g) for g in got)
    assert view.order.computed - computed == (own - len(got[0])) + own
