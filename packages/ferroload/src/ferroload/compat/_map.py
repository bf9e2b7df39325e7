"""`Dataset.map` in ferroload-rs 0.1.1's form, and its output types `Modality`/`Annotation`.

0.1.1's map calls a per-sample `fn` with its inputs positionally (or, `batched=True`,
with one list per input), takes outputs declared by kind (`"array"` -> an `.npy`
modality, `"scalar"`/`"text"` -> metadata, `"bytes"`/`"video"`/… -> a raw-bytes
modality, or `Modality(ext, codec)`/`Annotation()`), names the layer `name`, skips the
rows a layer of that name already has (`resume`), and lets a returned None leave a row
out (a sparse layer). Here it runs on the format's `LayerWriter`: one partition per
`StaticPartitionExecutor` rank (committed by `commit_layer`), else one, committed at once.
The metadata types are inferred from the values, as 0.1.1 did.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

import ferroload_format
from ferroload.compat import deprecated
from ferroload.compat._executor import (
    MapPlan,
    detect_topology,
    select_executor,
)
from ferroload_format import LayerWriter
from ferroload_format import Modality as FormatModality

_TENSOR = {"array", "tensor", "ndarray", "npy", "embedding"}
_ANNOTATION = {"scalar", "annotation", "text", "str", "string", "json", "number", "label"}
_BYTES = {"bytes", "raw", "blob", "file", "binary"}
_PRESETS = {
    "video": ("mp4", "video"),
    "audio": ("wav", "audio"),
    "image": ("jpg", "image"),
    "jpg": ("jpg", "image"),
    "jpeg": ("jpg", "image"),
    "png": ("png", "image"),
}
#: The file, in a static map's staging folder, that tells `commit_layer` its outputs.
_PLAN = "rs011-plan.json"


class OutputModality:
    """0.1.1's `Modality(ext, codec=None, kind="tensor")`: a modality output of `map`."""

    __slots__ = ("codec", "ext", "kind")

    def __init__(self, ext: str, codec: str | None = None, kind: str = "tensor") -> None:
        self.ext, self.codec, self.kind = ext, codec, kind

    def __repr__(self) -> str:
        return f"Modality(ext={self.ext!r}, codec={self.codec!r})"


class Modality(FormatModality):
    """A modality: `Modality(name, ext, kind, codec_hint)` (a `ferroload_format.Modality`
    record). 0.1.1's map output `Modality(ext, codec=...)` (one positional argument)
    still works, with a FutureWarning."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if (len(args) == 1 and "ext" not in kwargs and "name" not in kwargs) or "codec" in kwargs:
            deprecated(
                "Modality(ext, codec=...) as a map output",
                'outputs={"name": "npy"} or {"name": "png"} (a file extension) in ds.map(..., layer=...)',
            )
            return OutputModality(*args, **kwargs)
        return FormatModality(*args, **kwargs)


class Annotation:
    """0.1.1's metadata output of `map` (0.2: a type string such as `"string"`)."""

    __slots__ = ()

    def __init__(self) -> None:
        deprecated(
            "Annotation()",
            'outputs={"name": "string"} (or "int64", "float64", ...) in ds.map(..., layer=...)',
        )

    def __repr__(self) -> str:
        return "Annotation()"


def _resolve(kind: Any, ext: str | None, codec: str | None) -> tuple[str, str | None, str | None]:
    k = kind.lower() if isinstance(kind, str) else "array"
    if k in _TENSOR:
        return ("tensor", ext or "npy", codec or "npy")
    if k in _ANNOTATION:
        return ("annotation", None, None)
    if k in _PRESETS:
        pe, pc = _PRESETS[k]
        return ("bytes", ext or pe, codec or pc)
    if k in _BYTES:
        return ("bytes", ext or "bin", codec or "raw")
    raise ValueError(
        f"unknown output kind {kind!r}; use 'array' (tensor), 'scalar' (metadata), "
        "'bytes'/'video'/'audio'/'image' (raw blob), or a dict {'type','ext','codec'}"
    )


def _norm(spec: Any) -> tuple[str, str | None, str | None]:
    """0.1.1's output spec as (kind: tensor|bytes|annotation, ext, codec)."""
    if isinstance(spec, Annotation):
        return ("annotation", None, None)
    if isinstance(spec, OutputModality):
        if (spec.ext or "npy").lower() == "npy":
            return ("tensor", "npy", spec.codec or "npy")
        return ("bytes", spec.ext, spec.codec or "raw")
    if isinstance(spec, dict):
        return _resolve(
            spec.get("type") or spec.get("kind") or "array", spec.get("ext"), spec.get("codec")
        )
    if isinstance(spec, tuple | list):
        return _resolve(
            spec[0], spec[1] if len(spec) > 1 else None, spec[2] if len(spec) > 2 else None
        )
    return _resolve(spec, None, None)


