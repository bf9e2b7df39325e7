"""`LoaderOptions`: one set of options for `make_loader`, the torch adapters and
`FerroDataModule`, forwarded whole and checked alike by each."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ferroload_core import FerroloadError
from ferroload_loader import (
    MAX_SHUFFLE_BUFFER,
    MAX_WORLD_SIZE,
    FerroLoader,
    LoaderOptionError,
    LoaderOptions,
    Sampler,
    make_loader,
)
from ferroload_loader._options import LoaderKeywords, SamplerKeywords

from .conftest import MakeDataset


def _mark(batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """A per-batch transform whose output depends on the seed, epoch and items."""
    batch["noise"] = rng.integers(0, 1 << 30, size=len(batch["sample_id"]))
    return batch


#: Every option away from its default (but those some entry point refuses).
SHARED = LoaderOptions(
    batch_size=5,
    images=["image"],
    meta=["label", "score", "name"],
    resize=(8, 6),
    crop="random",
    hflip=0.5,
    layout="NCHW",
    dtype="float32",
    normalize=((0.5, 0.4, 0.3), (0.25, 0.2, 0.3)),
    transform=_mark,
    shuffle=True,
    seed=7,
    drop_last=True,
    where="label != 3",
    threads=2,
    streaming=True,
    shuffle_buffer=6,
    lanes=2,
    on_error="skip",
    storage_options={},
)


def _sampler_settings(s: Sampler) -> dict[str, Any]:
    return {
        "num_items": s.num_items, "mode": s.mode, "seed": s.seed, "shuffle": s.shuffle,
        "shuffle_buffer": s.shuffle_buffer, "lanes": s.lanes, "rank": s.rank,
        "world_size": s.world_size, "drop_last": s.drop_last, "buckets": s._bucket_state(),
    }  # fmt: skip


def _fields(fields: list[Any]) -> list[str]:
    """What each field decodes, and how (the decoder's repr names size, crop, threads)."""
    return [f"{f.name}: {getattr(f, 'decoder', type(f).__name__)!r}" for f in fields]


def _loader_settings(dl: FerroLoader) -> dict[str, Any]:
    return {
        **_sampler_settings(dl.sampler), "batch_size": dl.batch_size,
        "drop_last_batches": dl.drop_last, "on_error": dl.on_error,
        "transform": None if dl.transform is None else dl.transform.fn,
        "fields": _fields(dl.fields),
    }  # fmt: skip


def _equal_batches(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    import torch

    assert len(got) == len(want) > 1
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(b[k], torch.Tensor):
                assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
            elif isinstance(b[k], np.ndarray):
                np.testing.assert_array_equal(a[k], b[k])
            else:
                assert list(a[k]) == list(b[k]), k


def test_keywords_are_the_options() -> None:
    """The keyword type of the entry points lists exactly the fields of `LoaderOptions`."""
    fields = {f.name for f in dataclasses.fields(LoaderOptions)}
    assert LoaderKeywords.__optional_keys__ == fields
    assert LoaderKeywords.__required_keys__ == frozenset()
    assert SamplerKeywords.__optional_keys__ < fields


def test_options_object_and_keywords_make_the_same_loader(make_dataset: MakeDataset) -> None:
    uri = make_dataset(40, shard_size=2000)
    o = dataclasses.replace(SHARED, out="numpy", readahead_bytes=0, prefetch_bytes=1 << 20)
    by_object = make_loader(uri, options=o)
    keywords = {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    by_keywords = make_loader(uri, **keywords)
    assert _loader_settings(by_object) == _loader_settings(by_keywords)
    assert (by_object.out, by_object.prefetch_bytes, by_object.readahead_bytes) == (
        "numpy", 1 << 20, 0,
    )  # fmt: skip
    assert _loader_settings(by_object)["lanes"] == 2 and by_object.sampler.mode == "shard_block"
    a, b = list(by_object), list(by_keywords)
    assert [x["sample_id"] for x in a] == [x["sample_id"] for x in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x["image"], y["image"])
        np.testing.assert_array_equal(x["noise"], y["noise"])


def test_every_entry_point_forwards_every_option(make_dataset: MakeDataset) -> None:
    """One `LoaderOptions` gives the same sampler, fields and batches through
    `make_loader`, `FerroIterableDataset`, `FerroTorchDataset` (with `DataLoader`) and
    `FerroDataModule`."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("lightning")
    from torch.utils.data import DataLoader

    from ferroload_loader.lightning import FerroDataModule
    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    uri = make_dataset(40, shard_size=2000)
    base = make_loader(uri, options=SHARED)
    want = _loader_settings(base)
    assert want["lanes"] == 2 and want["mode"] == "shard_block" and want["seed"] == 7
    assert want["num_items"] == 34  # where= applied
    want_batches = list(base)
    assert want_batches[0]["image"].shape == (5, 3, 8, 6)
    assert want_batches[0]["image"].dtype == torch.float32

    it = FerroIterableDataset(uri, options=SHARED)
    assert {
        **_sampler_settings(it._sampler), "batch_size": it.batch_size,
        "drop_last_batches": it.drop_last, "on_error": it.on_error,
        "transform": it.transform.fn if it.transform else None,
        "fields": _fields(it._runtime()[1]),
    } == want  # fmt: skip
    _equal_batches(list(DataLoader(it, batch_size=None)), want_batches)

    dm = FerroDataModule(uri, options=SHARED)
    train = dm.train_dataloader()
    assert _loader_settings(train) == want
    assert (train.prefetch_bytes, train.readahead_bytes, train.pin_memory, train.out) == (
        SHARED.prefetch_bytes, SHARED.readahead_bytes, SHARED.pin_memory, "torch",
    )  # fmt: skip
    _equal_batches(list(train), want_batches)
    # the other splits: the same options, but dataset order, whole split, no augmentation
    val = FerroDataModule(uri, val=uri, val_batch_size=3, options=SHARED).val_dataloader()
    evaluation = dataclasses.replace(
        SHARED, batch_size=3, shuffle=False, drop_last=False, streaming=False, crop="center",
        hflip=0.0, transform=None,
    )  # fmt: skip
    assert _loader_settings(val) == _loader_settings(make_loader(uri, options=evaluation))
    assert (val.prefetch_bytes, val.readahead_bytes, val.pin_memory) == (
        SHARED.prefetch_bytes, SHARED.readahead_bytes, SHARED.pin_memory,
    )  # fmt: skip
    _equal_batches(list(val), list(make_loader(uri, options=evaluation)))

    # the map-style dataset yields samples: DataLoader batches, collate_fn transforms
    per_sample = dataclasses.replace(SHARED, batch_size=None, transform=None)
    ds = FerroTorchDataset(uri, options=per_sample)
    sampler = ds.sampler()
    assert {**_sampler_settings(sampler), "fields": _fields(ds._runtime()[1])} == {
        k: v for k, v in want.items() if k in {*_sampler_settings(sampler), "fields"}
    }
    assert ds.on_error == "skip" and ds.seed == 7
    got = list(DataLoader(ds, batch_size=5, sampler=sampler, drop_last=True))
    plain = list(make_loader(uri, options=dataclasses.replace(SHARED, transform=None)))
    _equal_batches(got, plain)


def test_every_entry_point_forwards_bucket_by(make_dataset: MakeDataset) -> None:
    """`bucket_by` and `buckets` reach the sampler of `make_loader`, `FerroIterableDataset`
    and `FerroDataModule` (the same bucketed batches from one `LoaderOptions`);
    `FerroTorchDataset` yields samples and refuses them."""
    pytest.importorskip("torch")
    pytest.importorskip("lightning")
    from torch.utils.data import DataLoader

    from ferroload_loader.lightning import FerroDataModule
    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    uri = make_dataset(40, shard_size=2000)
    o = dataclasses.replace(
        SHARED, bucket_by="score * 2 + label", buckets=3, crop="shortest_edge", resize=6
    )
    base = make_loader(uri, options=o)
    want = _loader_settings(base)
    assert want["buckets"]["by"] == "score * 2 + label" and len(want["buckets"]["boundaries"]) == 2
    assert want["buckets"]["group"] == 5 and want["buckets"]["span"] == 6
    want_batches = list(base)
    assert "image_size" in want_batches[0]
    it = FerroIterableDataset(uri, options=o)
    assert _sampler_settings(it._sampler) == {k: want[k] for k in _sampler_settings(it._sampler)}
    _equal_batches(list(DataLoader(it, batch_size=None)), want_batches)
    train = FerroDataModule(uri, options=o).train_dataloader()
    assert _loader_settings(train) == want
    _equal_batches(list(train), want_batches)
    for option, value in {"bucket_by": "label", "buckets": 2}.items():
        with pytest.raises(TypeError, match=rf"FerroTorchDataset\(\) does not take {option}="):
            FerroTorchDataset(uri, meta=["label"], **{option: value})
    with pytest.raises(ValueError, match="FerroTorchDataset does not take bucket_by"):
        FerroTorchDataset(uri, options=LoaderOptions(meta=["label"], bucket_by="label", buckets=2))


def test_the_adapters_take_lanes(make_dataset: MakeDataset) -> None:
    """`lanes=` reaches the sampler of every adapter, as it does `make_loader`'s."""
    pytest.importorskip("torch")
    pytest.importorskip("lightning")
    from ferroload_loader.lightning import FerroDataModule
    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    uri = make_dataset(40, shard_size=2000)
    kw: dict[str, Any] = {"images": ["image"], "resize": 4, "streaming": True}
    for lanes in (1, 3):
        want = make_loader(uri, batch_size=4, lanes=lanes, world_size=2, rank=1, **kw).sampler
        it = FerroIterableDataset(uri, batch_size=4, lanes=lanes, world_size=2, rank=1, **kw)
        assert it._sampler.lanes == lanes
        assert _sampler_settings(it._sampler) == _sampler_settings(want)
        assert it._sampler.view().items(0, 20).tolist() == want.view().items(0, 20).tolist()
        ds = FerroTorchDataset(uri, lanes=lanes, world_size=2, rank=1, **kw)
        assert _sampler_settings(ds.sampler()) == _sampler_settings(want)
        assert ds.sampler(lanes=2).lanes == 2  # the sampler's own keywords win
        dm = FerroDataModule(uri, batch_size=4, lanes=lanes, **kw)
        assert dm.train_dataloader().sampler.lanes == lanes
    # without lanes=, the world size, as before
    assert FerroIterableDataset(uri, batch_size=4, world_size=2, rank=0, **kw)._sampler.lanes == 2


def _entry_points() -> dict[str, Callable[..., Any]]:
    """name -> build(uri, **options): each entry point, built as far as it checks."""
    entries: dict[str, Callable[..., Any]] = {"make_loader": make_loader}
    try:
        import torch  # noqa: F401
    except ImportError:
        return entries
    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    entries["FerroIterableDataset"] = FerroIterableDataset

    def map_style(uri: str, **kw: Any) -> Any:
        kw.pop("batch_size", None)  # DataLoader's there
        return FerroTorchDataset(uri, **kw).sampler()

    entries["FerroTorchDataset"] = map_style
    try:
        from ferroload_loader.lightning import FerroDataModule
    except ImportError:
        return entries
    entries["FerroDataModule"] = lambda uri, **kw: FerroDataModule(uri, **kw).train_dataloader()
    return entries


HUGE = 10**5000  # no str() of it: over Python's 4,300 digits
BAD = [
    ({"batch_size": 0}, ValueError, "batch_size must be a positive int, got 0"),
    ({"batch_size": 2.5}, ValueError, "batch_size must be a positive int, got 2.5"),
    ({"on_error": "ignore"}, ValueError, "on_error must be raise, skip or warn, got 'ignore'"),
    ({"hflip": 2}, ValueError, r"hflip is the probability of a flip, a number in \[0, 1\]"),
    ({"layout": "HWC"}, ValueError, "layout"),
    ({"images": ["image"]}, ValueError, "needs an output size"),
    ({"streaming": True, "lanes": 0}, ValueError, "lanes must be a positive int or None"),
    ({"lanes": 0}, ValueError, r"lanes must be a positive int .*, got 0"),  # not streaming
    ({"lanes": True}, ValueError, r"lanes must be a positive int .*, got True \(a bool\)"),
    ({"threads": 0}, ValueError, "threads must be a positive int or None, got 0"),
    ({"batch_size": True}, ValueError, "batch_size must be a positive int, got True"),
    ({"streaming": True, "shuffle_buffer": 0}, ValueError, "shuffle_buffer must be a positive int"),
    ({"seed": "7"}, ValueError, "seed must be a non-negative int"),
    # integer options take ints, not bools (True was a count of 1)
    *[
        ({k: True, **extra}, LoaderOptionError, rf"{k} must be .*, got True \(a bool\)")
        for k, extra in [
            ("seed", {}),
            ("threads", {}),
            ("prefetch_bytes", {}),
            ("readahead_bytes", {}),
            ("rank", {"world_size": 2}),
            ("world_size", {}),
            ("shuffle_buffer", {}),
            ("shuffle_buffer", {"streaming": True}),
            ("batch_size", {}),
            ("lanes", {}),
        ]
    ],
    ({"threads": 2.0}, LoaderOptionError, r"threads must be .*, got 2.0 \(a float\)"),
    ({"seed": -1}, LoaderOptionError, "seed must be a non-negative int"),
    ({"seed": 2**63}, LoaderOptionError, r"seed must be .* \(at most 9,223,372,036,854,775,807\)"),
    ({"prefetch_bytes": -1}, LoaderOptionError, "prefetch_bytes must be a non-negative int"),
    # flags take bools ('False' was true)
    ({"shuffle": "False"}, LoaderOptionError, r"shuffle must be True or False, got 'False'"),
    ({"shuffle": 2}, LoaderOptionError, "shuffle must be True or False, got 2"),
    ({"shuffle": np.True_}, LoaderOptionError, "shuffle must be True or False"),
    ({"drop_last": "no"}, LoaderOptionError, "drop_last must be True or False, got 'no'"),
    ({"streaming": 1}, LoaderOptionError, "streaming must be True or False, got 1"),
    ({"pin_memory": "yes"}, LoaderOptionError, "pin_memory must be True or False"),
    # bounds that were an OverflowError while iterating
    (
        {"world_size": 2**63},
        LoaderOptionError,
        r"world_size must be a positive int or None \(at most 1,048,576\)",
    ),
    ({"world_size": MAX_WORLD_SIZE + 1}, LoaderOptionError, "world_size must be"),
    ({"rank": 2**63}, LoaderOptionError, r"rank must be in \[0, 1048576\)"),
    ({"rank": 2, "world_size": 2}, LoaderOptionError, r"rank must be in \[0, 2\), got 2"),
    (
        {"lanes": 2**63},
        LoaderOptionError,
        r"lanes must be a positive int or None \(at most 1,048,576\), got 9223372036854775808",
    ),
    (
        {"shuffle_buffer": 2**63},
        LoaderOptionError,
        r"shuffle_buffer must be .* \(at most 1,099,511,627,776\)",
    ),
    (
        {"streaming": True, "shuffle_buffer": MAX_SHUFFLE_BUFFER + 1},
        LoaderOptionError,
        r"shuffle_buffer must be a positive int \(at most 1,099,511,627,776\)",
    ),
    # an output size a batch could not hold (a MemoryError at the first batch)
    (
        {"images": ["image"], "resize": (10**6, 10**6)},
        LoaderOptionError,
        r"resize=\(1000000, 1000000\) makes images of 1,000,000,000,000 pixels, over the "
        "limit of 89,478,485",
    ),
    ({"resize": (10**6, 10**6)}, LoaderOptionError, "over the limit of 89,478,485"),
    ({"resize": 10**5}, LoaderOptionError, "over the limit"),
    ({"resize": (HUGE, 1)}, LoaderOptionError, "an int of 16610 bits"),
    ({"resize": (0, 4)}, LoaderOptionError, "resize must be .* positive ints"),
    ({"resize": True}, LoaderOptionError, r"resize must be .*, got True \(a bool\)"),
    (
        {"images": {"image": {"size": (10**5, 10**5)}}, "resize": 8},
        LoaderOptionError,
        r"images\['image'\]\['size'\]=\(100000, 100000\) makes images of",
    ),
    (
        {"bucket_by": "label % 2", "buckets": 2},
        ValueError,
        r"bucket_by 'label % 2': unexpected '%'",
    ),
    ({"bucket_by": "label"}, ValueError, "bucket_by='label' needs buckets="),
    ({"buckets": 2}, ValueError, "buckets= needs bucket_by="),
    ({"bucket_by": "label", "buckets": [2, 1]}, ValueError, "must increase strictly"),
    ({"bucket_by": "label", "buckets": 0}, ValueError, "buckets must be a positive int"),
    ({"bucket_by": "label", "buckets": 10**9}, ValueError, "of at most 65536"),
    (
        {"bucket_by": "width*label", "buckets": 2},
        ValueError,
        r"bucket_by 'width\*label': .* has no column 'width'; its index columns are",
    ),
    ({"bucket_by": "name", "buckets": 2}, ValueError, "column 'name' .* is not numeric"),
]


def _id(bad: dict[str, Any]) -> str:
    return "resize=HUGE" if bad.get("resize") == (HUGE, 1) else str(bad)


@pytest.mark.parametrize(("bad", "error", "message"), BAD, ids=[_id(b[0]) for b in BAD])
def test_a_bad_value_gives_the_same_error_everywhere(
    make_dataset: MakeDataset, bad: dict[str, Any], error: type[Exception], message: str
) -> None:
    uri = make_dataset(10)
    options = {"batch_size": 4, "meta": ["label"], **bad}
    for name, build in _entry_points().items():
        if _REFUSES.get(name, set()) & set(bad):
            continue  # an option this entry point does not take at all (see below)
        with pytest.raises(error, match=message):
            build(uri, **options)
        if name != "FerroTorchDataset":
            with pytest.raises(error, match=message):  # an options object, built or given
                build(uri, options=LoaderOptions(**options))


#: Options an entry point refuses whatever their value
#: (`test_each_entry_point_refuses_what_it_cannot_honour`).
_TORCH = {"out", "pin_memory", "prefetch_bytes", "readahead_bytes", "cache"}
_REFUSES = {
    "FerroIterableDataset": _TORCH,
    "FerroTorchDataset": {*_TORCH, "batch_size", "bucket_by", "buckets", "transform"},
    "FerroDataModule": {"out", "rank", "world_size"},
}


def test_an_option_error_names_the_option_and_value() -> None:
    for option, value in [("seed", True), ("shuffle", "False"), ("world_size", 2**63)]:
        with pytest.raises(LoaderOptionError) as info:
            LoaderOptions(**{option: value})
        err = info.value
        assert isinstance(err, FerroloadError) and isinstance(err, ValueError)
        assert (err.option, err.value) == (option, value)
        assert option in str(err) and repr(value) in str(err)


def test_a_ferroloader_built_by_hand_checks_its_arguments_alike(make_dataset: MakeDataset) -> None:
    dl = make_loader(make_dataset(10), batch_size=4, meta=["label"], out="numpy")
    parts = (dl.source, dl.fields, dl.sampler)
    for option, value in [("drop_last", "no"), ("pin_memory", 1), ("prefetch_bytes", True)]:
        with pytest.raises(LoaderOptionError, match=f"{option} must be"):
            FerroLoader(*parts, batch_size=4, out="numpy", **{option: value})
    with pytest.raises(LoaderOptionError, match="batch_size must be a positive int, got True"):
        FerroLoader(*parts, batch_size=True, out="numpy")


def test_the_largest_counts_iterate_without_overflow(make_dataset: MakeDataset) -> None:
    """`world_size`, `lanes` and `shuffle_buffer` at their bounds still iterate (they were
    an OverflowError at 2**63)."""
    uri = make_dataset(10)
    kw: dict[str, Any] = {"batch_size": 4, "meta": ["label"], "out": "numpy"}
    last = make_loader(uri, world_size=MAX_WORLD_SIZE, rank=MAX_WORLD_SIZE - 1, **kw)
    assert [len(b["sample_id"]) for b in last] == [1]  # padded by wrapping around
    ids = set()
    for rank in (0, 9):  # ranks 0..9 each get one item of the 10
        ids |= set(next(iter(make_loader(uri, world_size=MAX_WORLD_SIZE, rank=rank, **kw)))[
            "sample_id"
        ])  # fmt: skip
    assert len(ids) == 2
    for extra in (
        {"streaming": True},
        {"streaming": True, "lanes": MAX_WORLD_SIZE},
        {"bucket_by": "label", "buckets": 2},
    ):
        dl = make_loader(uri, shuffle_buffer=MAX_SHUFFLE_BUFFER, **kw, **extra)
        assert sorted(s for b in dl for s in b["sample_id"]) == [f"s{i:05d}" for i in range(10)]


def test_resize_is_bounded_by_the_fields_max_pixels(make_dataset: MakeDataset) -> None:
    """A field's `max_pixels=` raises the bound of `resize` (and its own `size`)."""
    big = (10_000, 10_000)  # 10**8 pixels: over the default
    with pytest.raises(LoaderOptionError, match="over the limit of 89,478,485"):
        LoaderOptions(images=["image"], resize=big)
    LoaderOptions(images={"image": {"max_pixels": 10**8}}, resize=big)  # accepted
    with pytest.raises(LoaderOptionError, match="over the limit of 100,000,000"):
        LoaderOptions(images={"image": {"max_pixels": 10**8}}, resize=(10_001, 10_000))
    LoaderOptions(video={"clip": {"max_pixels": 10**8, "size": big}})


def test_options_and_keywords_are_not_mixed(make_dataset: MakeDataset) -> None:
    uri = make_dataset(10)
    options = LoaderOptions(batch_size=4, meta=["label"])
    for name, build in _entry_points().items():
        if name == "FerroTorchDataset":
            continue
        with pytest.raises(TypeError, match=r"not both \(got options= and seed=\)"):
            build(uri, options=options, seed=1)
        with pytest.raises(TypeError, match="'batchsize'; did you mean 'batch_size'"):
            build(uri, batchsize=4)
        with pytest.raises(TypeError, match="missing 1 required keyword-only argument"):
            build(uri, meta=["label"])
        with pytest.raises(TypeError, match="needs a batch size"):
            build(uri, options=LoaderOptions(meta=["label"]))
        with pytest.raises(TypeError, match="takes a LoaderOptions, got dict"):
            build(uri, options={"batch_size": 4})


def test_repr_shows_the_options_set() -> None:
    """Only what differs from the defaults; numpy's `dtype == None` (float64) does not hide
    a dtype, and an array, which has no single truth value, does not break the repr."""
    options = LoaderOptions(batch_size=4, images=["image"], resize=8, hflip=0.5)
    assert repr(options) == "LoaderOptions(batch_size=4, images=['image'], resize=8, hflip=0.5)"
    assert repr(LoaderOptions()) == "LoaderOptions()"
    assert "dtype=dtype('float64')" in repr(LoaderOptions(dtype=np.dtype("float64")))
    assert "meta=array(['label']" in repr(LoaderOptions(meta=np.array(["label"])))


def test_habits_from_other_loaders_name_the_option_here(make_dataset: MakeDataset) -> None:
    """`num_workers=` (torch's DataLoader) said only "unexpected keyword argument"."""
    uri = make_dataset(10)
    with pytest.raises(TypeError, match=r"'num_workers'; the loader decodes on threads="):
        make_loader(uri, batch_size=4, num_workers=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'collate_fn'; .* transform="):
        make_loader(uri, batch_size=4, collate_fn=list)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"argument 'wat'$"):  # nothing close: no guess
        make_loader(uri, batch_size=4, wat=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "shaping", [{"resize": (8, 8)}, {"crop": "center"}, {"hflip": 0.5}, {"layout": "NCHW"}]
)
def test_image_options_without_images_are_refused(
    make_dataset: MakeDataset, shaping: dict[str, Any]
) -> None:
    """`make_loader(uri, batch_size=32, resize=(32, 32))` gave batches of sample ids only:
    `resize` did nothing, as no image field was named."""
    uri = make_dataset(10)
    key = next(iter(shaping))
    with pytest.raises(ValueError, match=rf"{key}=.*images= .* pass images=\['image'\]"):
        make_loader(uri, batch_size=4, out="numpy", **shaping)
    make_loader(uri, batch_size=4, meta=["label"], out="numpy")  # no image option: metadata


def test_each_entry_point_refuses_what_it_cannot_honour(make_dataset: MakeDataset) -> None:
    pytest.importorskip("torch")
    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    uri = make_dataset(10)
    refused = {"out": "numpy", "pin_memory": True, "prefetch_bytes": 1, "readahead_bytes": 0,
               "cache": None}  # fmt: skip
    for option, value in refused.items():
        for cls, kw in (
            (FerroIterableDataset, {"batch_size": 4, "meta": ["label"]}),
            (FerroTorchDataset, {"meta": ["label"]}),
        ):
            with pytest.raises(TypeError, match=rf"{cls.__name__}\(\) does not take {option}="):
                cls(uri, **kw, **{option: value})
            with pytest.raises(ValueError, match=rf"{cls.__name__} does not take {option}"):
                cls(uri, options=LoaderOptions(**kw, **{option: value}))
    with pytest.raises(TypeError, match=r"DataLoader\(batch_size=\.\.\.\) batches them"):
        FerroTorchDataset(uri, batch_size=4)
    with pytest.raises(ValueError, match="does not take transform"):
        FerroTorchDataset(uri, options=LoaderOptions(transform=_mark))
    with pytest.raises(TypeError, match="unexpected keyword argument 'seed'"):
        FerroTorchDataset(uri).sampler(seed=3)  # type: ignore[call-arg]
    pytest.importorskip("lightning")
    from ferroload_loader.lightning import FerroDataModule

    for option, value in {"out": "numpy", "rank": 0, "world_size": 2}.items():
        with pytest.raises(TypeError, match=rf"FerroDataModule\(\) does not take {option}="):
            FerroDataModule(uri, batch_size=4, **{option: value})


def test_torch_datasets_built_from_options_pickle(make_dataset: MakeDataset) -> None:
    """Options objects travel to DataLoader workers with the datasets."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from ferroload_loader.torch import FerroIterableDataset, FerroTorchDataset

    uri = make_dataset(30, shard_size=2000)
    o = LoaderOptions(
        batch_size=4, images=["image"], resize=4, meta=["label"], streaming=True, lanes=3,
        transform=dict, seed=2, storage_options={},
    )  # fmt: skip
    it = pickle.loads(pickle.dumps(FerroIterableDataset(uri, options=o)))
    assert type(it).__module__ == "ferroload_loader.torch" and it._sampler.lanes == 3
    want = list(make_loader(uri, options=o))
    _equal_batches(list(DataLoader(it, batch_size=None)), want)
    per_sample = dataclasses.replace(o, batch_size=None, transform=None)
    ds = pickle.loads(pickle.dumps(FerroTorchDataset(uri, options=per_sample)))
    assert ds.sampler().lanes == 3
    got = list(DataLoader(ds, batch_size=4, sampler=ds.sampler()))
    _equal_batches(got, list(make_loader(uri, options=dataclasses.replace(o, transform=None))))
