"""`MapSpec`: what a map computes (fn, inputs, outputs) and the identity that names it."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import pyarrow as pa

from ferroload_format import ColumnNotFoundError, Modality
from ferroload_format._names import EXT_RE, MODALITY_RE, RESERVED_COLUMNS
from ferroload_map._errors import MapSpecError

if TYPE_CHECKING:
    from ferroload_format import Dataset

#: What `fn` receives (input name -> one list per batch, plus `sample_id`) and returns
#: (output name -> a sequence or array as long as the batch).
MapFn: TypeAlias = Callable[[dict[str, list[Any]]], Mapping[str, Any]]
#: An output declaration: a metadata type string, an Arrow type, a modality file
#: extension, or a full `Modality`.
OutputType: TypeAlias = str | pa.DataType | Modality
OnError: TypeAlias = Literal["raise", "skip", "warn"]
InputKind: TypeAlias = Literal["meta", "image", "bytes"]

ON_ERROR = ("raise", "skip", "warn")

_SCALARS: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
}
_ALIASES = {"int": "int64", "float": "float64", "str": "string", "bytes": "binary"}
_SCALAR_NAMES = {t: n for n, t in _SCALARS.items()}
_FIXED_RE = re.compile(r"(?P<item>.+)\[(?P<size>[0-9]+)\]")
_LIST_RE = re.compile(r"list<(?P<item>.+)>")

#: File extension -> (kind, codec_hint) of a new modality declared by its extension.
EXTENSIONS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(
        ("png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff", "gif"), ("tensor", "image")
    ),
    **dict.fromkeys(("wav", "flac", "mp3", "ogg", "opus", "m4a"), ("tensor", "audio")),
    **dict.fromkeys(("mp4", "webm", "mkv", "avi", "mov"), ("tensor", "video")),
    "npy": ("bytes", "npy"),
    **dict.fromkeys(("txt", "text", "json", "cls"), ("text", "raw")),
    **dict.fromkeys(("bin", "raw", "dat"), ("bytes", "raw")),
}


def parse_type(text: str) -> pa.DataType:
    """The Arrow type of a metadata type string.

    Scalars are `bool`, `int8` … `int64`, `uint8` … `uint64`, `float16`, `float32`,
    `float64`, `string`, `binary` (aliases `int`, `float`, `str`, `bytes`); `T[n]` is a
    fixed-size list of `n` items of `T`, `list<T>` a list of any length; they nest.

    Raises:
        ValueError: for anything else.

    Examples:
        >>> parse_type("float32[3]")
        FixedSizeListType(fixed_size_list<item: float>[3])
        >>> parse_type("list<int64>")
        ListType(list<item: int64>)
    """
    s = text.strip()
    s = _ALIASES.get(s, s)
    if s in _SCALARS:
        return _SCALARS[s]
    m = _LIST_RE.fullmatch(s)
    if m:
        return pa.list_(parse_type(m["item"]))
    m = _FIXED_RE.fullmatch(s)
    if m and int(m["size"]) > 0:
        return pa.list_(parse_type(m["item"]), int(m["size"]))
    raise ValueError(f"unknown metadata type {text!r}")


def type_string(t: pa.DataType) -> str:
    """The type string of an Arrow type (inverse of `parse_type`; `str(t)` for others)."""
    if t in _SCALAR_NAMES:
        return _SCALAR_NAMES[t]
    if pa.types.is_fixed_size_list(t):
        return f"{type_string(t.value_type)}[{t.list_size}]"
    if pa.types.is_list(t):
        return f"list<{type_string(t.value_type)}>"
    return str(t)


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type a declared output type is stored as in the layer's index.

    The format stores `bool`, `int64`, `float64`, `string`, `binary` and lists and
    structs of them (docs/format.md §6): narrower integers widen to `int64`, `float16` and
    `float32` to `float64` (holding float32-rounded values), fixed-size lists to lists.
    Values are checked against the declared type first (range, length), then widened.

    Examples:
        >>> storage_type(parse_type("float32[3]"))
        ListType(list<item: double>)
    """
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(storage_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, storage_type(f.type)) for f in t])
    return t


