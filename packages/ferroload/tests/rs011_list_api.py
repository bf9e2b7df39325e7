"""List the public Python API of ferroload-rs 0.1.1 into `rs011_public_api.json`.

Not a test (pytest does not collect it: no `test_` prefix). It regenerates the list of
names that `test_compat_names.py` resolves under ferroload 0.2, and must run with a Python
that has the published ferroload-rs 0.1.1 wheel, never the project's environment
(`--no-config`: the workspace's settings would drop pillow):

    uv venv --no-config /tmp/rs011
    uv pip install --no-config --python /tmp/rs011/bin/python ferroload==0.1.1 pillow pytest
    /tmp/rs011/bin/python packages/ferroload/tests/rs011_list_api.py

It writes the JSON next to itself (`--out PATH` writes it elsewhere; `--check` compares
instead of writing and exits 1 on a difference). What it lists:

* `modules`: `ferroload.__all__`; for `ferroload.dataset`, `.loader`, `.executor` and
  `.cli`, their `__all__` or else the public names they define themselves (what they
  import: other modules, typing helpers, classes of other modules, is left out).
* `classes`: every public class of those modules, under the path 0.1.1 documents it by
  (`ferroload.X` when the package exports it) and the other paths it has (`aliases`:
  `ferroload.FerroDataset`, `ferroload.loader.FerroSampler`, ...), with its public members: methods,
  properties, dataclass fields, the attributes an instance sets (found by making one on a
  small dataset that 0.1.1's own `Writer` writes in a temporary folder), the protocol
  methods it defines (`__len__`, `__getitem__`, `__getitems__`, `__iter__`) and, for
  `Dataset`, the methods of `ferroload._core.Dataset` it delegates (`delegated`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import io
import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

#: The modules of the 0.1.1 package whose names are public.
MODULES = (
    "ferroload",
    "ferroload.dataset",
    "ferroload.loader",
    "ferroload.executor",
    "ferroload.cli",
)
#: Names a module imports for its own annotations or helpers: never part of its API.
TYPING_HELPERS = frozenset(
    {"Optional", "Sequence", "Callable", "dataclass", "field", "annotations", "Path", "Any"}
)
#: Protocol methods listed when a class (or a ferroload base of it) defines them.
PROTOCOL = ("__len__", "__getitem__", "__getitems__", "__iter__")
HERE = Path(__file__).resolve().parent
OUT = HERE / "rs011_public_api.json"


def module_names(module: types.ModuleType) -> list[str]:
    """The public names of `module`: `__all__`, or the names it defines itself."""
    if hasattr(module, "__all__"):
        return sorted(module.__all__)
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in TYPING_HELPERS or isinstance(value, types.ModuleType):
            continue
        home = getattr(value, "__module__", None)
        if (inspect.isclass(value) or inspect.isroutine(value)) and home != module.__name__:
            continue  # imported from elsewhere
        names.append(name)
    return sorted(names)


def _member_kind(cls: type, name: str) -> str:
    """`method`, `staticmethod`, `classmethod`, `property` or `attribute` (a class value)."""
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, classmethod | types.ClassMethodDescriptorType):
        return "classmethod"
    if isinstance(raw, property | types.GetSetDescriptorType):
        return "property"
    if isinstance(raw, types.MemberDescriptorType):
        return "attribute"  # a __slots__ entry
    if callable(raw):
        # a pyo3 static method (`open`) is a builtin bound to the class, not a descriptor
        bound = getattr(cls, name)
        if isinstance(bound, types.BuiltinMethodType) and bound.__self__ is cls:
            return "staticmethod"
        return "method"
    return "attribute"


def _signature(obj: Any) -> str | None:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def class_members(
    cls: type, instance: object | None, delegate: type | None = None
) -> list[dict[str, Any]]:
    """The public members of `cls` (and of its instance, and of `delegate`)."""
    own = {n for n in dir(cls) if not n.startswith("_")}
    members: dict[str, dict[str, Any]] = {}
    for name in sorted(own):
        kind = _member_kind(cls, name)
        entry: dict[str, Any] = {"name": name, "kind": kind}
        if kind in ("method", "staticmethod", "classmethod"):
            entry["signature"] = _signature(getattr(cls, name))
        members[name] = entry
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_"):
                members.pop(f.name, None)  # a field with a default is a class value too
                members[f.name] = {"name": f.name, "kind": "field"}
    if instance is not None:
        slots = getattr(cls, "__slots__", ())
        attrs = [*getattr(instance, "__dict__", {}), *slots]
        for name in attrs:
            if not name.startswith("_") and name not in members:
                members[name] = {"name": name, "kind": "attribute"}
    for name in PROTOCOL:
        if any(name in vars(k) for k in cls.__mro__ if k is not object):
            members[name] = {"name": name, "kind": "protocol"}
    if delegate is not None:
        for name in sorted(n for n in dir(delegate) if not n.startswith("_")):
            if name not in members:
                kind = _member_kind(delegate, name)
                entry = {"name": name, "kind": kind, "delegated": True}
                if kind == "method":
                    entry["signature"] = _signature(getattr(delegate, name))
                members[name] = entry
    return list(members.values())


def _rs011(name: str) -> Any:
    """A module of the 0.1.1 package (typed `Any`: its API is not this project's)."""
    return importlib.import_module(name)


def _tiny_dataset(root: str) -> Any:
    """Two samples with an image each, written by 0.1.1's own Writer."""
    from PIL import Image

    ferroload = _rs011("ferroload")
    w = ferroload.Writer(root, "tiny")
    w.declare("image", "jpg", "tensor", "image")
    for i in range(2):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (i * 90, 30, 30)).save(buf, "JPEG")
        w.add(f"s{i}", {"image": buf.getvalue()}, {"label": i})
    w.close()
    return ferroload.Dataset.open(root)


