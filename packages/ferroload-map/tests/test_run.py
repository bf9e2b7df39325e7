"""The partition runner: inputs, batches, output checks, on_error (with a recording writer)."""

from __future__ import annotations

import io
import logging
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from ferroload_format import Dataset, Writer
from ferroload_map import MapError, MapOutputError, MapSpec, Partition, run_partition


class RecordingWriter:
    """Keeps what `run_partition` stages."""

    def __init__(self) -> None:
        self.parts: dict[int, tuple[list[int], dict[str, list[Any]], dict[str, list[Any]]]] = {}

    def staged(self) -> set[int]:
        return set(self.parts)

    def write_partition(
        self,
        k: int,
        rows: np.ndarray,
        values: Mapping[str, Sequence[Any]],
        payloads: Mapping[str, Sequence[bytes | None]],
    ) -> None:
        self.parts[k] = (
            rows.tolist(),
            {n: v.to_pylist() if isinstance(v, pa.Array) else list(v) for n, v in values.items()},
            {n: list(v) for n, v in payloads.items()},
        )


def run(
    ds: Dataset,
    fn: Any,
    outputs: dict[str, Any],
    *,
    inputs: Sequence[str] = ("label",),
    on_error: Any = "raise",
    batch_size: int = 4,
    start: int = 0,
    stop: int | None = None,
) -> tuple[Any, dict[str, list[Any]], dict[str, list[Any]]]:
    spec = MapSpec.build(
        ds,
        fn,
        inputs=list(inputs),
        outputs=outputs,
        layer="t",
        batch_size=batch_size,
        on_error=on_error,
        version="test",
    )
    writer = RecordingWriter()
    part = Partition(3, start, len(ds) if stop is None else stop)
    result = run_partition(spec, ds, writer, part)
    rows, values, payloads = writer.parts[3]
    assert rows == list(range(part.start, part.stop))
    return result, values, payloads


@pytest.fixture
def ds(make_dataset) -> Dataset:  # type: ignore[no-untyped-def]
    return make_dataset(10, memory=True)  # type: ignore[no-any-return]


def test_batches_see_inputs_and_sample_ids(ds: Dataset) -> None:
    batches: list[dict[str, list[Any]]] = []

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        batches.append(batch)
        return {"n": [len(c) for c in batch["caption"]]}

    result, values, _ = run(ds, fn, {"n": "int64"}, inputs=["image", "caption"], start=2)
    assert [len(b["sample_id"]) for b in batches] == [4, 4]
    assert batches[0]["sample_id"] == ["s00002", "s00003", "s00004", "s00005"]
    assert batches[0]["caption"][0] == "caption 2"
    assert set(batches[0]) == {"sample_id", "image", "caption"}
    img = batches[0]["image"][0]
    assert isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.shape[2] == 3
    assert img.shape[:2] == np.asarray(Image.open(io.BytesIO(ds.get(2)["image"]))).shape[:2]
    assert values["n"] == [len(f"caption {i}") for i in range(2, 10)]
    assert (result.partition, result.num_samples, result.num_skipped, result.fn_calls) == (
        3,
        8,
        0,
        2,
    )


def test_numpy_outputs_and_declared_types(ds: Dataset) -> None:
    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        n = len(batch["label"])
        return {
            "vec": np.full((n, 3), 0.1, dtype=np.float64),
            "small": np.asarray(batch["label"], dtype=np.int32),
            "flag": [x > 2 for x in batch["label"]],
            "seq": [list(range(x)) for x in batch["label"]],
        }

    _, values, _ = run(
        ds,
        fn,
        {"vec": "float32[3]", "small": "uint8", "flag": "bool", "seq": "list<int64>"},
    )
    f32 = float(np.float32(0.1))
    assert values["vec"] == [[f32, f32, f32]] * 10  # rounded to float32, stored as float64
    assert values["small"] == [i % 5 for i in range(10)]
    assert values["flag"] == [i % 5 > 2 for i in range(10)]
    assert values["seq"][3] == [0, 1, 2]


