from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import ColumnNotFoundError, Dataset, Modality
from ferroload_map import MapSpec, MapSpecError, fn_identity, parse_type, storage_type
from ferroload_map._spec import type_string


def ident(batch: dict[str, list[Any]]) -> dict[str, Any]:
    return {"out": batch["label"]}


def other(batch: dict[str, list[Any]]) -> dict[str, Any]:
    return {"out": [x + 1 for x in batch["label"]]}


@pytest.fixture
def ds(make_dataset) -> Dataset:  # type: ignore[no-untyped-def]
    return make_dataset(6, memory=True)  # type: ignore[no-any-return]


def spec(ds: Dataset, fn: Any = ident, **kw: Any) -> MapSpec:
    args: dict[str, Any] = {"inputs": ["label"], "outputs": {"out": "int64"}, "layer": "l"}
    args.update(kw)
    return MapSpec.build(ds, fn, **args)


# ------------------------------------------------------------------ types


@pytest.mark.parametrize(
    ("text", "arrow", "stored"),
    [
        ("int64", pa.int64(), pa.int64()),
        ("int", pa.int64(), pa.int64()),
        ("uint8", pa.uint8(), pa.int64()),
        ("float32", pa.float32(), pa.float64()),
        ("float64", pa.float64(), pa.float64()),
        ("bool", pa.bool_(), pa.bool_()),
        ("string", pa.string(), pa.string()),
        ("binary", pa.binary(), pa.binary()),
        ("float32[3]", pa.list_(pa.float32(), 3), pa.list_(pa.float64())),
        ("list<float32>", pa.list_(pa.float32()), pa.list_(pa.float64())),
        ("list<int64[2]>", pa.list_(pa.list_(pa.int64(), 2)), pa.list_(pa.list_(pa.int64()))),
    ],
)
def test_type_strings(text: str, arrow: pa.DataType, stored: pa.DataType) -> None:
    assert parse_type(text) == arrow
    assert parse_type(type_string(arrow)) == arrow
    assert storage_type(arrow) == stored


@pytest.mark.parametrize("text", ["int128", "float32[0]", "list<>", "list<foo>", "[3]"])
def test_unknown_type_strings(text: str) -> None:
    with pytest.raises(ValueError, match="unknown metadata type"):
        parse_type(text)


def test_outputs_are_types_or_modalities(ds: Dataset) -> None:
    s = spec(
        ds,
        outputs={
            "a": "float32[3]",
            "b": pa.int32(),
            "thumb": "png",
            "arr": "npy",
            "note": "txt",
            "blob": "bin",
            "odd": "xyz",
            "given": Modality("ignored", "jpg", "tensor", "image"),
        },
    )
    assert dict(s.columns) == {"a": pa.list_(pa.float32(), 3), "b": pa.int32()}
    assert s.storage_columns == {"a": pa.list_(pa.float64()), "b": pa.int64()}
    assert s.modalities == (
        Modality("thumb", "png", "tensor", "image"),
        Modality("arr", "npy", "bytes", "npy"),
        Modality("note", "txt", "text", "raw"),
        Modality("blob", "bin", "bytes", "raw"),
        Modality("odd", "xyz", "bytes", "raw"),
        Modality("given", "jpg", "tensor", "image"),
    )
    assert s.output_names == ("a", "b", "thumb", "arr", "note", "blob", "odd", "given")


@pytest.mark.parametrize(
    ("outputs", "match"),
    [
        ({}, "non-empty dict"),
        ({"Bad": "int64"}, "output name 'Bad'"),
        ({"sample_id": "int64"}, "output name 'sample_id'"),
        ({"x": "list<what>"}, "neither a metadata type"),
        ({"x": "a.b"}, "neither a metadata type"),
        ({"x": 3}, "declared as int"),
    ],
)
def test_bad_outputs(ds: Dataset, outputs: dict[str, Any], match: str) -> None:
    with pytest.raises(MapSpecError, match=match) as info:
        spec(ds, outputs=outputs)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"layer": "Bad Name"}, "layer name"),
        ({"batch_size": 0}, "batch_size"),
        ({"on_error": "ignore"}, "on_error"),
        ({"version": ""}, "version"),
        ({"inputs": "label"}, r"inputs=\['label'\]"),
    ],
)
def test_bad_options(ds: Dataset, kw: dict[str, Any], match: str) -> None:
    with pytest.raises(MapSpecError, match=match):
        spec(ds, **kw)


def test_inputs_are_classified(ds: Dataset) -> None:
    s = spec(ds, inputs=["image", "label", "sample_id", "caption", "label"])
    assert [(i.name, i.kind) for i in s.inputs] == [
        ("image", "image"),
        ("label", "meta"),
        ("caption", "meta"),
    ]


