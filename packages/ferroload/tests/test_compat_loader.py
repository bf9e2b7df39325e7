"""The loader in ferroload-rs 0.1.1's spellings (`ferroload.compat._loader`): each name
works as it did with a FutureWarning naming the 0.2 spelling, or is refused naming it;
0.2's own calls (`Sampler(n, ...)`, `make_loader(source, batch_size=...)`) are
unchanged and silent."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import ferroload.loader
import ferroload_format
import ferroload_loader
from ferroload.compat import _loader as compat
from ferroload_testing import rs011_dataset


def _jpg(h: int, w: int, fill: int = 0) -> bytes:
    rng = np.random.default_rng(fill)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _npy(values: list[float]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(values, dtype=np.float32))
    return buf.getvalue()


def _write(root: Path, n: int = 8) -> str:
    """A dataset of `n` samples: `image` (every other one), `thumb`, `clip` (video
    bytes), `audio`, `emb` (.npy), and metadata `label`, `caption`, `weight`."""
    with ferroload_format.Writer(str(root), "compat") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("thumb", "jpg", "tensor", "image")
        w.declare("clip", "mp4", "tensor", "video")
        w.declare("audio", "flac", "tensor", "audio")
        w.declare("emb", "npy", "bytes", "npy")
        for i in range(n):
            data = {
                "thumb": _jpg(12, 20, i),
                "clip": f"CLIP{i}".encode(),
                "audio": f"AUDIO{i}".encode(),
                "emb": _npy([i, i + 0.5]),
            }
            if i % 2 == 0:
                data["image"] = _jpg(30 + i, 40, i)
            w.add(f"s{i}", data, {"label": i, "caption": f"cap {i}", "weight": i / 4})
    return str(root)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _write(tmp_path_factory.mktemp("compat") / "ds")


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, its FutureWarnings ignored (tests of warnings check them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return fn(*args, **kwargs)


def _collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    batch: dict[str, Any] = _quiet(compat.numpy_collate, samples)
    return batch


# --------------------------------------------------------------------------- FerroTorchDataset


def test_torch_dataset_warns_naming_0_2(root: str) -> None:
    with pytest.warns(FutureWarning, match=r"ferroload_loader\.torch\.FerroTorchDataset") as rec:
        compat.FerroTorchDataset(root, images=["thumb"])
    message = str(rec[0].message)
    assert "(224, 224)" in message and "sample_id" in message and "numpy" in message
    assert rec[0].filename == __file__  # points at the caller


def test_samples_are_0_1_1_dicts(root: str) -> None:
    tds = _quiet(
        compat.FerroTorchDataset,
        ferroload_format.Dataset.open(root),
        images=["image", "thumb"],
        raw=["clip", "audio"],
        arrays=["emb"],
        meta=["label", "caption", "weight"],
        resize=(24, 16),
    )
    assert len(tds) == 8
    samples = tds.__getitems__([3, 0, 3])
    assert list(samples[1]) == [
        "image", "image_present", "thumb", "thumb_present", "emb", "emb_present",
        "clip", "clip_present", "audio", "audio_present", "label", "caption", "weight",
    ]  # fmt: skip
    first = samples[1]
    assert first["image"].shape == (24, 16, 3) and first["image"].dtype == np.uint8
    assert first["image_present"] is True
    assert first["clip"] == b"CLIP0" and first["audio"] == b"AUDIO0"
    assert first["emb"].tolist() == [0.0, 0.5] and first["emb"].dtype == np.float32
    assert first["label"] == 0 and isinstance(first["label"], np.integer)
    assert first["caption"] == "cap 0" and first["weight"] == 0.0
    odd = samples[0]  # sample 3 has no image
    assert odd["image"] is None and odd["image_present"] is False
    assert odd["thumb"].shape == (24, 16, 3) and odd["thumb_present"] is True
    assert samples[2]["label"] == 3
    assert tds[-1]["label"] == 7  # from the end
    assert tds.__getitems__([]) == []


def test_default_resize_is_0_1_1s_and_none_keeps_the_size(root: str) -> None:
    default = _quiet(compat.FerroTorchDataset, root, images=["image"])
    assert default[0]["image"].shape == (224, 224, 3)
    native = _quiet(compat.FerroTorchDataset, root, images=["image", "thumb"], resize=None)
    assert native[2]["image"].shape == (32, 40, 3) and native[2]["thumb"].shape == (12, 20, 3)
    per_column = _quiet(
        compat.FerroTorchDataset, root, images=["image", "thumb"], resize={"thumb": (4, 6)}
    )
    s = per_column[0]
    assert s["thumb"].shape == (4, 6, 3) and s["image"].shape == (30, 40, 3)


def test_only_what_is_asked_is_returned(root: str) -> None:
    tds = _quiet(compat.FerroTorchDataset, root, raw=["clip"])
    assert [set(s) for s in tds.__getitems__([0, 1])] == [{"clip", "clip_present"}] * 2


def test_columns_are_bucketed_by_the_modalities(root: str) -> None:
    tds = _quiet(
        compat.FerroTorchDataset, root, columns=["thumb", "emb", "audio", "label"], resize=(8, 8)
    )
    assert (tds.images, tds.arrays, tds.raw, tds.meta) == (["thumb"], ["emb"], ["audio"], ["label"])
    s = tds[5]
    assert s["thumb"].shape == (8, 8, 3) and s["emb"].tolist() == [5.0, 5.5]
    assert s["audio"] == b"AUDIO5" and s["label"] == 5


def test_batches_collate_and_prefetch(root: str) -> None:
    tds = _quiet(
        compat.FerroTorchDataset, root, images=["thumb"], meta=["label", "caption"], resize=(8, 8)
    )
    batch = _collate(tds.__getitems__([1, 2, 3]))
    assert batch["thumb"].shape == (3, 8, 8, 3) and batch["thumb_present"].tolist() == [True] * 3
    assert batch["label"].tolist() == [1, 2, 3] and batch["caption"] == ["cap 1", "cap 2", "cap 3"]
    sampler = _quiet(compat.FerroSampler, len(tds), shuffle=False)
    batches = _quiet(compat.batched, sampler, 3)
    loader = _quiet(compat.PrefetchLoader, tds, batches, collate_fn=_collate, depth=2)
    labels = [b["label"].tolist() for b in loader]
    assert labels == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_unknown_names_and_bad_options_are_refused(root: str) -> None:
    with pytest.raises(ferroload_format.ColumnNotFoundError, match="no modality 'nope'"):
        _quiet(compat.FerroTorchDataset, root, raw=["nope"])
    with pytest.raises(ferroload_format.ColumnNotFoundError, match="no metadata column 'nope'"):
        _quiet(compat.FerroTorchDataset, root, meta=["nope"])
    with pytest.raises(ValueError, match="out must be"):
        _quiet(compat.FerroTorchDataset, root, out="tensorflow")
    with pytest.raises(ValueError, match="resize must be"):
        _quiet(compat.FerroTorchDataset, root, images=["thumb"], resize=(0, 4))
    with pytest.raises(TypeError, match=r"ferroload_loader\.torch\.FerroTorchDataset"):
        compat.FerroTorchDataset(root, audio=["audio"])
    with pytest.raises(IndexError):
        _quiet(compat.FerroTorchDataset, root, meta=["label"])[8]


def test_torch_output(root: str) -> None:
    torch = pytest.importorskip("torch")
    tds = _quiet(
        compat.FerroTorchDataset, root, images=["thumb"], meta=["label"], resize=(8, 8), out="torch"
    )
    s = tds[2]
    assert isinstance(s["thumb"], torch.Tensor) and s["thumb"].shape == (8, 8, 3)
    assert s["label"] == 2
    loader = torch.utils.data.DataLoader(tds, batch_size=4)
    assert [b["label"].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_0_1_1_dataset_reads_as_0_1_1_did(tmp_path: Path) -> None:
    root = rs011_dataset("mixed", tmp_path / "mixed")
    tds = _quiet(compat.FerroTorchDataset, root, columns=["image", "mask", "emb", "audio", "label"])
    assert (tds.images, tds.arrays, tds.raw) == (["image", "mask"], ["emb"], ["audio"])
    s0, s1 = tds.__getitems__([0, 1])
    assert s0["image"].shape == s0["mask"].shape == (224, 224, 3)
    assert s0["emb"].shape == (3,) and isinstance(s0["audio"], bytes) and s0["label"] == 0
    assert s1["mask"] is None and s1["mask_present"] is False  # a sparse modality


def test_subset_dataset(root: str) -> None:
    tds = _quiet(compat.FerroTorchDataset, root, meta=["label"])
    with pytest.warns(FutureWarning, match=r"ds\.take\(indices\)"):
        sub = compat.subset_dataset(tds, [6, 1])
    assert len(sub) == 2 and sub[0]["label"] == 6
    assert [s["label"] for s in sub.__getitems__([1, 0])] == [1, 6]


def test_quiet_sample_dataset_for_other_compat_code(root: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        tds = compat.sample_dataset(root, meta=["label"], out="numpy")
    assert isinstance(tds, compat.FerroTorchDataset) and tds[4] == {"label": 4}


# --------------------------------------------------------------------------- Sampler


def test_sampler_0_1_1_form_partitions_each_epoch() -> None:
    n, world = 203, 4
    with pytest.warns(FutureWarning, match="another permutation") as rec:
        compat.Sampler(n, world, 0, 1, 0, 5, True, 16)
    assert "Sampler(num_items, rank=" in str(rec[0].message)
    shares = [
        _quiet(compat.Sampler, n, world, r, 1, 0, 5, True, 16).indices(0, 0) for r in range(world)
    ]
    assert all(isinstance(s, list) for s in shares)
    assert sorted(sum(shares, [])) == list(range(n))  # disjoint and complete
    assert [len(s) for s in shares] == [51, 51, 51, 50]  # 0.1.1's unpadded shares
    one = _quiet(compat.Sampler, n, 1, 0, 1, 0, 5)
    assert one.indices(2, 0) == _quiet(compat.Sampler, n, 1, 0, 1, 0, 5).indices(2, 0)
    assert one.indices(2, 0) != one.indices(3, 0)  # a new order per epoch
    assert sorted(one.indices(3, 0)) == list(range(n))
    assert one.indices(2, 17) == one.indices(2, 0)[17:]  # resumable
    assert one.indices() == one.indices(0, 0)  # 0.1.1's defaults
    assert _quiet(compat.Sampler, 10, 1, 0, 1, 0, 0, False).indices() == list(range(10))


def test_sampler_0_1_1_grid_of_ranks_and_workers() -> None:
    n = 50
    cells = [
        _quiet(compat.Sampler, total=n, world_size=2, rank=r, num_workers=3, worker_id=w, seed=9)
        for r in range(2)
        for w in range(3)
    ]
    got = [c.indices(1, 0) for c in cells]
    assert sorted(sum(got, [])) == list(range(n))
    order = _quiet(compat.Sampler, n, 1, 0, 1, 0, 9).indices(1)
    assert got[4] == order[4::6]  # cell rank * num_workers + worker_id of the grid
    assert _quiet(compat.Sampler, n, 0, 0, 0, 0, 9).indices(1) == order  # 0 counts as 1


def test_sampler_0_2_form_is_unchanged_and_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ours = compat.Sampler(11, seed=3, rank=1, world_size=2)
        theirs = ferroload_loader.Sampler(11, seed=3, rank=1, world_size=2)
        assert isinstance(ours, ferroload_loader.Sampler)
        assert list(ours) == list(theirs) and len(ours) == len(theirs) == 6
        assert list(ours) == list(theirs)  # the next pass: the next epoch, as 0.2's does
        assert ours.epoch == theirs.epoch == 1
        ours.set_epoch(0)
        theirs.set_epoch(0)
        assert ours.indices().tolist() == theirs.indices().tolist()
        assert ours.state_dict() == theirs.state_dict()
    with pytest.warns(FutureWarning, match=r"unpadded shares"):
        part = ours.indices(0, 0)  # 0.1.1's call on a 0.2 sampler
    other = _quiet(compat.Sampler(11, seed=3, rank=0, world_size=2).indices, 0, 0)
    assert sorted(part + other) == list(range(11)) and len(part) == 5


def test_sampler_refusals() -> None:
    with pytest.raises(ferroload_loader.LoaderOptionError, match="rank must be < world_size"):
        _quiet(compat.Sampler, 10, 2, 2)
    with pytest.raises(ferroload_loader.LoaderOptionError, match="worker_id must be < num_workers"):
        _quiet(compat.Sampler, 10, 2, 0, 2, 2)
    with pytest.raises(TypeError, match=r"0\.1\.1.s form is Sampler"):
        compat.Sampler(10, 2, mode="shard_block")  # the two forms mixed
    with pytest.raises(ferroload_loader.LoaderOptionError, match="resume_from must be an int"):
        _quiet(compat.Sampler, 10, 1, 0).indices(0, -1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'drop_last'"):
        compat.Sampler(total=10, drop_last=True)


def test_ferro_sampler() -> None:
    with pytest.warns(FutureWarning, match=r"Sampler\(num_items"):
        fs = compat.FerroSampler(101, world_size=3, rank=2, seed=4)
    e0 = list(fs)
    assert len(fs) == len(e0) == 33
    fs.set_epoch(1)
    e1 = list(fs)
    assert e0 != e1 and list(fs) == e1
    shares = [
        list(_quiet(compat.FerroSampler, 101, world_size=3, rank=r, seed=4)) for r in range(3)
    ]
    assert shares[2] == e0 and sorted(sum(shares, [])) == list(range(101))
    assert list(_quiet(compat.FerroSampler, 5, shuffle=False)) == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- batching


def test_batched_and_numpy_collate() -> None:
    with pytest.warns(FutureWarning, match=r"batch_size=\.\.\."):
        chunks = list(compat.batched(iter(range(7)), 3))
    assert chunks == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(_quiet(compat.batched, range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    samples = [{"x": np.ones((2, 2)) * i, "n": i, "s": f"t{i}", "b": None} for i in range(3)]
    with pytest.warns(FutureWarning, match="out='numpy'"):
        out = compat.numpy_collate(samples)
    assert out["x"].shape == (3, 2, 2) and out["n"].tolist() == [0, 1, 2]
    assert out["s"] == ["t0", "t1", "t2"] and out["b"] == [None, None, None]


def test_numpy_collate_stacks_tensors() -> None:
    torch = pytest.importorskip("torch")
    out = _collate([{"x": torch.zeros(2, 3), "y": torch.tensor(i)} for i in range(4)])
    assert isinstance(out["x"], np.ndarray) and out["x"].shape == (4, 2, 3)
    assert out["y"].tolist() == [0, 1, 2, 3]


class _Items:
    """A dataset whose sample `i` is `{"i": i}`; index 13 fails."""

    def __getitems__(self, idx: list[int]) -> list[dict[str, int]]:
        if 13 in idx:
            raise RuntimeError("sample 13 is broken")
        return [{"i": i} for i in idx]


def test_prefetch_loader_errors_and_early_stop() -> None:
    with pytest.warns(FutureWarning, match="prefetch_bytes"):
        loader = compat.PrefetchLoader(_Items(), [[0, 1], [2]])
    assert list(loader) == [[{"i": 0}, {"i": 1}], [{"i": 2}]]  # no collate_fn: as they are
    failing = _quiet(compat.PrefetchLoader, _Items(), [[12], [13], [14]], collate_fn=_collate)
    got = iter(failing)
    assert next(got)["i"].tolist() == [12]
    with pytest.raises(RuntimeError, match="sample 13"):
        next(got)

    def endless() -> Iterator[list[int]]:
        i = 0
        while True:
            yield [i]
            i += 1

    before = threading.active_count()
    stream = iter(
        _quiet(compat.PrefetchLoader, _Items(), (b for b in endless() if 13 not in b), depth=1)
    )
    assert next(stream) == [{"i": 0}]
    stream.close()  # a consumer that stops: the thread ends too
    for _ in range(100):
        if threading.active_count() <= before:
            break
        threading.Event().wait(0.05)
    assert threading.active_count() <= before


# --------------------------------------------------------------------------- streaming


def test_iterable_dataset_yields_samples(root: str) -> None:
    with pytest.warns(FutureWarning, match="yields whole batches"):
        it = compat.FerroIterableDataset(root, meta=["label"], block_size=3, seed=1)
    epoch0 = [s["label"] for s in it]
    assert len(it) == 8 and sorted(epoch0) == list(range(8))
    assert all(isinstance(s, dict) and set(s) == {"label"} for s in it)
    assert [s["label"] for s in it] == epoch0  # the epoch stays until set_epoch
    it.set_epoch(1)
    assert sorted(s["label"] for s in it) == list(range(8))
    ranks = [
        [
            s["label"]
            for s in _quiet(compat.FerroIterableDataset, root, meta=["label"], world_size=3, rank=r)
        ]
        for r in range(3)
    ]
    assert sorted(sum(ranks, [])) == list(range(8)) and [len(r) for r in ranks] == [3, 3, 2]
    ordered = _quiet(compat.FerroIterableDataset, root, meta=["label"], shuffle=False, block_size=5)
    assert [s["label"] for s in ordered] == list(range(8))


def test_iterable_dataset_in_a_dataloader(root: str) -> None:
    torch = pytest.importorskip("torch")
    it = _quiet(
        compat.FerroIterableDataset,
        root,
        images=["thumb"],
        meta=["label"],
        resize=(8, 8),
        out="torch",
    )
    assert isinstance(it, torch.utils.data.IterableDataset)
    batches = list(torch.utils.data.DataLoader(it, batch_size=4))
    assert [b["thumb"].shape for b in batches] == [(4, 8, 8, 3)] * 2
    assert sorted(torch.cat([b["label"] for b in batches]).tolist()) == list(range(8))
    # DataLoader workers split the rank's blocks: every sample once
    it.block_size = 3
    workers = torch.utils.data.DataLoader(it, batch_size=2, num_workers=2)
    assert sorted(torch.cat([b["label"] for b in workers]).tolist()) == list(range(8))


# --------------------------------------------------------------------------- make_loader


def test_make_loader_0_2_calls_are_unchanged(root: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        dl = compat.make_loader(root, batch_size=4, meta=["label"], out="numpy", seed=2)
        same = ferroload_loader.make_loader(root, batch_size=4, meta=["label"], out="numpy", seed=2)
        assert type(dl) is ferroload_loader.FerroLoader
        assert [list(b["sample_id"]) for b in dl] == [list(b["sample_id"]) for b in same]
        opts = ferroload_loader.LoaderOptions(batch_size=8, meta=["label"], out="numpy")
        assert type(compat.make_loader(root, options=opts)) is ferroload_loader.FerroLoader
    with pytest.raises(ferroload_loader.LoaderOptionError):  # still 0.2's checks
        compat.make_loader(root, batch_size=0)


def test_make_loader_0_1_1_calls(root: str) -> None:
    with pytest.warns(FutureWarning, match=r"make_loader\(source, batch_size=") as rec:
        dl = compat.make_loader(root, 3, columns=["thumb", "label"], raw=["clip"], seed=1)
    assert "another permutation" in str(rec[0].message)
    assert isinstance(dl, compat.FerroLoader) and len(dl) == 3
    batches = list(dl)
    first = batches[0]
    assert sorted(first) == ["clip", "clip_present", "label", "thumb", "thumb_present"]
    assert first["thumb"].shape == (3, 224, 224, 3) and isinstance(first["clip"][0], bytes)
    assert sorted(x for b in batches for x in b["label"].tolist()) == list(range(8))
    dl.set_epoch(1)
    assert [b["label"].tolist() for b in dl] != [b["label"].tolist() for b in batches]
    in_order = _quiet(compat.make_loader, root, meta=["label"], shuffle=False, drop_last=True)
    assert len(in_order) == 0  # 0.1.1's default batch size, 32, of 8 samples
    ranks = [
        _quiet(compat.make_loader, root, 2, meta=["label"], world_size=2, rank=r, prefetch=1)
        for r in range(2)
    ]
    assert sorted(x for dl in ranks for b in dl for x in b["label"].tolist()) == list(range(8))
    streaming = _quiet(compat.make_loader, root, 3, raw=["audio"], streaming=True, block_size=2)
    assert sorted(a for b in streaming for a in b["audio"]) == [
        f"AUDIO{i}".encode() for i in range(8)
    ]
    custom = _quiet(compat.make_loader, root, 4, meta=["label"], collate_fn=len, shuffle=False)
    assert list(custom) == [4, 4]


def test_make_loader_refuses_mixed_calls(root: str) -> None:
    with pytest.raises(TypeError, match=r"0\.2's crop= with 0\.1\.1's arguments"):
        compat.make_loader(root, 4, columns=["thumb"], crop="center")
    with pytest.raises(TypeError, match="3 arguments by position"):
        compat.make_loader(root, 4, ["thumb"])


def test_ferro_loader(root: str) -> None:
    with pytest.warns(FutureWarning, match=r"FerroLoader\(root, batch_size"):
        dl = compat.FerroLoader(root, 5, images=["thumb"], resize=(6, 6), shuffle=False)
    assert [b["thumb"].shape for b in dl] == [(5, 6, 6, 3), (3, 6, 6, 3)]


# --------------------------------------------------------------------------- where they live


def test_the_names_are_reachable_where_0_1_1_had_them() -> None:
    for name in ("FerroTorchDataset", "FerroIterableDataset", "subset_dataset", "FerroSampler",
                 "PrefetchLoader", "batched", "numpy_collate"):  # fmt: skip
        assert getattr(ferroload_loader, name) is getattr(compat, name)
        assert name not in ferroload_loader.__all__
    for name in ("FerroSampler", "PrefetchLoader", "batched", "numpy_collate", "subset_dataset"):
        assert getattr(ferroload.loader, name) is getattr(compat, name)
    # where 0.2 has the name itself, the loader package keeps 0.2's; the facade (and
    # ferroload.loader) hand out the dispatchers, which take both calls
    assert ferroload_loader.Sampler is not compat.Sampler
    assert ferroload.loader.make_loader is compat.make_loader is ferroload.make_loader
    assert ferroload.loader.Sampler is compat.Sampler is ferroload.Sampler
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ferroload_loader.nope  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_loader_stays_light() -> None:
    code = (
        "import sys, ferroload_loader\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('ferroload.compat')))\n"
        "ferroload_loader.FerroTorchDataset\n"
        "print('torch' in sys.modules, 'ferroload.compat._loader' in sys.modules)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["[]", "False True"]


def test_a_copied_dataset_folder_is_a_path(tmp_path: Path, root: str) -> None:
    copy = shutil.copytree(root, tmp_path / "copy")
    tds = _quiet(compat.FerroTorchDataset, copy, meta=["caption"])
    assert tds[1] == {"caption": "cap 1"}
