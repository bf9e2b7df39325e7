"""Batches built from an IndexWindow (the index read for many batches at once) equal
batches built on their own; the window reads the index once per window, grows from one
batch, and leaves failures to the batch they belong to (issue 16, "Index at scale")."""

from __future__ import annotations

import time
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
    # windows of 1, 1 and (the 10 left of) as many batches as fit in 2**21 items
    assert window.windows == 3
    dl.close()


def test_the_window_is_bounded_in_items(make_dataset: MakeDataset) -> None:
    uri = make_dataset(100)
    dl = make_loader(uri, batch_size=BATCH, meta=["label"], out="numpy")
    batches = _batches(100, 20)
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 20, max_items=2 * BATCH)
    for i, items in enumerate(batches):
        _same(_build(dl, items, window=window, index=i), _build(dl, items))
    assert window.windows == 11  # 1, 1, then 2 batches at most (32 items): 2 + 9
    dl.close()


def test_windows_of_an_order_read_in_sequence_double(make_dataset: MakeDataset) -> None:
    """Streaming and dataset order read the index in sequence: a window's cost grows
    with its items, so windows double (no long read for one large window while a small
    one is used) up to a smaller bound; shuffled orders jump to the large bound."""
    from ferroload_loader._batch import LOCAL_WINDOW_ITEMS, WINDOW_ITEMS, window_options

    assert window_options("shard_block") == (LOCAL_WINDOW_ITEMS, 2)
    assert window_options("sequential") == (LOCAL_WINDOW_ITEMS, 2)
    assert window_options("permutation") == (WINDOW_ITEMS, None)
    assert window_options("mixture") == (WINDOW_ITEMS, None)
    uri = make_dataset(400)
    dl = make_loader(uri, batch_size=BATCH, meta=["label"], out="numpy", shuffle=False)
    batches = [np.arange(i * BATCH, (i + 1) * BATCH, dtype=np.int64) for i in range(25)]
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 25, max_items=8 * BATCH,
                         growth=2, background=False)  # fmt: skip
    for i, items in enumerate(batches):
        _same(_build(dl, items, window=window, index=i), _build(dl, items))
    assert window.windows == 7  # 1, 1, 2, 4, 8, then the 9 left: 8 and 1
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
    uri = make_dataset(160)
    dl = make_loader(uri, batch_size=BATCH, images=["image"], resize=8, out="numpy")
    ds = dl.source.datasets[0]
    batches = [np.arange(k * BATCH, (k + 1) * BATCH, dtype=np.int64) for k in range(10)]
    window = IndexWindow(dl.source, dl.fields, lambda i: batches[i], 10, background=False)
    for i in (0, 1):  # windows of one batch each
        _build(dl, batches[i], window=window, index=i)
    real = Dataset.locate

    def locate(name: str, pos: Any) -> Any:
        if (np.asarray(pos) == 5 * BATCH + 3).any():
            raise PayloadRangeError("damaged", uri=ds.uri)
        return real(ds, name, pos)

    ds.locate = locate  # type: ignore[method-assign]
    # the window of batches 2..9 fails as a whole: each batch is read alone, and only
    # the one holding the damaged row fails
    for i in range(2, 10):
        if i == 5:
            with pytest.raises(PayloadRangeError):
                _build(dl, batches[i], window=window, index=i)
        else:
            got = _build(dl, batches[i], window=window, index=i)
            assert got["sample_id"][0] == f"s{i * BATCH:05d}"
    assert window.windows == 2
    dl.close()


def test_the_next_window_is_read_in_the_background(make_dataset: MakeDataset) -> None:
    uri = make_dataset(100)
    dl = make_loader(uri, batch_size=BATCH, meta=["label"], out="numpy")
    batches = _batches(100, 30)
    asked: list[int] = []

    def batch_of(i: int) -> np.ndarray:
        asked.append(i)
        return batches[i]

    window = IndexWindow(dl.source, dl.fields, batch_of, 30)
    _same(_build(dl, batches[0], window=window, index=0), _build(dl, batches[0]))
    deadline = time.monotonic() + 10
    while 1 not in asked and time.monotonic() < deadline:  # batch 1's window, unasked
        time.sleep(0.01)
    assert 1 in asked
    for i in range(1, 30):
        _same(_build(dl, batches[i], window=window, index=i), _build(dl, batches[i]))
    assert window.windows == 3  # 1, 1 and the 28 left
    dl.close()