def test_modality_outputs_are_encoded(ds: Dataset) -> None:
    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        n = len(batch["label"])
        return {
            "thumb": np.zeros((n, 4, 5, 3), dtype=np.uint8),
            "gray": [np.full((2, 2), 7, dtype=np.uint8)] * n,
            "arr": [np.arange(x) for x in batch["label"]],
            "note": [f"label {x}" for x in batch["label"]],
            "blob": [bytes([x]) if x else None for x in batch["label"]],
        }

    _, _, payloads = run(
        ds, fn, {"thumb": "png", "gray": "jpg", "arr": "npy", "note": "txt", "blob": "bin"}
    )
    thumb = np.asarray(Image.open(io.BytesIO(payloads["thumb"][0])))
    assert thumb.shape == (4, 5, 3)
    assert Image.open(io.BytesIO(payloads["gray"][0])).format == "JPEG"
    assert np.load(io.BytesIO(payloads["arr"][3])).tolist() == [0, 1, 2]
    assert payloads["note"][2] == b"label 2"
    assert payloads["blob"][:3] == [None, b"\x01", b"\x02"]


@pytest.mark.parametrize("pillow_has_webp", [True, False])
def test_webp_outputs_are_encoded_with_or_without_pillows_libwebp(
    ds: Dataset, monkeypatch: pytest.MonkeyPatch, pillow_has_webp: bool
) -> None:
    """A Pillow built without libwebp still writes .webp outputs (through imagecodecs)."""
    import imagecodecs

    import ferroload_map._values as values_module

    if not pillow_has_webp or not values_module._pillow_writes_webp():
        monkeypatch.setattr(values_module, "_pillow_writes_webp", lambda: False)
    image = np.dstack([np.arange(30, dtype=np.uint8).reshape(5, 6)] * 3)

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"thumb": [image] * len(batch["label"])}

    _, _, payloads = run(ds, fn, {"thumb": "webp"})
    data = payloads["thumb"][0]
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    assert imagecodecs.webp_decode(data).shape == (5, 6, 3)


@pytest.mark.parametrize(
    ("result", "match", "column"),
    [
        ({}, r"misses 'out'", "out"),
        ({"out": [1] * 4, "more": [1] * 4}, r"has undeclared 'more'", "more"),
        ([1, 2, 3, 4], r"returned list; it must return a dict", None),
        ({"out": [1, 2, 3]}, r"output 'out' has 3 values for a batch of 4", "out"),
        ({"out": np.zeros(5)}, r"output 'out' has 5 values for a batch of 4", "out"),
        ({"out": 7}, r"output 'out' is a int, not a sequence", "out"),
        ({"out": "abcd"}, r"output 'out' has a str values", "out"),
    ],
)
def test_wrong_output_shapes(ds: Dataset, result: Any, match: str, column: str | None) -> None:
    for on_error in ("raise", "skip"):  # a wrong shape is a bug in fn, never skipped
        with pytest.raises(MapOutputError, match=match) as info:
            run(ds, lambda b, r=result: r, {"out": "int64"}, start=4, on_error=on_error)
        err = info.value
        assert err.sample_id == "s00004" and "'s00004'" in str(err)
        assert err.column == column and err.layer == "t" and err.partition == 3
        assert isinstance(err, MapError) and isinstance(err, ValueError)


@pytest.mark.parametrize(
    ("declared", "bad", "match"),
    [
        ("int64", "x", "str 'x' is not a int64"),
        ("int64", 1.5, "does not fit int64"),
        ("uint8", 300, "does not fit uint8"),
        ("bool", 1, "is not a bool"),
        ("string", 5, "is not a string"),
        ("float32[3]", [1.0, 2.0], "does not fit float32\\[3\\]"),
        ("float32[3]", np.zeros(2), "does not fit float32\\[3\\]"),
        ("list<int64>", "abc", "is not a list<int64>"),
    ],
)
def test_values_that_do_not_fit_name_the_sample(
    ds: Dataset, declared: str, bad: Any, match: str
) -> None:
    good = {"int64": 1, "uint8": 1, "bool": True, "string": "a", "list<int64>": [1]}.get(
        declared, [1.0, 2.0, 3.0]
    )

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"out": [bad if sid == "s00006" else good for sid in batch["sample_id"]]}

    with pytest.raises(MapOutputError, match=match) as info:
        run(ds, fn, {"out": declared})
    assert info.value.sample_id == "s00006" and "'s00006'" in str(info.value)
    result, values, _ = run(ds, fn, {"out": declared}, on_error="skip")
    assert values["out"][6] is None and values["out"][5] is not None
    assert result.num_skipped == 1 and result.skipped[0].sample_id == "s00006"


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.zeros((4, 4), dtype=np.float32), "must be uint8"),
        (12, "cannot be stored as .png"),
        ("text", "cannot be stored as .png"),
    ],
)
def test_bad_payloads_name_the_sample(ds: Dataset, value: Any, match: str) -> None:
    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"thumb": [value if s == "s00001" else b"ok" for s in batch["sample_id"]]}

    with pytest.raises(MapOutputError, match=match) as info:
        run(ds, fn, {"thumb": "png"})
    assert info.value.sample_id == "s00001" and info.value.column == "thumb"


