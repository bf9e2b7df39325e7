"""`LoaderStats`: counts exact, stage times non-negative and adding up (never timed)."""

from __future__ import annotations

import time

import pytest

from ferroload_format import Dataset
from ferroload_loader import FerroLoader, LoaderStats, make_loader

from .conftest import MakeDataset

STAGES = ("prepare", "decode", "collate", "wait", "blocked")


def loader(uri: str, **kw: object) -> FerroLoader:
    opts: dict[str, object] = {
        "batch_size": 8,
        "images": ["image"],
        "meta": ["label"],
        "resize": (12, 16),
        "out": "numpy",
        "seed": 0,
    }
    opts.update(kw)
    return make_loader(uri, **opts)  # type: ignore[arg-type]


def encoded_bytes(uri: str, items: list[int] | None = None) -> int:
    """The encoded image bytes of the dataset (or of `items`), as the index locates them."""
    ds = Dataset.open(uri)
    rows = list(range(len(ds))) if items is None else items
    return sum(len(v) for v in ds.read(rows, "image") if v is not None)


def check_times(st: LoaderStats) -> None:
    for name in STAGES:
        assert getattr(st, f"{name}_seconds") >= 0.0
    assert st.first_batch_seconds >= 0.0
    assert st.build_seconds == st.decode_seconds + st.collate_seconds


def test_a_fresh_loader_has_counted_nothing(make_dataset: MakeDataset) -> None:
    st = loader(make_dataset(10)).stats
    assert (st.batches, st.samples, st.prepared, st.bytes_read, st.skipped) == (0, 0, 0, 0, 0)
    assert st.per_batch() == dict.fromkeys(STAGES, 0.0)
    assert st.build_seconds == 0.0 and st.first_batch_seconds == 0.0


def test_a_pass_counts_batches_samples_and_bytes_exactly(make_dataset: MakeDataset) -> None:
    uri = make_dataset(50)
    dl = loader(uri)
    got = [len(b["sample_id"]) for b in dl]
    st = dl.stats
    assert got == [8] * 6 + [2]
    assert (st.batches, st.samples, st.prepared, st.skipped) == (7, 50, 7, 0)
    assert st.bytes_read == encoded_bytes(uri)
    check_times(st)
    assert st.decode_seconds > 0.0 and st.prepare_seconds > 0.0
    assert st.first_batch_seconds > 0.0
    per = st.per_batch()
    assert set(per) == set(STAGES)
    assert per["decode"] == pytest.approx(st.decode_seconds / 7)
    # a second pass adds to the counts
    assert sum(len(b["sample_id"]) for b in dl) == 50
    assert (st.batches, st.samples, st.prepared) == (14, 100, 14)
    assert st.bytes_read == 2 * encoded_bytes(uri)


def test_the_stages_fit_in_the_pass(make_dataset: MakeDataset) -> None:
    """The prefetch thread's stages run one after the other: together no longer than the
    pass (they may be shorter: thread start, hand-offs)."""
    dl = loader(make_dataset(64), out="torch") if _has_torch() else loader(make_dataset(64))
    t0 = time.perf_counter()
    n = sum(len(b["sample_id"]) for b in dl)
    elapsed = time.perf_counter() - t0
    st = dl.stats
    assert n == 64 and st.batches == 8
    check_times(st)
    busy = st.prepare_seconds + st.decode_seconds + st.collate_seconds + st.blocked_seconds
    assert busy <= elapsed
    assert st.wait_seconds <= elapsed
    assert st.first_batch_seconds <= elapsed


def test_skipped_samples_are_counted_and_named(make_dataset: MakeDataset) -> None:
    uri = make_dataset(30, corrupt=(7, 12), missing=(3,))
    dl = loader(uri, batch_size=10, on_error="skip")
    assert sum(len(b["sample_id"]) for b in dl) == 28
    st = dl.stats
    assert (st.batches, st.samples, st.skipped, st.prepared) == (3, 28, 2, 3)
    assert sorted(st.skipped_ids) == ["s00007", "s00012"]
    # the encoded bytes read, corrupt ones too; the missing image has none
    assert st.bytes_read == encoded_bytes(uri)
    check_times(st)


def test_a_broken_off_pass_counts_what_was_delivered(make_dataset: MakeDataset) -> None:
    dl = loader(make_dataset(80), prefetch_bytes=1)
    for k, b in enumerate(dl):
        assert len(b["sample_id"]) == 8
        if k == 2:
            break
    dl.close()
    st = dl.stats
    assert (st.batches, st.samples) == (3, 24)
    assert 3 <= st.prepared <= 10
    check_times(st)


def test_metadata_only_reads_no_payload_bytes(make_dataset: MakeDataset) -> None:
    dl = loader(make_dataset(20), images=[], resize=None)
    assert sum(len(b["sample_id"]) for b in dl) == 20
    st = dl.stats
    assert (st.batches, st.samples, st.bytes_read) == (3, 20, 0)
    check_times(st)


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