@dataclass(frozen=True)
class InputColumn:
    """One input of `fn`: a metadata column, an image modality (decoded to HWC uint8
    arrays) or another modality (bytes)."""

    name: str
    kind: InputKind


@dataclass(frozen=True)
class MapSpec:
    """What a map computes and the identity naming it.

    Build one with `MapSpec.build`. The identity is a sha256 over the layer name, the fn
    identity, the inputs, the outputs and the base version; `batch_size` and `on_error`
    are not part of it (they do not change what a successful sample gets).

    Attributes:
        fn: the function, called once per batch.
        layer: the layer name.
        inputs: what `fn` reads, in the order given.
        columns: metadata outputs: name -> declared Arrow type (stored as
            `storage_type`).
        modalities: modality outputs.
        fn_identity: `version=` when given, else module, qualified name and source.
        base_version: the version that last added rows to the dataset (`rows_version`):
            what the layer covers. Layer commits add no rows, so the same map on the
            version a map committed is still the same layer (a no-op).
        batch_size: samples per call of `fn`.
        on_error: `raise`, `skip` or `warn` (skip and log each failing sample).
        input_layers: (name, identity) of the layers whose columns `fn` reads: when one
            is recomputed differently, this map's identity changes too.
    """

    fn: MapFn
    layer: str
    inputs: tuple[InputColumn, ...]
    columns: Mapping[str, pa.DataType]
    modalities: tuple[Modality, ...]
    fn_identity: str
    base_version: int
    batch_size: int = 64
    on_error: OnError = "raise"
    input_layers: tuple[tuple[str, str], ...] = ()

    @functools.cached_property
    def storage_columns(self) -> dict[str, pa.DataType]:
        """Metadata outputs as the layer stores them: name -> `storage_type`."""
        return {n: storage_type(t) for n, t in self.columns.items()}

    @property
    def output_names(self) -> tuple[str, ...]:
        """Every output, metadata columns first."""
        return (*self.columns, *(m.name for m in self.modalities))

    @property
    def fn_name(self) -> str:
        """A readable name of `fn` for messages."""
        return _callable_name(self.fn)

    @functools.cached_property
    def identity(self) -> str:
        """The layer identity (64 hex digits)."""
        doc: dict[str, Any] = {
            "layer": self.layer,
            "fn": self.fn_identity,
            "inputs": [i.name for i in self.inputs],
            "outputs": {
                **{n: type_string(t) for n, t in self.columns.items()},
                **{m.name: [m.ext, m.kind, m.codec_hint] for m in self.modalities},
            },
            "base_version": self.base_version,
        }
        if self.input_layers:
            doc["input_layers"] = [list(pair) for pair in self.input_layers]
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    @classmethod
    def build(
        cls,
        ds: Dataset,
        fn: MapFn,
        *,
        inputs: Sequence[str],
        outputs: Mapping[str, OutputType],
        layer: str,
        batch_size: int = 64,
        version: str | None = None,
        on_error: OnError = "raise",
    ) -> MapSpec:
        """Check a map's arguments against `ds` and compute its identity.

        Raises:
            MapSpecError: for a bad layer name, output, option, or a function whose
                identity cannot be computed (pass `version=`).
            ColumnNotFoundError: for an input the dataset does not have.
        """
        uri = ds.uri
        if not callable(fn):
            raise MapSpecError(f"fn must be callable, got {type(fn).__name__}", uri=uri)
        if not isinstance(layer, str) or not MODALITY_RE.fullmatch(layer):
            raise MapSpecError(
                f"layer name {layer!r} is invalid: use lowercase letters, digits and _, "
                "starting with a letter, at most 32 characters",
                uri=uri,
                layer=str(layer),
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise MapSpecError(
                f"batch_size must be a positive int, got {batch_size!r}", uri=uri, layer=layer
            )
        if on_error not in ON_ERROR:
            raise MapSpecError(
                f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}",
                uri=uri,
                layer=layer,
            )
        if version is not None and (not isinstance(version, str) or not version):
            raise MapSpecError(
                f"version must be a non-empty str, got {version!r}", uri=uri, layer=layer
            )
        ins = _inputs(ds, inputs, layer)
        columns, modalities = _outputs(outputs, uri=uri, layer=layer)
        ident = f"version:{version}" if version is not None else fn_identity(fn)
        return cls(
            fn=fn,
            layer=layer,
            inputs=ins,
            columns=columns,
            modalities=modalities,
            fn_identity=ident,
            base_version=rows_version(ds),
            batch_size=batch_size,
            on_error=on_error,
            input_layers=tuple(
                (la.name, la.identity)
                for la in ds.layers
                if la.name != layer and any(i.name in la.column_names for i in ins)
            ),
        )


