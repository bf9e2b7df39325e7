"""Seeded augmentation and model-ready image batches through `make_loader`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferroload_format import Writer
from ferroload_loader import FerroLoader, RandomResizedCrop, make_loader

torch = pytest.importorskip("torch")

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
AUGMENT: dict[str, Any] = {"crop": "random", "hflip": 0.5}
MODEL_READY: dict[str, Any] = {
    **AUGMENT, "layout": "NCHW", "dtype": "float32", "normalize": IMAGENET,
}  # fmt: skip


def photo(h: int, w: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack(
        [255 * x / w, 128 + 100 * np.cos(y / (5 + seed % 7)), 255 * (x + 2 * y) / (w + 2 * h)],
        axis=-1,
    )
    return np.clip(img + r.normal(0, 4, img.shape), 0, 255).astype(np.uint8)


def write_jpegs(root: Path, n: int = 40) -> str:
    """n JPEGs of assorted sizes (48x64 mostly, some 80x60 and 64x64), labels i % 5."""
    sizes = [(48, 64), (80, 60), (48, 64), (64, 64)]
    with Writer(str(root), "augment-test", shard_size=1 << 15) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(photo(*sizes[i % 4], seed=i)).save(buf, "JPEG", quality=90)
            w.add(f"s{i:04d}", {"image": buf.getvalue()}, {"label": i % 5})
    return str(root)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_jpegs(tmp_path_factory.mktemp("augment") / "ds")


def loader(uri: str, **kw: Any) -> FerroLoader:
    opts: dict[str, Any] = {
        "batch_size": 8, "images": ["image"], "meta": ["label"], "resize": (24, 32),
        "out": "numpy", "seed": 3, "threads": 2,
    }  # fmt: skip
    opts.update(kw)
    return make_loader(uri, **opts)


def by_id(batches: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for b in batches:
        images = np.asarray(b["image"].float() if torch.is_tensor(b["image"]) else b["image"])
        out.update(zip(b["sample_id"], images, strict=True))
    return out


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return len(a) == len(b) and all(
        x["sample_id"] == y["sample_id"] and np.array_equal(np.asarray(x["image"]), y["image"])
        for x, y in zip(a, b, strict=True)
    )


# ------------------------------------------------------------------ determinism


@pytest.mark.parametrize("out", ["numpy", "torch"])
def test_batches_are_bit_identical_whatever_the_decode_threads(jpegs: str, out: str) -> None:
    one = list(loader(jpegs, threads=1, out=out, **MODEL_READY))
    two = list(loader(jpegs, threads=2, out=out, **MODEL_READY))
    assert one[0]["image"].shape == (8, 3, 24, 32)
    assert str(one[0]["image"].dtype).endswith("float32")
    assert same(one, two)


def test_each_rank_gets_the_same_pixels_as_a_single_process(jpegs: str) -> None:
    single = by_id(list(loader(jpegs, world_size=1, rank=0, **MODEL_READY)))
    seen = set()
    for rank in (0, 1):
        part = by_id(list(loader(jpegs, world_size=2, rank=rank, out="torch", **MODEL_READY)))
        for sid, img in part.items():
            assert np.array_equal(img, single[sid]), (rank, sid)
        seen |= set(part)
    assert seen == set(single)


def test_a_resumed_epoch_delivers_the_same_remaining_batches(jpegs: str) -> None:
    full = loader(jpegs, **MODEL_READY)
    full.set_epoch(2)
    want = list(full)
    first = loader(jpegs, **MODEL_READY)
    first.set_epoch(2)
    it = iter(first)
    got_first = [next(it), next(it)]
    state = first.state_dict()
    first.close()
    resumed = loader(jpegs, threads=1, **MODEL_READY)  # other thread count, too
    resumed.load_state_dict(state)
    assert same(got_first, want[:2])
    assert same(list(resumed), want[2:])


def test_each_epoch_draws_new_crops_and_flips(jpegs: str) -> None:
    dl = loader(jpegs, **AUGMENT)
    dl.set_epoch(0)
    e0 = by_id(list(dl))
    dl.set_epoch(1)
    e1 = by_id(list(dl))
    changed = sum(not np.array_equal(e0[k], e1[k]) for k in e0)
    assert changed >= 0.9 * len(e0)
    again = loader(jpegs, **AUGMENT)
    again.set_epoch(1)
    assert all(np.array_equal(v, e1[k]) for k, v in by_id(list(again)).items())


def test_a_whole_image_crop_is_the_plain_resize(jpegs: str) -> None:
    whole = RandomResizedCrop(scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3))  # the 48x64 images
    plain, cropped = by_id(list(loader(jpegs))), by_id(list(loader(jpegs, crop=whole)))
    ids = [f"s{i:04d}" for i in range(0, 40, 2)]  # the 48 x 64 ones
    assert all(np.array_equal(plain[k], cropped[k]) for k in ids)
    assert sum(not np.array_equal(plain[k], cropped[k]) for k in plain) >= 15  # the others


# ------------------------------------------------------------------ values


def test_float_normalised_nchw_equals_torchvision_on_the_uint8_batch(jpegs: str) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    ref = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(*IMAGENET)])
    u8 = list(loader(jpegs, out="torch", **AUGMENT))
    f32 = list(loader(jpegs, out="torch", **MODEL_READY))
    f16 = list(loader(jpegs, out="torch", **{**MODEL_READY, "dtype": torch.float16}))
    bf16 = list(loader(jpegs, out="torch", **{**MODEL_READY, "dtype": "bfloat16"}))
    plain = list(loader(jpegs, out="torch", **{**AUGMENT, "dtype": np.float32}))
    for a, b, c, d, e in zip(u8, f32, f16, bf16, plain, strict=True):
        assert a["image"].dtype == torch.uint8 and a["image"].shape[1:] == (24, 32, 3)
        want = ref(a["image"].permute(0, 3, 1, 2))
        assert torch.equal(b["image"], want)  # bit for bit
        assert torch.equal(c["image"], want.half())
        assert d["image"].dtype == torch.bfloat16 and torch.equal(d["image"], want.bfloat16())
        assert torch.equal(e["image"], a["image"].float() * (1 / 255))  # NHWC, [0, 1]


def test_a_fields_own_options_win(jpegs: str) -> None:
    dl = loader(jpegs, images={"image": {"dtype": "float16", "layout": "HWC"}}, **MODEL_READY)
    b = next(iter(dl))
    assert b["image"].dtype == np.float16 and b["image"].shape == (8, 24, 32, 3)
    dl.close()


def test_the_prefetch_budget_counts_the_float_size(jpegs: str) -> None:
    items = np.arange(8)
    u8 = loader(jpegs).estimate_bytes(items)
    f32 = loader(jpegs, **MODEL_READY).estimate_bytes(items)
    bf16 = loader(jpegs, out="torch", **{**MODEL_READY, "dtype": "bfloat16"}).estimate_bytes(items)
    pixels = 8 * 24 * 32 * 3
    assert f32 - u8 == 3 * pixels and bf16 - u8 == pixels


# ------------------------------------------------------------------ transform


def test_a_transform_runs_on_the_final_batch(jpegs: str) -> None:
    def add_mean(batch: dict[str, Any]) -> dict[str, Any]:
        assert torch.is_tensor(batch["image"])  # after the conversion to tensors
        return {**batch, "mean": batch["image"].mean(dim=(1, 2, 3))}

    for b in loader(jpegs, out="torch", transform=add_mean, **MODEL_READY):
        assert b["mean"].shape == (len(b["sample_id"]),)
        assert torch.allclose(b["mean"], b["image"].mean(dim=(1, 2, 3)))


def test_a_transforms_rng_is_seeded_by_seed_epoch_and_items(jpegs: str) -> None:
    def draw(batch: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        batch["noise"] = rng.random(len(batch["sample_id"]))
        return batch

    def noise(dl: FerroLoader, epoch: int) -> list[list[float]]:
        dl.set_epoch(epoch)
        return [b["noise"].tolist() for b in dl]

    a = noise(loader(jpegs, transform=draw, threads=1), 0)
    b = noise(loader(jpegs, transform=draw, threads=2), 0)
    assert a == b
    assert len({tuple(x) for x in a}) == len(a)  # each batch its own draws
    assert noise(loader(jpegs, transform=draw), 1) != a
    assert noise(loader(jpegs, transform=draw, seed=4), 0) != a
    # resumed: the remaining batches draw what the uninterrupted run drew
    first = loader(jpegs, transform=draw)
    it = iter(first)
    next(it)
    state = first.state_dict()
    first.close()
    resumed = loader(jpegs, transform=draw, batch_size=8)
    resumed.load_state_dict(state)
    assert [x["noise"].tolist() for x in resumed] == a[1:]


def test_transform_errors_reach_the_loop_naming_the_transform(jpegs: str) -> None:
    def broken(batch: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("no such column")

    with pytest.raises(KeyError, match="no such column") as info:
        list(loader(jpegs, transform=broken))
    assert any("transform" in n and "broken" in n for n in info.value.__notes__)
    with pytest.raises(TypeError, match="must return the batch"):
        list(loader(jpegs, transform=lambda b: None))
    with pytest.raises(TypeError, match="callable"):
        loader(jpegs, transform="flip")


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dtype": "int8"}, ValueError, "dtype must be one of"),
        ({"dtype": torch.int32}, ValueError, "dtype must be one of"),
        ({"layout": "CHW"}, ValueError, "layout must be 'NHWC' or 'NCHW'"),
        ({"normalize": IMAGENET, "dtype": "uint8"}, ValueError, "normalize gives float"),
        ({"normalize": (0.5,)}, ValueError, r"normalize must be \(mean, std\)"),
        ({"normalize": ((0.5, 0.5), (0.2, 0.2, 0.2))}, ValueError, "mean must be"),
        ({"normalize": ((0.5,) * 3, (0.0,) * 3)}, ValueError, "std must be positive"),
        ({"dtype": "bfloat16"}, ValueError, "bfloat16 .* out='torch'"),
        ({"hflip": 2}, ValueError, "probability"),
        ({"crop": "sideways"}, ValueError, "RandomResizedCrop"),
        ({"crop": "random", "images": [], "video": {"image": {"num_frames": 2}}},
         ValueError, "applies to images"),
    ],
)  # fmt: skip
def test_bad_options_are_refused(
    jpegs: str, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        loader(jpegs, **kwargs)


def test_random_resized_crop_checks_its_ranges() -> None:
    assert RandomResizedCrop() == RandomResizedCrop((0.08, 1.0), (3 / 4, 4 / 3))
    for scale, ratio, match in (
        ((0.0, 1.0), (1.0, 1.0), "0 < low"),
        ((0.6, 0.5), (1.0, 1.0), "low <= high"),
        ((0.5, 1.0), (0.0, 1.0), "positive"),
        ((0.5, 1.0), (2.0, 1.0), "low <= high"),
    ):
        with pytest.raises(ValueError, match=match):
            RandomResizedCrop(scale, ratio)


# ------------------------------------------------------------------ batch arrays


def _address(arr: Any) -> int:
    return int(arr.data_ptr()) if torch.is_tensor(arr) else int(arr.__array_interface__["data"][0])


@pytest.mark.parametrize("out", ["numpy", "torch"])
def test_batch_arrays_are_reused_once_let_go(jpegs: str, out: str) -> None:
    """A loop that drops each batch gets its arrays back (no page faults for new ones)."""
    dl = loader(jpegs, out=out, prefetch_bytes=0, **MODEL_READY)
    addresses = {_address(b["image"]) for b in dl}
    assert len(addresses) <= 4 < len(dl)  # five batches in at most four arrays
    assert dl.fields[0].buffers.reused >= 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("out", ["numpy", "torch"])
def test_batches_still_held_are_never_overwritten(jpegs: str, out: str) -> None:
    kept = list(loader(jpegs, out=out, **MODEL_READY))  # every batch alive at once
    assert len({_address(b["image"]) for b in kept}) == len(kept)
    views = [b["image"][:2] for b in loader(jpegs, out=out, **MODEL_READY)]  # views only
    fresh = list(loader(jpegs, out=out, **MODEL_READY))
    for v, b in zip(views, fresh, strict=True):
        assert np.array_equal(np.asarray(v), np.asarray(b["image"][:2]))
    again = list(loader(jpegs, out=out, **MODEL_READY))
    assert all(np.array_equal(a["image"], b["image"]) for a, b in zip(kept, again, strict=True))