def instances(root: str) -> dict[str, object]:
    """One instance of each class whose instances carry attributes, made as 0.1.1 documents."""
    ferroload = _rs011("ferroload")
    executor, loader = _rs011("ferroload.executor"), _rs011("ferroload.loader")
    ds = _tiny_dataset(root)
    topo = executor.Topology(1, 0, 1, 1, 0)
    return {
        "Dataset": ds,
        "FerroTorchDataset": loader.FerroTorchDataset(ds, images=["image"], meta=["label"]),
        "FerroIterableDataset": loader.FerroIterableDataset(ds, columns=["image", "label"]),
        "FerroSampler": loader.FerroSampler(len(ds)),
        "PrefetchLoader": loader.PrefetchLoader(ds.numpy(images=["image"]), [[0, 1]]),
        "FerroLoader": loader.FerroLoader(root, 2, columns=["image", "label"]),
        "Topology": topo,
        "LocalExecutor": executor.LocalExecutor(topo),
        "StaticPartitionExecutor": executor.StaticPartitionExecutor(topo),
        "RayExecutor": executor.RayExecutor(topo),
        "Modality": ferroload.Modality("npy"),
        "Annotation": ferroload.Annotation(),
    }


def list_api() -> dict[str, Any]:
    """The whole listing, as written to the JSON file."""
    ferroload, core = _rs011("ferroload"), _rs011("ferroload._core")
    if ferroload.__version__ != "0.1.1":
        sys.exit(f"this Python has ferroload {ferroload.__version__}, not ferroload-rs 0.1.1")
    modules = {m: module_names(importlib.import_module(m)) for m in MODULES}
    top = set(ferroload.__all__)
    paths: dict[type, str] = {}  # each class once, by the path 0.1.1 documents it under
    aliases: dict[str, list[str]] = {}
    for m in MODULES:
        module = importlib.import_module(m)
        for name in modules[m]:
            value = getattr(module, name)
            compiled = getattr(core, getattr(value, "__name__", ""), None) is value
            if not inspect.isclass(value):
                continue
            if not (compiled or value.__module__.startswith("ferroload")):
                continue  # pyo3 classes of `_core` say their module is `builtins`
            canonical = value.__name__
            path = f"ferroload.{canonical}" if canonical in top else f"{m}.{canonical}"
            paths.setdefault(value, path)
            aliases.setdefault(paths[value], []).append(f"{m}.{name}")
    with tempfile.TemporaryDirectory() as tmp:
        made = instances(str(Path(tmp) / "tiny"))
        classes = {}
        for cls, path in sorted(paths.items(), key=lambda kv: kv[1]):
            delegate = core.Dataset if cls is ferroload.Dataset else None
            compiled = getattr(core, cls.__name__, None) is cls
            classes[path] = {
                "defined_in": "ferroload._core" if compiled else cls.__module__,
                "signature": _signature(cls),
                "aliases": sorted(set(aliases.get(path, [])) - {path}),
                "members": class_members(cls, made.get(cls.__name__), delegate),
            }
    return {
        "about": (
            "The public Python API of ferroload-rs 0.1.1 (the published wheel), listed by "
            "rs011_list_api.py; test_compat_names.py resolves every name under ferroload 0.2."
        ),
        "version": ferroload.__version__,
        "modules": modules,
        "classes": classes,
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or `--check`) the JSON listing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    text = json.dumps(list_api(), indent=2, sort_keys=False) + "\n"
    if args.check:
        same = args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} differs from the wheel's API")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