def _call(
    fn: Any, args: list[list[Any]], names: list[str], n: int, batched: bool
) -> dict[str, list[Any]]:
    """`fn` over one batch of `n` rows: {output: values}."""
    k = len(names)
    if batched:
        ret = fn(*args)
        cols = [ret] if k == 1 else list(_tuple(ret, k, "columns"))
        out = {}
        for name, col in zip(names, cols, strict=True):
            col = list(col)
            if len(col) != n:
                raise ValueError(
                    f"map output {name!r} has length {len(col)}, expected {n} (batch size)"
                )
            out[name] = col
        return out
    out = {name: [] for name in names}
    for r in range(n):
        ret = fn(*[a[r] for a in args])
        for name, v in zip(names, (ret,) if k == 1 else _tuple(ret, k, "values"), strict=True):
            out[name].append(v)
    return out


def _tuple(ret: Any, n: int, what: str) -> tuple[Any, ...]:
    if not isinstance(ret, tuple | list) or len(ret) != n:
        raise ValueError(f"map fn must return {n} {what} (one per output); got {ret!r}")
    return tuple(ret)


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _infer(values: list[Any]) -> pa.DataType:
    """0.1.1's type inference for a metadata output: bool, int64, float64, string, or
    JSON text."""
    vals = [_scalar(v) for v in values if v is not None]
    if not vals:
        return pa.string()
    if all(isinstance(v, bool) for v in vals):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return pa.int64()
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
        return pa.float64()
    return pa.string()


def _cast(values: list[Any], t: pa.DataType) -> list[Any]:
    out: list[Any] = []
    for v in values:
        v = _scalar(v)
        if v is None:
            out.append(None)
        elif t == pa.string():
            out.append(v if isinstance(v, str) else json.dumps(v, default=str))
        elif t == pa.float64():
            out.append(float(v))
        else:
            out.append(v)
    return out