def rows_version(ds: Dataset) -> int:
    """The version that last added rows to `ds` (0 for a dataset without rows).

    Every version that adds samples adds one index part named after it; versions that
    only add layers add none. Two versions with the same `rows_version` have the same
    rows, so a layer computed on one fits the other.
    """
    return max((p.version for p in ds.manifest.index_parts), default=0)


def _inputs(ds: Dataset, inputs: Sequence[str], layer: str) -> tuple[InputColumn, ...]:
    if isinstance(inputs, str):
        raise MapSpecError(
            f"inputs must be a list of column names, got the str {inputs!r}; "
            f"write inputs=[{inputs!r}]",
            uri=ds.uri,
            layer=layer,
        )
    mods = {m.name: m for m in ds.modalities}
    out = []
    for name in dict.fromkeys(inputs):
        if name == "sample_id":
            continue  # always passed
        if name in mods:
            kind: InputKind = "image" if mods[name].codec_hint == "image" else "bytes"
        elif name in ds.metadata_columns:
            kind = "meta"
        else:
            raise ColumnNotFoundError(
                f"input {name!r} of layer {layer!r} is not a column of {ds.uri}; columns are "
                f"{', '.join(ds.columns)}",
                uri=ds.uri,
                column=str(name),
            )
        out.append(InputColumn(name, kind))
    return tuple(out)


def _outputs(
    outputs: Mapping[str, OutputType], *, uri: str, layer: str
) -> tuple[dict[str, pa.DataType], tuple[Modality, ...]]:
    if not isinstance(outputs, Mapping) or not outputs:
        raise MapSpecError(
            "outputs must be a non-empty dict: name -> metadata type ('float32[3]'), Arrow "
            "type, or modality extension ('png')",
            uri=uri,
            layer=layer,
        )
    columns: dict[str, pa.DataType] = {}
    modalities: list[Modality] = []
    for name, decl in outputs.items():
        if not isinstance(name, str) or not MODALITY_RE.fullmatch(name) or name in RESERVED_COLUMNS:
            raise MapSpecError(
                f"output name {name!r} is invalid: use lowercase letters, digits and _, "
                "starting with a letter, at most 32 characters (not sample_id or shard)",
                uri=uri,
                layer=layer,
                column=str(name),
            )
        if isinstance(decl, Modality):
            modalities.append(Modality(name, decl.ext, decl.kind, decl.codec_hint))
        elif isinstance(decl, pa.DataType):
            columns[name] = decl
        elif isinstance(decl, str):
            try:
                columns[name] = parse_type(decl)
                continue
            except ValueError:
                pass
            ext = decl.lstrip(".")
            if ext.lower() in EXTENSIONS:
                kind, hint = EXTENSIONS[ext.lower()]
                modalities.append(Modality(name, ext, kind, hint))
            elif EXT_RE.fullmatch(ext) and not any(c in decl for c in "<>[]"):
                modalities.append(Modality(name, ext, "bytes", "raw"))
            else:
                raise MapSpecError(
                    f"output {name!r} of layer {layer!r} has type {decl!r}, which is neither "
                    "a metadata type (bool, int64, float32, string, binary, float32[3], "
                    "list<float32>, …) nor a file extension (png, jpg, npy, txt, bin, …)",
                    uri=uri,
                    layer=layer,
                    column=name,
                )
        else:
            raise MapSpecError(
                f"output {name!r} of layer {layer!r} is declared as {type(decl).__name__}; use "
                "a type string, a pyarrow DataType, an extension or a ferroload Modality",
                uri=uri,
                layer=layer,
                column=name,
            )
    return columns, tuple(modalities)


