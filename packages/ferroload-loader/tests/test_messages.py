"""What the loader's errors say: each names the field or column and what to do next."""

from __future__ import annotations

import pytest

from ferroload_format import QueryError, UnsafeQueryError
from ferroload_loader import make_loader

from .conftest import MakeDataset


def test_image_without_a_size_says_how_to_give_one(make_dataset: MakeDataset) -> None:
    uri = make_dataset(4)
    with pytest.raises(ValueError, match="needs an output size") as info:
        make_loader(uri, batch_size=2, images=["image"], out="numpy")
    message = str(info.value)
    assert "image field 'image' needs an output size: pass resize=(h, w)" in message
    assert "images={'image': {'size': (h, w)}}" in message  # the field's own name, filled in
    assert "name!r" not in message


def test_a_typo_in_where_lists_the_datasets_columns(make_dataset: MakeDataset) -> None:
    uri = make_dataset(4)
    with pytest.raises(QueryError) as info:
        make_loader(uri, batch_size=4, where="lable = 1", out="numpy", meta=["label"])
    first = str(info.value).splitlines()[0]
    assert "the WHERE clause 'lable = 1'" in first
    assert "Did you mean 'label'?" in first
    assert "The dataset's columns are sample_id, shard, image, label, name, score." in first
    assert "_ferroload" not in str(info.value)


@pytest.mark.parametrize(
    "where",
    [
        "label = 1) UNION ALL SELECT -1 WHERE (true",
        "EXISTS (SELECT * FROM glob('.tmp/*'))",
        "current_setting('temp_directory') <> ''",
    ],
)
def test_where_stays_in_the_query_sandbox(make_dataset: MakeDataset, where: str) -> None:
    uri = make_dataset(4)
    with pytest.raises(UnsafeQueryError):
        make_loader(uri, batch_size=4, where=where, out="numpy", meta=["label"])