def test_fn_exception_is_a_map_error_naming_the_batch(ds: Dataset) -> None:
    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        if "s00005" in batch["sample_id"]:
            raise ZeroDivisionError("boom")
        return {"out": batch["label"]}

    with pytest.raises(MapError, match=r"ZeroDivisionError: boom.*'s00004'") as info:
        run(ds, fn, {"out": "int64"})
    err = info.value
    assert err.sample_id == "s00004"  # the first of the failing batch s00004..s00007
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert isinstance(err, RuntimeError) and not isinstance(err, MapOutputError)
    assert "on_error='skip'" in str(err)


def test_skip_retries_the_failing_batch_sample_by_sample(
    ds: Dataset, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[list[str]] = []

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        calls.append(batch["sample_id"])
        if {"s00005", "s00006"} & set(batch["sample_id"]):
            raise ValueError("bad sample")
        return {"out": [x * 10 for x in batch["label"]], "txt": ["t"] * len(batch["label"])}

    with caplog.at_level(logging.WARNING, logger="ferroload_map"):
        result, values, payloads = run(ds, fn, {"out": "int64", "txt": "txt"}, on_error="skip")
    assert not caplog.records  # skip: counted, logged once by map_dataset, not per sample
    assert values["out"] == [0, 10, 20, 30, 40, None, None, 20, 30, 40]
    assert payloads["txt"][5:7] == [None, None] and payloads["txt"][7] == b"t"
    assert result.num_skipped == 2
    assert [s.sample_id for s in result.skipped] == ["s00005", "s00006"]
    assert result.skipped[0].error == "ValueError: bad sample"
    assert result.skipped[0].partition == 3
    # 3 batches, plus one retry per sample of the failing batch s00004..s00007
    assert result.fn_calls == len(calls) == 3 + 4
    with caplog.at_level(logging.WARNING, logger="ferroload_map"):
        run(ds, fn, {"out": "int64", "txt": "txt"}, on_error="warn")
    assert sum("s00005" in r.getMessage() for r in caplog.records) == 1


def test_undecodable_images(tmp_path: Any) -> None:
    uri = f"memory://map-run-{id(tmp_path)}/bad"
    with Writer(uri, "bad") as w:
        w.declare("image", "png", "tensor", "image")
        buf = io.BytesIO()
        Image.new("RGB", (4, 4), "red").save(buf, "PNG")
        w.add("good", {"image": buf.getvalue()}, {"label": 1})
        w.add("broken", {"image": b"not an image"}, {"label": 2})
        w.add("missing", None, {"label": 3})
    ds = Dataset.open(uri)

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"h": [None if im is None else im.shape[0] for im in batch["image"]]}

    with pytest.raises(MapError, match="'image' of sample 'broken'") as info:
        run(ds, fn, {"h": "int64"}, inputs=["image"])
    assert info.value.sample_id == "broken" and info.value.column == "image"
    result, values, _ = run(ds, fn, {"h": "int64"}, inputs=["image"], on_error="skip")
    assert values["h"] == [4, None, None]
    assert [s.sample_id for s in result.skipped] == ["broken"]
    assert "decoding 'image'" in result.skipped[0].error


def test_map_errors_pickle_with_their_context() -> None:
    err = MapOutputError("bad", uri="u", layer="l", sample_id="s1", column="c", partition=2)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is MapOutputError and str(back) == "bad"
    assert (back.uri, back.layer, back.sample_id, back.column, back.partition) == (
        "u",
        "l",
        "s1",
        "c",
        2,
    )