# --------------------------------------------------------------------- fn identity


def fn_identity(fn: Callable[..., Any]) -> str:
    """The identity of a function: module, qualified name and source text, plus the
    values it closes over and its defaults (when they have a stable text form).

    Raises:
        MapSpecError: when the source is not available (a REPL, generated code) or the
            function depends on values without a stable form; the message asks for
            `version=`.
    """
    return _identity(fn, depth=0)


def _identity(fn: Any, *, depth: int) -> str:
    if depth > 8:
        raise _no_identity(fn, "it nests too deeply")
    if isinstance(fn, functools.partial):
        args = [_stable(a, fn, depth) for a in fn.args]
        kw = {k: _stable(v, fn, depth) for k, v in sorted(fn.keywords.items())}
        return f"partial({_identity(fn.func, depth=depth + 1)}, {args!r}, {kw!r})"
    if isinstance(fn, types.MethodType):
        owner = fn.__self__
        state = owner.__name__ if isinstance(owner, type) else _state(owner, fn, depth)
        return f"method({_identity(fn.__func__, depth=depth + 1)}, {state})"
    if isinstance(fn, types.FunctionType):
        parts = [fn.__module__ or "", fn.__qualname__, _source(fn)]
        if fn.__defaults__:
            parts.append(repr([_stable(v, fn, depth) for v in fn.__defaults__]))
        if fn.__kwdefaults__:
            parts.append(repr({k: _stable(v, fn, depth) for k, v in fn.__kwdefaults__.items()}))
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell: a name assigned later
                    raise _no_identity(fn, f"its closure variable {name!r} is unset") from None
                parts.append(f"{name}={_stable(value, fn, depth, name=name)}")
        return "\n".join(parts)
    if isinstance(fn, types.BuiltinFunctionType):
        return f"{fn.__module__}.{fn.__qualname__}"
    if callable(fn) and not isinstance(fn, type):
        cls = type(fn)
        return "\n".join(
            [cls.__module__, cls.__qualname__, _source(cls, fn), _state(fn, fn, depth)]
        )
    raise _no_identity(fn, f"it is a {type(fn).__name__}")


def _source(obj: Any, fn: Any = None) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        raise _no_identity(
            fn if fn is not None else obj,
            "its source is not available (defined in a REPL, a notebook cell without a file, "
            "or generated)",
        ) from None


def _state(obj: Any, fn: Any, depth: int) -> str:
    attrs = getattr(obj, "__dict__", None)
    if attrs is None:
        return ""
    return repr({k: _stable(v, fn, depth, name=k) for k, v in sorted(attrs.items())})


def _stable(value: Any, fn: Any, depth: int, *, name: str | None = None) -> str:
    """A text form of `value` that is the same in every process, or an error."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[{', '.join(_stable(v, fn, depth) for v in value)}]"
    if isinstance(value, (set, frozenset)):
        return f"set[{', '.join(sorted(_stable(v, fn, depth) for v in value))}]"
    if isinstance(value, dict):
        items = sorted((_stable(k, fn, depth), _stable(v, fn, depth)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return f"ndarray({value.dtype.str}, {value.shape}, {digest})"
    if isinstance(value, np.generic):
        return f"{value.dtype.str}:{value.item()!r}"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, type):
        return f"class {value.__module__}.{value.__qualname__}"
    if isinstance(value, pa.DataType):
        return f"arrow {value}"
    if callable(value):
        return f"<{_identity(value, depth=depth + 1)}>"
    what = f"the value of {name!r}" if name else "a value"
    raise _no_identity(fn, f"{what} it depends on ({type(value).__name__}) has no stable text form")


def _callable_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        return f"partial({_callable_name(fn.func)})"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{name}"


def _no_identity(fn: Any, why: str) -> MapSpecError:
    return MapSpecError(
        f"cannot compute the identity of fn {_callable_name(fn)}: {why}. Pass version='...' "
        "(any string naming this version of the function; change it when the function "
        "changes) to map_dataset / Dataset.map"
    )