def _npy(arr: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def _inputs(
    ds: ferroload_format.Dataset, rows: np.ndarray, names: list[str], decode: bool, resize: Any
) -> list[list[Any]]:
    """The inputs of `rows`, one list per input: images decoded (HWC uint8), `.npy`
    modalities loaded, other modalities as bytes, metadata as values, None when absent."""
    from ferroload_codec import decode_image

    mods = {m.name: m for m in ds.modalities}
    got = ds.get_many(rows, names) if len(rows) else []
    cols: list[list[Any]] = []
    for name in names:
        m = mods.get(name)
        values = [s[name] for s in got]
        if m is not None and decode and m.codec_hint == "image":
            values = [None if v is None else decode_image(v, size=resize) for v in values]
        elif m is not None and (m.codec_hint == "npy" or m.ext.lower() == "npy"):
            values = [
                None if v is None else np.load(io.BytesIO(v), allow_pickle=False) for v in values
            ]
        cols.append(values)
    return cols


def _modalities(norm: Mapping[str, tuple[str, str | None, str | None]]) -> list[FormatModality]:
    out = []
    for name, (kind, ext, codec) in norm.items():
        if kind == "annotation":
            continue
        hint = codec if codec and codec.isidentifier() and codec.islower() else "raw"
        our_kind = "tensor" if hint in ("image", "audio", "video") else "bytes"
        out.append(FormatModality(name, ext or "bin", our_kind, hint))
    return out


def map_011(
    ds: Any,
    fn: Any,
    inputs: Any = None,
    outputs: Any = None,
    name: str | None = None,
    batch_size: int = 32,
    batched: bool = False,
    resume: bool = True,
    decode: bool = True,
    resize: Any = None,
    num_workers: int = 0,
    progress: bool = False,
    executor: Any = None,
) -> Any:
    """0.1.1's `Dataset.map` (see the module docstring); returns the latest version (the
    same view of it, when `ds` is a view)."""
    del num_workers, progress  # 0.1.1 reserved them
    names_in = [inputs] if isinstance(inputs, str) else list(inputs or ())
    if isinstance(outputs, dict):
        norm = {k: _norm(v) for k, v in outputs.items()}
    else:
        specs = [outputs] if isinstance(outputs, str) else list(outputs or ())
        norm = {k: _norm("array") for k in specs}
    if not norm:
        raise ValueError("map: `outputs` must declare at least one output")
    layer = name or "map_" + "_".join(norm)
    rows_all = np.asarray(ds._rows if ds._rows is not None else np.arange(len(ds)), dtype=np.int64)

    def process(part: tuple[int, int] | None) -> int:
        return _run(
            ds,
            fn,
            names_in,
            norm,
            layer,
            rows_all,
            part,
            batch_size,
            batched,
            resume,
            decode,
            resize,
        )

    plan = MapPlan(
        ds.uri, layer, {}, len(ds), process, lambda p: int(rows_all[p]), _meta={"compat": True}
    )
    ex = executor if executor is not None else select_executor(detect_topology())
    ex.run(plan)
    latest = type(ds)(ds.store, ferroload_format.read_manifest(ds.store))
    return latest if ds._rows is None else latest.take(rows_all)


def _latest(ds: Any) -> ferroload_format.Dataset:
    return ferroload_format.Dataset(ds.store, ferroload_format.read_manifest(ds.store))


def _run(
    ds: Any,
    fn: Any,
    names_in: list[str],
    norm: dict[str, tuple[str, str | None, str | None]],
    layer: str,
    rows_all: np.ndarray,
    part: tuple[int, int] | None,
    batch_size: int,
    batched: bool,
    resume: bool,
    decode: bool,
    resize: Any,
) -> int:
    latest = _latest(ds)
    rows = np.unique(rows_all)
    if part is not None:
        rank, world = part
        rows = rows[rows % world == rank]
    names = list(norm)
    existing = latest.manifest.layer(layer)
    done = np.zeros(0, dtype=np.int64)
    if resume and existing is not None:
        have = np.zeros(latest.num_samples, dtype=bool)
        for n in names:
            if n in {m.name for m in existing.modalities}:
                have |= latest.present(n)
            elif n in existing.column_names:
                have |= np.asarray(latest.column(n).is_valid())
        done = rows[have[rows]]
    todo = np.setdiff1d(rows, done)
    computed: dict[str, list[Any]] = {n: [] for n in names}
    for start in range(0, len(todo), max(1, batch_size)):
        chunk = todo[start : start + batch_size]
        got = _call(
            fn, _inputs(latest, chunk, names_in, decode, resize), names, len(chunk), batched
        )
        for n in names:
            computed[n] += got[n]
    if part is None and not len(todo):
        return 0
    keep = done if part is None else np.zeros(0, dtype=np.int64)
    old = latest.get_many(keep, names) if len(keep) else []
    order = np.argsort(np.concatenate([keep, todo]), kind="stable")
    all_rows = np.concatenate([keep, todo])[order]
    values: dict[str, list[Any]] = {}
    for n in names:
        merged = [s[n] for s in old] + computed[n]
        values[n] = [merged[i] for i in order]
    columns = {}
    for n, (kind, _, _) in norm.items():
        if kind == "annotation":
            t = existing_type(existing, n) or _infer(values[n])
            columns[n] = t
            values[n] = _cast(values[n], t)
    payloads = {}
    for n, (kind, _, _) in norm.items():
        if kind == "tensor":
            payloads[n] = [
                None if v is None else (v if isinstance(v, bytes) else _npy(np.asarray(v)))
                for v in values[n]
            ]
        elif kind == "bytes":
            payloads[n] = [None if v is None else bytes(v) for v in values[n]]
    mods = _modalities(norm)
    meta = {n: values[n] for n in columns}
    if part is None:
        import secrets

        writer = LayerWriter(
            latest,
            layer,
            identity=f"rs011-{secrets.token_hex(8)}",
            columns=columns,
            modalities=mods,
            overwrite=True,
        )
        writer.write_partition(0, all_rows, meta, payloads)
        writer.commit(1)
        return len(todo)
    rank, world = part
    writer = LayerWriter(
        latest,
        layer,
        identity=_static_identity(layer, latest.version),
        columns=columns,
        modalities=mods,
        overwrite=True,
    )
    writer.write_partition(rank, all_rows, meta, payloads)
    plan = {
        "columns": {n: str(t) for n, t in columns.items()},
        "modalities": [m.to_json() for m in mods],
        "world": world,
    }
    latest.store.put(
        f"layers/{layer}/_staging/{_static_identity(layer, latest.version)}/{_PLAN}",
        json.dumps(plan).encode(),
    )
    if world <= 1:
        writer.commit(1)
    else:
        print(
            f"[ferroload] rank {rank}/{world}: staged layer partition {layer!r}. Run "
            f"ferroload.commit_layer({ds.uri!r}, {layer!r}) once all ranks finish "
            "(0.2: ds.map(..., executor='static') commits itself)",
            flush=True,
        )
    return len(todo)


def existing_type(existing: Any, name: str) -> pa.DataType | None:
    """The type of metadata column `name` of the layer `existing` (None: it has none)."""
    if existing is None:
        return None
    for f in existing.columns:
        if f.name == name:
            return f.type
    return None


def _static_identity(layer: str, version: int) -> str:
    return f"rs011-{layer}-v{version}"


_TYPES = {"bool": pa.bool_(), "int64": pa.int64(), "double": pa.float64(), "string": pa.string()}


def commit_partitions(root: str, name: str) -> int:
    """Commit the layer `name` whose partitions static-map ranks staged; the rows it
    covers."""
    latest = ferroload_format.Dataset.open(root)
    identity = _static_identity(name, latest.version)
    plan = json.loads(latest.store.get(f"layers/{name}/_staging/{identity}/{_PLAN}"))
    columns = {n: _TYPES[t] for n, t in plan["columns"].items()}
    mods = [FormatModality(**m) for m in plan["modalities"]]
    writer = LayerWriter(
        latest, name, identity=identity, columns=columns, modalities=mods, overwrite=True
    )
    out = writer.commit(int(plan["world"]))
    return len(out)


def outputs_of(spec: Sequence[Any] | Mapping[str, Any]) -> list[str]:
    """The output names of a 0.1.1 `outputs` argument."""
    return (
        list(spec) if isinstance(spec, Mapping) else [spec] if isinstance(spec, str) else list(spec)
    )
