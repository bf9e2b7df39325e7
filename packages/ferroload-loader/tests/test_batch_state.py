"""A batch's state: one dataset's ids and payloads taken in batch order as they are, a
mixture's put back in batch order, and item seeds computed only when read (issue 19,
"Tiny samples at the limit")."""

from __future__ import annotations

import numpy as np

from ferroload_loader import make_loader, mix
from ferroload_loader._batch import finish_batch, prepare_batch
from ferroload_loader._fields import BatchState, item_seeds, read_index, whole_share

from .conftest import MakeDataset, decoded_index


def test_one_dataset_batch_is_in_batch_order(make_dataset: MakeDataset) -> None:
    uri = make_dataset(50, missing=(7,))
    dl = make_loader(uri, batch_size=8, images=["image"], resize=8, meta=["label"], out="numpy")
    items = np.array([9, 3, 7, 41, 0, 22, 3, 15], dtype=np.int64)  # a repeat, an absent one
    state = prepare_batch(dl.source, dl.fields, items, seed=1, epoch=2)
    assert state.sample_ids == [f"s{i:05d}" for i in items.tolist()]
    assert [p is None for p in state.payloads["image"]] == [i == 7 for i in items.tolist()]
    batch, errors = finish_batch(state, dl.fields, on_error="raise")
    assert not errors
    assert batch["sample_id"] == [f"s{i:05d}" for i in items.tolist()]
    assert batch["image_present"].tolist() == [i != 7 for i in items.tolist()]
    kept = [i for i in items.tolist() if i != 7]
    assert decoded_index(batch["image"][batch["image_present"]]) == kept
    assert not batch["image"][~batch["image_present"]].any()
    assert batch["label"].tolist() == [i % 7 for i in items.tolist()]
    dl.close()


def test_a_mixture_batch_is_in_batch_order(make_dataset: MakeDataset) -> None:
    a, b = make_dataset(20, name="a"), make_dataset(30, name="b")
    dl = make_loader(mix([a, b], [1, 1]), batch_size=6, images=["image"], resize=8,
                     meta=["label"], out="numpy")  # fmt: skip
    items = np.array([25, 1, 44, 19, 20, 0], dtype=np.int64)  # b, a, b, a, b, a
    state = prepare_batch(dl.source, dl.fields, items, seed=0, epoch=0)
    local = [i if i < 20 else i - 20 for i in items.tolist()]
    assert state.sample_ids == [f"s{i:05d}" for i in local]
    batch, _ = finish_batch(state, dl.fields, on_error="raise")
    assert decoded_index(batch["image"]) == local
    dl.close()


def test_item_seeds_are_computed_when_read_and_equal_item_seeds() -> None:
    items = np.array([5, 0, 123456789], dtype=np.int64)
    state = BatchState(items=items, sample_ids=["a", "b", "c"], seed_epoch=(3, 4),
                       ok=np.ones(3, dtype=np.bool_))  # fmt: skip
    assert state._seeds is None
    assert state.seeds == item_seeds(3, 4, items)
    assert state.seeds is state.seeds  # computed once
    assert all(type(s) is int for s in state.seeds)


def test_whole_share_is_one_share_of_every_slot_in_order(make_dataset: MakeDataset) -> None:
    """`whole_share` reads a share's first and last slot only: every way a loader makes
    shares (one dataset, a mixture, a window's slices) gives distinct, increasing slots."""
    a, b = make_dataset(20), make_dataset(20)
    one = make_loader(a, batch_size=8, meta=["label"], out="numpy")
    items = np.array([5, 1, 19, 0], dtype=np.int64)
    shares = read_index(one.source, one.fields, items)
    assert whole_share(shares, 4)
    assert not whole_share(shares, 5)
    assert whole_share(read_index(one.source, one.fields, items[:0]), 0)
    both = make_loader(mix([a, b], [1, 1]), batch_size=8, meta=["label"], out="numpy")
    split = read_index(both.source, both.fields, np.array([3, 25, 4, 30], dtype=np.int64))
    assert len(split) == 2 and not whole_share(split, 4)
    for s in split:
        assert np.all(np.diff(s.slots) > 0)
        assert not whole_share([s], len(s.slots))  # slots [0, 2] and [1, 3]
    # a window's slice of a share: its slots counted from the batch's first
    part = shares[0].slice(1, 3, 1)
    assert part.slots.tolist() == [0, 1] and whole_share([part], 2)
    assert not whole_share([shares[0].slice(1, 3, 0)], 2)  # slots [1, 2]