def test_unknown_input(ds: Dataset) -> None:
    with pytest.raises(ColumnNotFoundError, match="'nope'") as info:
        spec(ds, inputs=["nope"])
    assert info.value.column == "nope"


# ------------------------------------------------------------------ identity


def test_same_function_same_identity(ds: Dataset) -> None:
    assert spec(ds).identity == spec(ds).identity
    assert len(spec(ds).identity) == 64
    assert spec(ds).identity != spec(ds, other).identity


def test_identity_ignores_batch_size_and_on_error(ds: Dataset) -> None:
    assert spec(ds).identity == spec(ds, batch_size=7, on_error="skip").identity


@pytest.mark.parametrize(
    "kw",
    [
        {"layer": "l2"},
        {"inputs": ["label", "caption"]},
        {"outputs": {"out": "float64"}},
        {"outputs": {"out2": "int64"}},
        {"version": "v1"},
    ],
)
def test_identity_covers_layer_inputs_outputs_and_version(ds: Dataset, kw: dict[str, Any]) -> None:
    assert spec(ds, **kw).identity != spec(ds).identity


def test_identity_covers_the_base_version(ds: Dataset) -> None:
    from ferroload_format import Writer

    with Writer(ds.uri) as w:
        w.declare("image", "png", "tensor", "image")
        w.add("extra", None, {"label": 1, "caption": "x"})
    assert spec(Dataset.open(ds.uri)).identity != spec(ds).identity


def _load(path: Path, name: str) -> Any:
    loader = importlib.util.spec_from_file_location(name, path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    loader.loader.exec_module(module)
    return module


def test_edited_source_changes_identity_and_version_overrides(ds: Dataset, tmp_path: Path) -> None:
    # the identity is computed from the source as it is when the map runs
    path = tmp_path / "edited_fn_mod.py"
    path.write_text("def fn(batch):\n    return {'out': batch['label']}\n")
    try:
        first = _load(path, "edited_fn_mod").fn
        before = spec(ds, first).identity
        before_v1 = spec(ds, first, version="v1").identity
        path.write_text("def fn(batch):\n    return {'out': [x * 2 for x in batch['label']]}\n")
        second = _load(path, "edited_fn_mod").fn
        assert spec(ds, second).identity != before
        # version= names the function instead of its source: edits no longer count
        assert spec(ds, second, version="v1").identity == before_v1
        assert spec(ds, second, version="v2").identity != before_v1
    finally:
        del sys.modules["edited_fn_mod"]


def test_function_without_source_needs_version(ds: Dataset) -> None:
    namespace: dict[str, Any] = {}
    exec("fn = lambda batch: {'out': batch['label']}", namespace)  # no file: no source
    with pytest.raises(MapSpecError, match="version=") as info:
        spec(ds, namespace["fn"])
    assert "source is not available" in str(info.value)
    assert spec(ds, namespace["fn"], version="v1").fn_identity == "version:v1"


def test_lambdas_with_source_are_identified(ds: Dataset) -> None:
    def make() -> Any:
        return lambda batch: {"out": batch["label"]}

    assert spec(ds, make()).identity == spec(ds, make()).identity


def test_closures_count_their_values(ds: Dataset) -> None:
    def make(k: int) -> Any:
        def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
            return {"out": [x + k for x in batch["label"]]}

        return fn

    assert spec(ds, make(1)).identity == spec(ds, make(1)).identity
    assert spec(ds, make(1)).identity != spec(ds, make(2)).identity


def test_closure_over_an_opaque_object_needs_version(ds: Dataset) -> None:
    model = object()

    def fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
        return {"out": [id(model) for _ in batch["label"]]}

    with pytest.raises(MapSpecError, match=r"'model'.*version="):
        spec(ds, fn)
    assert spec(ds, fn, version="model-1").identity


def test_partials_methods_and_callables(ds: Dataset) -> None:
    def add(batch: dict[str, list[Any]], k: int) -> dict[str, Any]:
        return {"out": [x + k for x in batch["label"]]}

    class Adder:
        def __init__(self, k: int) -> None:
            self.k = k

        def __call__(self, batch: dict[str, list[Any]]) -> dict[str, Any]:
            return add(batch, self.k)

    assert fn_identity(functools.partial(add, k=1)) != fn_identity(functools.partial(add, k=2))
    assert fn_identity(Adder(1)) == fn_identity(Adder(1))
    assert fn_identity(Adder(1)) != fn_identity(Adder(2))
    assert fn_identity(Adder(1).__call__) != fn_identity(Adder(2).__call__)
    arr = np.arange(3)
    assert fn_identity(functools.partial(add, k=arr)) == fn_identity(
        functools.partial(add, k=np.arange(3))
    )
