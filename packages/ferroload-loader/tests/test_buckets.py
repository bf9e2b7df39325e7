"""Size-bucketed batches (`bucket_by=`, `buckets=`) and the aspect-preserving image mode
(`crop="shortest_edge"`): every sample once, batches of one bucket, deterministic,
resumable, rank shares disjoint and complete, clear errors."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import ImageDecoder
from ferroload_format import Writer
from ferroload_loader import LoaderOptions, Sampler, make_loader
from ferroload_loader._buckets import (
    BucketOrder,
    boundaries_of,
    check_buckets,
    columns_of,
    evaluate,
    parse_expression,
)
from ferroload_loader._order import PermutationOrder

MakeSized = Callable[..., str]


def _jpeg(h: int, w: int, i: int) -> bytes:
    rs = np.random.default_rng(i)
    img = rs.integers(0, 255, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture
def make_sized(tmp_path: Path) -> MakeSized:
    """`n` samples with `width`/`height` columns (varied aspect ratios), optionally with
    JPEGs of that size; returns the URI."""
    counter = iter(range(1000))

    def make(n: int = 103, *, images: bool = False, shard_size: int = 1 << 14) -> str:
        root = str(tmp_path / f"sized{next(counter)}")
        rs = np.random.default_rng(5)
        with Writer(root, "sized", shard_size=shard_size) as w:
            if images:
                w.declare("image", "jpeg", "tensor", "image")
            for i in range(n):
                h, wd = int(rs.integers(20, 60)), int(rs.integers(20, 60))
                data = {"image": _jpeg(h, wd, i)} if images else None
                w.add(f"s{i:04d}", data, {"width": wd, "height": h, "label": i % 3})
        return root

    return make


def _bucket(batch: dict[str, Any], bounds: tuple[float, ...]) -> np.ndarray:
    ratio = np.asarray(batch["width"], dtype=np.float64) / np.asarray(batch["height"])
    return np.searchsorted(np.asarray(bounds), ratio, side="right")


OPTS: dict[str, Any] = {
    "meta": ["width", "height"], "out": "numpy", "bucket_by": "width/height", "buckets": 4,
    "seed": 3,
}  # fmt: skip


# ---------------------------------------------------------------------- expressions


def test_expressions_parse_and_evaluate() -> None:
    cols = {"w": np.array([2.0, 4.0]), "h": np.array([1.0, 8.0])}
    for text, want in [
        ("w*h", [2.0, 32.0]),
        ("w / h", [2.0, 0.5]),
        ("(w + 1) * 2 - h", [5.0, 2.0]),
        ("-w + 10", [8.0, 6.0]),
        ("w*h/2e0 + .5", [1.5, 16.5]),
    ]:
        e = parse_expression(text)
        np.testing.assert_allclose(evaluate(e, cols), want)
    assert columns_of(parse_expression("w*h + w/h")) == ["w", "h"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os')", r"bucket_by \"__import__\('os'\)\": unexpected \"'\""),
        ("w ** 2", r"unexpected '\*' at position 3"),
        ("w % 2", "unexpected '%' at position 2"),
        ("(w*h", "the parenthesis at position 0 is not closed"),
        ("w h", "unexpected 'h' at position 2"),
        ("w *", "the expression ends too soon"),
        ("", "empty expression"),
        ("w.h", r"unexpected '\.h'|unexpected '\.'"),
    ],
)
def test_bad_expressions_name_themselves(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        parse_expression(text)
    assert "column names, numbers, + - * / and parentheses" in str(err.value)


@pytest.mark.parametrize(
    ("bucket_by", "buckets", "message"),
    [
        ("w", None, r"bucket_by='w' needs buckets="),
        (None, 3, "buckets= needs bucket_by="),
        ("w", 0, "buckets must be a positive int"),
        ("w", True, "buckets must be a positive int or a list"),
        ("w", 2.5, "buckets must be a positive int or a list"),
        ("w", [], "buckets must be a positive int or a list"),
        ("w", "1,2", "buckets must be a positive int or a list"),
        ("w", [1, 1], "must increase strictly"),
        ("w", [2, 1], "must increase strictly"),
        ("w", [1, float("nan")], "must be finite numbers"),
        ("w", [1, "2"], "must be finite numbers"),
        (3, 2, "a str"),
    ],
)
def test_bad_buckets_are_refused(bucket_by: Any, buckets: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_buckets(bucket_by, buckets)
    with pytest.raises(ValueError, match=message):
        LoaderOptions(batch_size=4, bucket_by=bucket_by, buckets=buckets)


def test_columns_are_checked_against_the_index(make_sized: MakeSized, tmp_path: Path) -> None:
    uri = make_sized(10)
    with pytest.raises(ValueError, match=r"bucket_by 'w\*height'.* no column 'w'; its index "
                       r"columns are .*width.*height"):  # fmt: skip
        make_loader(uri, batch_size=4, bucket_by="w*height", buckets=2, out="numpy")
    with Writer(str(tmp_path / "text"), "text") as w:
        for i in range(4):
            w.add(f"s{i}", None, {"tag": f"t{i}", "zero": 0})
    with pytest.raises(ValueError, match=r"column 'tag' .* is not numeric"):
        make_loader(str(tmp_path / "text"), batch_size=2, bucket_by="tag", buckets=2, out="numpy")
    with pytest.raises(ValueError, match=r"bucket_by '1/zero' is not a finite number for 4 items"):
        make_loader(
            str(tmp_path / "text"), batch_size=2, bucket_by="1/zero", buckets=2, out="numpy"
        )


def test_quantile_boundaries_are_deterministic() -> None:
    v = np.random.default_rng(0).random(1000)
    b = boundaries_of(v, 4)
    assert b == boundaries_of(v.copy(), 4) and len(b) == 3
    np.testing.assert_allclose(b, np.quantile(v, [0.25, 0.5, 0.75]))
    assert boundaries_of(np.ones(10), 4) == (1.0,)  # ties merge
    assert boundaries_of(v, 1) == ()
    assert boundaries_of(v, [0.5, 2]) == (0.5, 2.0)


# ---------------------------------------------------------------------- the order


def _check_order(order: np.ndarray, ids: np.ndarray, group: int, n: int, buckets: int) -> None:
    assert sorted(order.tolist()) == list(range(n))  # every item once
    groups = [order[i : i + group] for i in range(0, n, group)]
    mixed = [k for k, g in enumerate(groups) if len(set(ids[g].tolist())) > 1]
    # only the tail's groups (each bucket's remainder, in bucket order) may mix
    tail = sum(int(c) % group for c in np.bincount(ids, minlength=buckets))
    first_tail = (n - tail) // group
    assert all(k >= first_tail for k in mixed)
    assert all(len(set(ids[g].tolist())) == 1 for g in groups[:first_tail])
    assert np.all(np.diff(ids[order[first_tail * group :]]) >= 0)


@pytest.mark.parametrize(("n", "group", "span"), [(1000, 8, 64), (1000, 12, 1000), (97, 5, 7)])
def test_bucket_order_groups_and_covers(n: int, group: int, span: int) -> None:
    ids = np.random.default_rng(1).integers(0, 5, n).astype(np.int32)
    base = PermutationOrder(n, 3, 0)
    order = BucketOrder(base, ids, group, span, seed=3, epoch=0).materialize()
    _check_order(order, ids, group, n, 5)
    again = BucketOrder(PermutationOrder(n, 3, 0), ids, group, span, seed=3, epoch=0)
    # computed in any order of positions: the same items
    pos = np.random.default_rng(2).permutation(n)
    np.testing.assert_array_equal(again.at(pos), order[pos])
    other = BucketOrder(PermutationOrder(n, 3, 1), ids, group, span, seed=3, epoch=1)
    assert not np.array_equal(other.materialize(), order)


def test_bucket_order_is_computed_once_under_concurrent_reads() -> None:
    # the loader's threads (index window, prefetcher, read-ahead) ask one order for
    # positions at the same time: the spans must be computed once, in turn
    n, group, span = 3000, 4, 8
    ids = np.random.default_rng(1).integers(0, 7, n).astype(np.int32)
    want = BucketOrder(PermutationOrder(n, 3, 0), ids, group, span, 3, 0).materialize()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    try:
        for trial in range(5):
            order = BucketOrder(PermutationOrder(n, 3, 0), ids, group, span, 3, 0)
            start = threading.Barrier(4)

            def read(t: int, order: BucketOrder = order, start: threading.Barrier = start) -> Any:
                start.wait()
                pos = np.arange(t, n, 4, dtype=np.int64)
                return np.concatenate([order.at(pos[i : i + 3]) for i in range(0, len(pos), 3)])

            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(read, range(4)))
            for t in range(4):
                np.testing.assert_array_equal(got[t], want[t::4], err_msg=f"trial {trial}")
    finally:
        sys.setswitchinterval(old)


def test_drop_last_leaves_each_buckets_remainder_out(make_sized: MakeSized) -> None:
    uri = make_sized(103)
    dl = make_loader(uri, batch_size=4, drop_last=True, **OPTS)
    bounds = dl.sampler.buckets.boundaries  # type: ignore[union-attr]
    batches = list(dl)
    assert len(batches) == len(dl) and all(len(b["sample_id"]) == 4 for b in batches)
    assert all(len(set(_bucket(b, bounds).tolist())) == 1 for b in batches)
    ids = [s for b in batches for s in b["sample_id"]]
    assert len(ids) == len(set(ids)) == dl.sampler.epoch_items
    counts = np.bincount(dl.sampler.buckets.ids)  # type: ignore[union-attr]
    assert dl.sampler.epoch_items == 103 - int((counts % 4).sum())


def test_every_sample_once_and_batches_of_one_bucket(make_sized: MakeSized) -> None:
    uri = make_sized(103)
    dl = make_loader(uri, batch_size=4, shuffle_buffer=16, **OPTS)
    bounds = dl.sampler.buckets.boundaries  # type: ignore[union-attr]
    assert len(bounds) == 3
    for _ in range(2):  # two epochs
        batches = list(dl)
        ids = [s for b in batches for s in b["sample_id"]]
        assert sorted(ids) == [f"s{i:04d}" for i in range(103)]
        mixed = [k for k, b in enumerate(batches) if len(set(_bucket(b, bounds).tolist())) > 1]
        assert len(mixed) < 4 and all(k >= len(batches) - 4 for k in mixed)  # the tail only
    # the batch order is shuffled: the buckets alternate
    first = [int(_bucket(b, bounds)[0]) for b in batches[:12]]
    assert first != sorted(first)


def test_deterministic_across_runs_and_threads(make_sized: MakeSized) -> None:
    uri = make_sized(60, images=True)
    kw = {**OPTS, "images": ["image"], "resize": 16, "crop": "shortest_edge"}
    a = list(make_loader(uri, batch_size=5, threads=1, **kw))
    b = list(make_loader(uri, batch_size=5, threads=3, **kw))
    assert [x["sample_id"] for x in a] == [x["sample_id"] for x in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x["image"], y["image"])
        np.testing.assert_array_equal(x["image_size"], y["image_size"])
    plain = list(make_loader(uri, batch_size=5, **{**kw, "bucket_by": None, "buckets": None}))
    assert [x["sample_id"] for x in plain] != [x["sample_id"] for x in a]


def test_resume_mid_epoch_gives_the_uninterrupted_tail(make_sized: MakeSized) -> None:
    uri = make_sized(103)
    whole = [b["sample_id"] for b in make_loader(uri, batch_size=4, shuffle_buffer=16, **OPTS)]
    dl = make_loader(uri, batch_size=4, shuffle_buffer=16, **OPTS)
    it = iter(dl)
    for _ in range(7):
        next(it)
    state = dl.state_dict()
    assert state["sampler"]["buckets"]["group"] == 4
    resumed = make_loader(uri, batch_size=4, shuffle_buffer=16, **OPTS)
    resumed.load_state_dict(state)
    assert [b["sample_id"] for b in resumed] == whole[7:]
    # a state of another grouping (or none) is refused
    with pytest.raises(ValueError, match=r"groups 4 items a batch .* this sampler groups 8"):
        make_loader(uri, batch_size=8, shuffle_buffer=16, **OPTS).load_state_dict(state)
    two = make_loader(uri, batch_size=2, world_size=2, rank=0, shuffle_buffer=16, **OPTS)
    two.load_state_dict(state)  # 2 x 2 = 4 items a group: the same order goes on
    with pytest.raises(ValueError, match="state is of a bucketed order"):
        make_loader(uri, batch_size=4, meta=["width"], out="numpy", seed=3).load_state_dict(state)
    other = make_loader(uri, batch_size=4, shuffle_buffer=16, **{**OPTS, "buckets": 3})
    with pytest.raises(ValueError, match=r"bucketing .* differs"):
        other.load_state_dict(state)


@pytest.mark.parametrize("streaming", [False, True])
def test_ranks_disjoint_complete_and_homogeneous(make_sized: MakeSized, streaming: bool) -> None:
    uri = make_sized(103, shard_size=600)
    kw = {**OPTS, "streaming": streaming, "shuffle_buffer": 24, "batch_size": 3}
    for world in (2, 3):
        loaders = [make_loader(uri, rank=r, world_size=world, **kw) for r in range(world)]
        bounds = loaders[0].sampler.buckets.boundaries  # type: ignore[union-attr]
        per_rank = [list(dl) for dl in loaders]
        group = 3 * world
        order = loaders[0].sampler.global_order()
        ids = loaders[0].sampler.buckets.ids  # type: ignore[union-attr]
        _check_order(order, ids, group, 103, len(bounds) + 1)
        counts = np.bincount(ids, minlength=len(bounds) + 1)
        full = (103 - int((counts % group).sum())) // group  # groups of one bucket
        seen: list[str] = []
        for batches in per_rank:
            assert len(batches) == len(per_rank[0])
            for b in batches[:full]:
                assert len(set(_bucket(b, bounds).tolist())) == 1
            seen += [s for b in batches for s in b["sample_id"]]
        # padded by wrapping around at the end (as without buckets): every sample at
        # least once, the padding only in the last batches
        assert set(seen) == {f"s{i:04d}" for i in range(103)}
        assert len(seen) - 103 < world
        # each rank's batch k is its share of global group k
        for r, batches in enumerate(per_rank):
            for k, b in enumerate(batches[:full]):
                want = order[k * group + r : (k + 1) * group : world]
                assert b["sample_id"] == [f"s{i:04d}" for i in want.tolist()]


def test_sampler_takes_a_plan_and_refuses_mixtures(make_sized: MakeSized) -> None:
    from ferroload_loader import mix

    uri = make_sized(10)
    with pytest.raises(ValueError, match="does not apply to mix"):
        make_loader(mix([uri, uri], [1, 1]), batch_size=2, out="numpy", bucket_by="width",
                    buckets=2)  # fmt: skip
    dl = make_loader(uri, batch_size=2, out="numpy", bucket_by="width", buckets=2)
    plan = dl.sampler.buckets
    assert plan is not None and plan.count == 2 and plan.batch_size == 2
    with pytest.raises(ValueError, match="one bucket per item"):
        Sampler(11, buckets=plan)
    assert "bucket" not in Sampler(10).state_dict()


# ---------------------------------------------------------------------- shortest_edge


def test_shortest_edge_keeps_the_aspect_ratio_and_pads(make_sized: MakeSized) -> None:
    uri = make_sized(23, images=True)
    dl = make_loader(uri, batch_size=4, images=["image"], resize=16, crop="shortest_edge",
                     meta=["width", "height"], out="numpy", shuffle=False)  # fmt: skip
    for b in dl:
        sizes = b["image_size"]
        assert sizes.dtype == np.int32 and sizes.shape == (len(b["sample_id"]), 2)
        assert b["image"].shape[1:3] == tuple(sizes.max(axis=0))
        for k in range(len(sizes)):
            h, w = (int(v) for v in sizes[k])
            oh, ow = int(b["height"][k]), int(b["width"][k])
            assert min(h, w) == 16
            assert abs(max(h, w) - max(oh, ow) * 16 / min(oh, ow)) <= 0.5
            i = int(b["sample_id"][k][1:])
            want = ImageDecoder((h, w)).decode(_jpeg(oh, ow, i))
            np.testing.assert_array_equal(b["image"][k, :h, :w], want)
            assert not b["image"][k, h:].any() and not b["image"][k, :, w:].any()


def test_shortest_edge_options_and_failures(tmp_path: Path) -> None:
    root = str(tmp_path / "mixed")
    with Writer(root, "mixed") as w:
        w.declare("image", "jpeg", "tensor", "image")
        w.add("ok", {"image": _jpeg(20, 40, 0)}, {"label": 0})
        w.add("bad", {"image": b"\xff\xd8\xff junk"}, {"label": 1})
        w.add("none", {}, {"label": 2})
    kw = {"images": ["image"], "resize": 8, "crop": "shortest_edge", "shuffle": False}
    b = next(iter(make_loader(root, batch_size=3, on_error="skip", out="numpy", **kw)))
    assert b["sample_id"] == ["ok", "none"]
    assert b["image_size"].tolist() == [[8, 16], [0, 0]]
    assert b["image_present"].tolist() == [True, False]
    assert b["image"].shape == (2, 8, 16, 3)
    from ferroload_codec import DecodeError

    with pytest.raises(DecodeError):
        list(make_loader(root, batch_size=3, out="numpy", **kw))
    chw = next(iter(make_loader(root, batch_size=1, out="numpy", layout="NCHW",
                                dtype="float32", **kw)))  # fmt: skip
    assert chw["image"].shape == (1, 3, 8, 16) and chw["image"].dtype == np.float32
    with pytest.raises(ValueError, match="shorter side to resize=, an int"):
        make_loader(root, batch_size=1, images=["image"], resize=(8, 8), crop="shortest_edge")


def test_shortest_edge_refuses_an_image_that_would_pad_the_batch_huge(tmp_path: Path) -> None:
    # a thin image (or a header claiming 65535x1) resized by its shorter side would be
    # enormous, and the whole batch is padded to it: that image fails, the batch stays small
    root = str(tmp_path / "thin")
    thin = io.BytesIO()
    Image.fromarray(np.zeros((1, 400, 3), dtype=np.uint8)).save(thin, "PNG")
    with Writer(root, "thin") as w:
        w.declare("image", "png", "tensor", "image")
        w.add("ok", {"image": _jpeg(20, 40, 0)}, {"label": 0})
        w.add("thin", {"image": thin.getvalue()}, {"label": 1})
    kw = {"images": ["image"], "resize": 8, "crop": "shortest_edge", "shuffle": False}
    b = next(iter(make_loader(root, batch_size=2, on_error="skip", out="numpy", **kw)))
    assert b["sample_id"] == ["ok"] and b["image"].shape == (1, 8, 16, 3)
    from ferroload_codec import DecodeError

    with pytest.raises(DecodeError, match=r"400x1 image .* would be 3200x8") as got:
        list(make_loader(root, batch_size=2, out="numpy", **kw))
    assert got.value.sample_id == "thin"


def test_iterable_dataset_restored_at_a_bucketed_epochs_end_moves_on(
    make_sized: MakeSized,
) -> None:
    """With `drop_last`, a bucketed epoch ends before `num_items` (each bucket's remainder
    is left out): a state saved there starts the next epoch, as `make_loader`'s does."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from ferroload_loader.torch import FerroIterableDataset

    uri = make_sized(50)
    kw = {"batch_size": 4, "meta": ["width", "height"], "bucket_by": "width/height",
          "buckets": 3, "drop_last": True}  # fmt: skip
    ds = FerroIterableDataset(uri, **kw)
    first = [b["sample_id"] for b in DataLoader(ds, batch_size=None)]
    state = ds.state_dict()
    assert state["sampler"]["consumed"] < 50
    again = FerroIterableDataset(uri, **kw)
    again.load_state_dict(state)
    resumed = [b["sample_id"] for b in DataLoader(again, batch_size=None)]
    dl = make_loader(uri, out="numpy", **kw)
    assert [b["sample_id"] for b in dl] == first
    assert resumed == [b["sample_id"] for b in dl] and len(resumed) == len(first) > 0
