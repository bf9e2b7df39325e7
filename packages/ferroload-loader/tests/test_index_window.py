"""Batches built from an IndexWindow (the index read for many batches at once) equal
batches built on their own; the window reads the index once per window, grows from one
batch, and leaves failures to the batch they belong to (issue 16, "Index at scale")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ferroload_format import Dataset, PayloadRangeError
from ferroload_loader import make_loader, mix
from ferroload_loader._batch import IndexWindow, finish_batch, prepare_batch

from .conftest import MakeDataset, decoded_index

BATCH = 16


def _batches(n: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, BATCH).astype(np.int64) for _ in range(count)]


def _build(dl: Any, items: np.ndarray, **kw: Any) -> dict[str, Any]:
    state = prepare_batch(dl.source, dl.fields, items, seed=0, epoch=0, **kw)
    batch, errors = finish_batch(state, dl.fields, on_error="raise")
    assert not errors
    return batch


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_window_batches_equal_batches_read_alone(make_dataset: MakeDataset) -> None:
    uri = make_dataset(200)
    dl = make_loader(uri, batch_size=BATCH, images=["image"], resize=8, meta=["label", "name"],
                     out="numpy")  # fmt: skip
    batches = _batches(200, 12)
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], len(batches))
    for i, items in enumerate(batches):
        got = _build(dl, items, window=window, index=i)
        _same(got, _build(dl, items))
        assert got["sample_id"] == [f"s{j:05d}" for j in items]
        assert decoded_index(got["image"]) == items.tolist()
    # windows of 1, 8 and (the 3 left of) 64 batches
    assert window.windows == 3
    dl.close()


def test_the_window_is_bounded_in_items(make_dataset: MakeDataset) -> None:
    uri = make_dataset(100)
    dl = make_loader(uri, batch_size=BATCH, meta=["label"], out="numpy")
    batches = _batches(100, 20)
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 20, max_items=2 * BATCH)
    for i, items in enumerate(batches):
        _same(_build(dl, items, window=window, index=i), _build(dl, items))
    assert window.windows == 11  # 1 batch, then 2 at most (32 items): 1 + 9 + 1
    dl.close()


def test_items_other_than_the_orders_are_read_alone(make_dataset: MakeDataset) -> None:
    uri = make_dataset(50)
    dl = make_loader(uri, batch_size=BATCH, meta=["label"], out="numpy")
    batches = _batches(50, 4)
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 4)
    other = np.arange(BATCH, dtype=np.int64)
    assert window.shares(0, other) is None
    _same(_build(dl, other, window=window, index=0), _build(dl, other))
    # a resume from batch 3: the window starts there
    _same(_build(dl, batches[3], window=window, index=3), _build(dl, batches[3]))
    dl.close()


def test_mixtures_take_each_dataset_from_the_window(make_dataset: MakeDataset) -> None:
    a, b = make_dataset(40, name="a"), make_dataset(60, name="b")
    dl = make_loader(mix([a, b], [1, 1]), batch_size=BATCH, images=["image"], resize=8,
                     meta=["label"], out="numpy")  # fmt: skip
    batches = _batches(100, 6)
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 6)
    for i, items in enumerate(batches):
        _same(_build(dl, items, window=window, index=i), _build(dl, items))
    dl.close()


def test_a_damaged_row_fails_its_own_batch(make_dataset: MakeDataset) -> None:
    uri = make_dataset(60)
    dl = make_loader(uri, batch_size=BATCH, images=["image"], resize=8, out="numpy")
    ds = dl.source.datasets[0]
    batches = [np.arange(k * BATCH, (k + 1) * BATCH, dtype=np.int64) for k in range(3)]
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 3)
    _build(dl, batches[0], window=window, index=0)  # window 1: batch 0

    def bad_read(*args: Any, **kwargs: Any) -> Any:
        raise PayloadRangeError("damaged", uri=ds.uri)

    real = Dataset.locate
    ds.locate = lambda name, pos: (  # type: ignore[method-assign]
        bad_read() if (np.asarray(pos) == 40).any() else real(ds, name, pos)
    )
    # window 2 (batches 1 and 2) fails as a whole: batch 1 is read alone, and succeeds
    got = _build(dl, batches[1], window=window, index=1)
    assert got["sample_id"][0] == "s00016"
    with pytest.raises(PayloadRangeError):
        _build(dl, batches[2], window=window, index=2)
    dl.close()
