"""Every public name of ferroload-rs 0.1.1 still means something under ferroload 0.2.

`rs011_public_api.json` lists 0.1.1's public names, taken from its published wheel by
`rs011_list_api.py`: the names of the modules `ferroload`, `ferroload.dataset`,
`ferroload.loader`, `ferroload.executor` and `ferroload.cli`, and the members of each of
its classes. Each is resolved under 0.2 (a module attribute, or an attribute of an
instance of the 0.2 object the 0.1.1 class maps to, made with 0.1.1's arguments) and, for
the methods, functions and classes 0.1.1 documents, called with 0.1.1's documented
arguments on a small dataset written in `tmp_path` with 0.1.1's `Writer` calls. A name is

* **supported** (`silent`): it resolves and its call answers as 0.1.1's did, no warning;
* **warned** (`warned`): it works, with a `FutureWarning` naming the 0.2 spelling ("use ...");
* **refused** (`refused`): an `AttributeError`/`TypeError` whose message says "0.2" and
  names the 0.2 spelling ("use ...");

and **failing** otherwise (any other error, a different answer, a `FutureWarning` with no
0.2 spelling). The test fails listing every failing name. `classify_all` gives the
classification that docs/migrating.md quotes; to print it:

    uv run --frozen pytest -q -p no:cacheprovider -n0 -s packages/ferroload/tests/test_compat_names.py
    uv run --frozen python packages/ferroload/tests/test_compat_names.py   # a table per name

`--update-docs` rewrites the status column of docs/migrating.md's table instead (the
other columns are written by hand) and says what is left to do by hand.

The 0.1.1 calls and the answers they are checked against are 0.1.1's own: run with the
0.1.1 wheel's Python (`/tmp/rs011/bin/python test_compat_names.py`, the venv that
`rs011_list_api.py` describes), the file classifies every name `silent` (but
`Dataset.torch`, when that Python has no torch).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
import wave
from argparse import Namespace
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

API_FILE = Path(__file__).with_name("rs011_public_api.json")
API: dict[str, Any] = json.loads(API_FILE.read_text(encoding="utf-8"))
STATUSES = ("silent", "warned", "refused", "differs", "unavailable", "failing")
#: Names whose call needs an extra that a package installed alone may lack (the
#: workspace has them all): `unavailable` there, not compared with docs/migrating.md.
EXTRAS = {"ferroload.Dataset.torch": "torch", "ferroload.Dataset.decode_video": "av"}
#: The 0.1.1 calls 0.2 cannot honour, warn about or refuse with a pointer, each with the
#: reason (docs/migrating.md says the same in its row). A name here that stops failing,
#: or any other name that fails, fails the test.
DIFFERS = {
    "ferroload.Dataset.schema": (
        "0.2's ds.schema is the index's pyarrow.Schema, which pyarrow does not let a "
        "subclass or proxy stand in for, so ds.schema() cannot be made callable; 0.1.1's "
        "schema() returned the manifest's declared columns, an empty list for every "
        "dataset its writers made"
    ),
}

Thunk = Callable[[], object]


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """How one 0.1.1 name fares under 0.2."""

    name: str
    """The 0.1.1 path: `ferroload.loader.batched`, `ferroload.Dataset.get`, ..."""
    status: str
    """`silent`, `warned`, `refused` or `failing`."""
    detail: str = ""
    """The warning or error message (the first one), or why the name fails."""


@contextlib.contextmanager
def _no_output() -> Iterator[None]:
    """What the calls print (0.1.1's CLI functions print, and 0.2's run a child process
    that writes to file descriptor 1) goes nowhere."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            with contextlib.redirect_stdout(io.StringIO()):
                yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _is_refusal(exc: BaseException) -> bool:
    msg = str(exc)
    return isinstance(exc, AttributeError | TypeError) and "0.2" in msg and "use " in msg


def classify(name: str, thunk: Thunk) -> Outcome:
    """Run `thunk` (resolve the name, call it as 0.1.1 did) and classify what happens."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _no_output():
                thunk()
        except Exception as exc:
            if _is_refusal(exc):
                return Outcome(name, "refused", str(exc))
            return Outcome(name, "failing", f"{type(exc).__name__}: {exc}")
    future = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    bare = [m for m in future if "use " not in m]
    if bare:
        return Outcome(name, "failing", f"a FutureWarning that names no 0.2 spelling: {bare[0]}")
    if future:
        return Outcome(name, "warned", future[0])
    return Outcome(name, "silent")


#: 0.1.1's modules that warn when imported: imported afresh each time they are resolved
#: (another test may have imported them first).
_WARNING_MODULES = ("ferroload.dataset", "ferroload.executor", "ferroload.cli")


def resolve(path: str) -> Any:
    """`ferroload.loader.batched` -> the object, importing the longest module prefix."""
    if path in _WARNING_MODULES:
        sys.modules.pop(path, None)
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


def _quiet(fn: Callable[[], Any]) -> Any:
    """Run setup code with its warnings and output swallowed (only the step under test counts)."""
    with warnings.catch_warnings(), _no_output():
        warnings.simplefilter("ignore")
        return fn()


# --------------------------------------------------------------------------- the dataset


def _jpg(h: int, w: int, shade: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (shade, 40, 90)).save(buf, "JPEG")
    return buf.getvalue()


def _wav(samples: int = 800, rate: int = 8000) -> bytes:
    tone = (np.sin(np.arange(samples) / 5) * 8000).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(tone.tobytes())
    return buf.getvalue()


def _avi(frames: int = 6, size: int = 16) -> bytes | None:
    try:
        import av
    except ImportError:  # pragma: no cover  (the workspace has the video extra)
        return None
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="avi") as c:
        s = c.add_stream("mjpeg", rate=10)
        s.width = s.height = size
        s.pix_fmt = "yuvj420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), i * 30, np.uint8))
            c.mux(s.encode(frame))
        c.mux(s.encode())
    return buf.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


@dataclass
class Env:
    """The datasets the calls run on: written with 0.1.1's `Writer` calls."""

    tmp: Path
    video: bytes | None = field(default_factory=_avi)
    _n: int = 0

    def __post_init__(self) -> None:
        self.images = [_jpg(20 + 4 * i, 24, 60 * i) for i in range(2)]
        """The two samples' `image` payloads."""
        self.root = self.fresh_root()

    def fresh_root(self) -> str:
        """A new two-sample dataset (image, audio, video, an npy tensor, label, caption),
        for a call that writes."""
        root = self.fresh_path("ds")

        def write() -> None:
            w = resolve("ferroload.Writer")(root, "tiny")
            w.declare("image", "jpg", "tensor", "image")
            w.declare("audio", "wav", "tensor", "audio")
            w.declare("emb", "npy", "tensor", "npy")
            if self.video is not None:
                w.declare("video", "avi", "tensor", "video")
            for i in range(2):
                blobs = {
                    "image": self.images[i],
                    "audio": _wav(),
                    "emb": _npy(np.full(3, i, np.float32)),
                }
                if self.video is not None:
                    blobs["video"] = self.video
                w.add(f"s{i}", blobs, {"label": i, "caption": f"c{i}"})
            w.close()

        _quiet(write)
        return root

    def fresh_path(self, prefix: str) -> str:
        """A path in `tmp` that nothing uses yet."""
        self._n += 1
        return str(self.tmp / f"{prefix}{self._n}")

    def ds(self, root: str | None = None) -> Any:
        """`ferroload.Dataset.open(root)`."""
        import ferroload

        return _quiet(lambda: ferroload.Dataset.open(root or self.root))

    def tds(self) -> Any:
        """0.1.1's `FerroTorchDataset(ds, images=["image"], meta=["label"], resize=(16, 16))`."""
        ds = self.ds()
        return _quiet(
            lambda: resolve("ferroload.FerroTorchDataset")(
                ds, images=["image"], meta=["label"], resize=(16, 16), out="numpy"
            )
        )


def _topology(world: int = 1, rank: int = 0, nodes: int = 1) -> Any:
    """0.1.1's `Topology(num_nodes, node_rank, local_size, world_size, rank)`."""
    return _quiet(
        lambda: resolve("ferroload.Topology")(
            num_nodes=nodes, node_rank=0, local_size=1, world_size=world, rank=rank
        )
    )


def _square(label: Any) -> int:
    return int(label) ** 2


def _emb(img: Any) -> Any:
    return np.asarray(img).mean(axis=(0, 1)).astype("float32")


def _expect(ok: Callable[[], object], what: str) -> None:
    """Check an answer against 0.1.1's; the check's own warnings do not count."""
    if not _quiet(ok):
        raise AssertionError(f"answers differently from 0.1.1: {what}")


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(np.asarray(a).shape)


# --------------------------------------------------------------------------- 0.1.1 calls

#: How 0.1.1 made each class (PYTHON_API.md and the 0.1.1 docstrings): class path ->
#: (the 0.2 object at that path, env) -> an instance.
FACTORIES: dict[str, Callable[[Any, Env], Any]] = {
    "ferroload.Annotation": lambda cls, env: cls(),
    "ferroload.Dataset": lambda cls, env: cls.open(env.root),
    "ferroload.Executor": lambda cls, env: cls(),
    "ferroload.FerroIterableDataset": lambda cls, env: cls(
        env.ds(), columns=["image", "label"], resize=(16, 16), shuffle=False
    ),
    "ferroload.FerroLoader": lambda cls, env: cls(
        env.root, 2, columns=["image", "label"], resize=(16, 16), out="numpy"
    ),
    "ferroload.FerroSampler": lambda cls, env: cls(2, world_size=1, rank=0, seed=0),
    "ferroload.FerroTorchDataset": lambda cls, env: cls(
        env.ds(), images=["image"], meta=["label"], resize=(16, 16), out="numpy"
    ),
    "ferroload.LayerWriter": lambda cls, env: cls(
        env.fresh_root(), "extra", {"emb2": ("npy", "tensor", "npy")}
    ),
    "ferroload.LocalExecutor": lambda cls, env: cls(_topology()),
    "ferroload.Modality": lambda cls, env: cls("jpg", codec="image"),
    "ferroload.PrefetchLoader": lambda cls, env: cls(env.tds(), [[0, 1]], depth=2),
    "ferroload.RayExecutor": lambda cls, env: cls(_topology()),
    "ferroload.Sampler": lambda cls, env: cls(10, 2, 0),
    "ferroload.StaticPartitionExecutor": lambda cls, env: cls(_topology()),
    "ferroload.Topology": lambda cls, env: cls(
        num_nodes=1, node_rank=0, local_size=1, world_size=1, rank=0
    ),
    "ferroload.Writer": lambda cls, env: cls(env.fresh_path("w"), "w"),
    "ferroload.executor.MapPlan": lambda cls, env: cls(
        root=env.root,
        layer_name="plan",
        modalities={},
        total=2,
        process=lambda writer, positions: 0,
        sample_id=int,
    ),
}


def _batched(f: Any, env: Env) -> Thunk:
    def call() -> None:
        got = [list(b) for b in f(range(5), 2)]
        dropped = [list(b) for b in f(range(5), 2, drop_last=True)]
        _expect(lambda: got == [[0, 1], [2, 3], [4]], "batched")
        _expect(lambda: dropped == [[0, 1], [2, 3]], "batched(drop_last=True)")

    return call


def _numpy_collate(f: Any, env: Env) -> Thunk:
    def call() -> None:
        b = f([{"a": np.zeros(2), "b": 1, "c": "x"}, {"a": np.ones(2), "b": 2, "c": "y"}])
        _expect(lambda: _shape(b["a"]) == (2, 2) and list(b["b"]) == [1, 2], "numpy_collate")
        _expect(lambda: list(b["c"]) == ["x", "y"], "numpy_collate of strings")

    return call


def _subset_dataset(f: Any, env: Env) -> Thunk:
    tds = env.tds()

    def call() -> None:
        sub = f(tds, [1])
        _expect(lambda: len(sub) == 1 and sub[0]["label"] == 1, "subset_dataset")

    return call


def _make_loader(f: Any, env: Env) -> Thunk:
    def call() -> None:
        dl = f(env.root, 2, columns=["image", "label"], resize=(16, 16))
        batch = next(iter(dl))
        _expect(lambda: _shape(batch["image"]) == (2, 16, 16, 3), "make_loader batch")
        _expect(lambda: sorted(np.asarray(batch["label"]).tolist()) == [0, 1], "labels")

    return call


def _ferro_torch_dataset(cls: Any, env: Env) -> Thunk:
    ds = env.ds()

    def call() -> None:  # 0.1.1's defaults: out="numpy", resize=(224, 224)
        sample = cls(ds, images=["image"], meta=["label"])[1]
        _expect(lambda: isinstance(sample["image"], np.ndarray), "NumPy samples by default")
        _expect(lambda: sample["image"].shape == (224, 224, 3), "resize=(224, 224) by default")
        _expect(lambda: sample["image_present"] is True and sample["label"] == 1, "the sample")

    return call


def _ferro_iterable_dataset(cls: Any, env: Env) -> Thunk:
    ds = env.ds()

    def call() -> None:
        first = next(iter(cls(ds, images=["image"], meta=["label"], resize=(16, 16))))
        _expect(lambda: isinstance(first["image"], np.ndarray), "NumPy samples by default")
        _expect(lambda: first["image"].shape == (16, 16, 3), "one sample at a time")

    return call


def _numpy_loader(f: Any, env: Env) -> Thunk:
    def call() -> None:  # 0.1.1's FerroLoader(root, batch_size=32, *, ...), out="numpy"
        loader = f(env.root, batch_size=2, images=["image"], meta=["label"], resize=(16, 16))
        batch = next(iter(loader))
        _expect(lambda: isinstance(batch["image"], np.ndarray), "NumPy batches by default")
        _expect(lambda: batch["image"].shape == (2, 16, 16, 3), "the batch")

    return call


def _detect_topology(f: Any, env: Env) -> Thunk:
    def call() -> None:
        topo = f()
        _expect(lambda: topo.num_nodes == 1 and topo.source == "bare", "detect_topology()")

    return call


def _select_executor(f: Any, env: Env) -> Thunk:
    bare, multi = _topology(), _topology(4, 2, 2)

    def call() -> None:
        ex = f(bare)
        forced = f(multi, override="local")
        _expect(lambda: type(ex).__name__ == "LocalExecutor", "select_executor(bare)")
        _expect(lambda: type(forced).__name__ == "LocalExecutor", "override='local'")

    return call


def _commit_layer(f: Any, env: Env) -> Thunk:
    root = env.fresh_root()

    def rank_map(rank: int) -> None:  # each rank of a 2-rank job writes its fragment
        ex = resolve("ferroload.StaticPartitionExecutor")(_topology(2, rank, 2))
        env.ds(root).map(
            _square, inputs=["label"], outputs={"sq": "scalar"}, name="sq", executor=ex
        )

    def both_ranks() -> None:
        for rank in range(2):
            rank_map(rank)

    _quiet(both_ranks)

    def call() -> None:
        f(root, "sq", None)
        _expect(lambda: env.ds(root).get(1)["meta"]["sq"] == 1, "the committed layer")

    return call


def _main(f: Any, env: Env) -> Thunk:
    def call() -> None:
        try:
            f(["inspect", env.root])
        except SystemExit as exc:  # a 0.2 main may exit; 0.1.1's returned
            code = exc.code
            _expect(lambda: code in (0, None), f"ferroload inspect exited {code}")

    return call


#: What 0.1.1's importers raise offline.
_OFFLINE = (SystemExit, ImportError, OSError, ConnectionError)


@contextlib.contextmanager
def _no_child_process() -> Iterator[list[Any]]:
    """`subprocess.run` records its command and succeeds instead of starting it (0.2's
    `ferroload.cli.cmd_*` run the `ferroload` command in a child process, a few seconds
    each: the commands themselves are the CLI's tests; `main` runs one for real)."""
    started: list[Any] = []

    def run(args: Any, *_: Any, **__: Any) -> subprocess.CompletedProcess[bytes]:
        started.append(args)
        return subprocess.CompletedProcess(args, 0, b"", b"")

    with mock.patch("subprocess.run", run):
        yield started


def _cli_command(args: dict[str, Any], *, offline: bool = False) -> Callable[[Any, Env], Thunk]:
    """0.1.1's `cmd_*(argparse.Namespace)`: `args` plus `root`, `{out}` in a value the
    path of a new folder, `{root}` the dataset's. `offline`: 0.1.1's command downloads,
    and fails here, as it did without a network."""

    def setup(f: Any, env: Env) -> Thunk:
        out = env.fresh_path("out")
        fill = {"out": out, "root": env.root}
        values = {k: v.format(**fill) if isinstance(v, str) else v for k, v in args.items()}

        def call() -> None:
            try:
                with _no_child_process():
                    f(Namespace(root=env.root, **values))
            except _OFFLINE as exc:
                code = exc.code if isinstance(exc, SystemExit) else exc
                _expect(lambda: offline or code in (0, None), f"exited {code}")

        return call

    return setup


#: How 0.1.1 called each module function: name -> (the 0.2 object, env) -> a thunk to run.
#: A function missing here is only resolved.
CALLS: dict[str, Callable[[Any, Env], Thunk]] = {
    "batched": _batched,
    "numpy_collate": _numpy_collate,
    "subset_dataset": _subset_dataset,
    "make_loader": _make_loader,
    "detect_topology": _detect_topology,
    "select_executor": _select_executor,
    "commit_layer": _commit_layer,
    "main": _main,
    "cmd_inspect": _cli_command({}),
    "cmd_verify": _cli_command({}),
    "cmd_subset": _cli_command({"where": "label = 1", "out": None}),
    "cmd_list": _cli_command({}),
    "cmd_add": _cli_command({"uri": "{root}", "name": "tiny"}),
    "cmd_import_hf": _cli_command(
        {"dataset": "ferroload-none/none", "out": "{out}", "split": "train", "name": None}
        | {"limit": 1, "image_col": None},
        offline=True,
    ),
    "cmd_import_files": _cli_command(
        {"dataset": "ferroload-none/none", "out": "{out}", "jsonl": "meta.jsonl"}
        | {"media_field": "video_path", "modality": "video", "ext": "mp4", "codec": "video"}
        | {"limit": 1},
        offline=True,
    ),
}


#: Calls of a name at one of its 0.1.1 paths (the top-level `ferroload.X` is always the
#: 0.1.1 spelling there, with 0.1.1's defaults): path -> (the 0.2 object, env) -> a thunk.
PATH_CALLS: dict[str, Callable[[Any, Env], Thunk]] = {
    "ferroload.FerroTorchDataset": _ferro_torch_dataset,
    "ferroload.FerroIterableDataset": _ferro_iterable_dataset,
    "ferroload.FerroLoader": _numpy_loader,
}


def _protocol(name: str, obj: Any) -> Any:
    if name == "__len__":
        return len(obj)
    if name == "__iter__":
        return next(iter(obj))
    if name == "__getitem__":
        return obj[0]
    return obj.__getitems__([0, 1])


def _first(view: Any) -> Any:
    return view[0] if hasattr(view, "__getitem__") else next(iter(view))


def _on_ds(call: Callable[[Any, Env], None]) -> Callable[[Env], Thunk]:
    """A member recipe: `call(ds, env)` on the shared dataset, opened beforehand."""

    def setup(env: Env) -> Thunk:
        ds = env.ds()
        return lambda: call(ds, env)

    return setup


def _ds_get(ds: Any, env: Env) -> None:
    s = ds.get(0)
    meta, present, basename = s["meta"], s["image_present"], s["basename"]
    p = ds.get(1, modalities=["image"])
    projected = p["image"], p["meta"]
    _expect(lambda: meta == {"label": 0, "caption": "c0"}, 'get(0)["meta"]')
    _expect(lambda: present is True and basename == "s0", "get(0) flags and basename")
    _expect(lambda: projected == (env.images[1], {"label": 1, "caption": "c1"}), "projection")


def _ds_getitem(ds: Any, env: Env) -> None:
    meta = ds[1]["meta"]  # ds[i] == ds.get(i) in 0.1.1
    _expect(lambda: meta == {"label": 1, "caption": "c1"}, 'ds[i]["meta"]')


def _ds_subset(ds: Any, env: Env) -> None:
    sub = ds.subset("label = 1")
    ids = ds.subset("label = 1", return_indices=True)
    _expect(lambda: len(sub) == 1 and sub.get(0)["meta"]["label"] == 1, "subset() view")
    _expect(lambda: list(ids) == [1], "subset(..., return_indices=True)")


def _ds_indices(ds: Any, env: Env) -> None:
    sub = _quiet(lambda: ds.subset("label = 1"))
    whole, part = ds.indices, sub.indices
    _expect(lambda: whole is None and list(part) == [1], "indices")


def _ds_decode_many(ds: Any, env: Env) -> None:
    arrays = ds.decode_many([0, 1], "image", (16, 16))
    _expect(lambda: [_shape(a) for a in arrays] == [(16, 16, 3)] * 2, "decode_many")


def _ds_decode_audio(ds: Any, env: Env) -> None:
    clips = ds.decode_audio([0, 1], "audio")
    _expect(lambda: [_shape(c) for c in clips] == [(1, 800)] * 2, "[channels, samples] arrays")


def _ds_decode_video(ds: Any, env: Env) -> None:
    if env.video is None:  # pragma: no cover  (the workspace has the video extra)
        return
    clips = ds.decode_video([0], "video", 4, (16, 16))
    _expect(lambda: _shape(clips[0]) == (4, 16, 16, 3), "decode_video")


def _ds_iterable(ds: Any, env: Env) -> None:
    first = next(iter(ds.iterable(columns=["image", "label"], resize=(16, 16), shuffle=False)))
    _expect(lambda: _shape(first["image"]) == (16, 16, 3), "iterable() yields samples")


def _ds_jax(ds: Any, env: Env) -> None:
    ds.jax(images=["image"])  # 0.1.1 needed jax only when reading


def _ds_numpy(ds: Any, env: Env) -> None:
    sample = _first(ds.numpy(images=["image"], resize=(16, 16)))
    _expect(lambda: isinstance(sample["image"], np.ndarray), "numpy() yields NumPy")
    _expect(lambda: sample["image"].shape == (16, 16, 3), "numpy() sample")


def _ds_torch(ds: Any, env: Env) -> None:
    sample = _first(ds.torch(images=["image"], resize=(16, 16)))
    _expect(lambda: type(sample["image"]).__name__ == "Tensor", "torch() yields tensors")
    _expect(lambda: _shape(sample["image"]) == (16, 16, 3), "torch() sample")


def _ds_map(env: Env) -> Thunk:
    ds = env.ds(env.fresh_root())

    def call() -> None:
        out = ds.map(_emb, inputs=["image"], outputs={"mean": "array"}, name="mean")
        out = out.map(_square, inputs=["label"], outputs={"sq": "scalar"}, name="sq")
        _expect(lambda: _shape(out.read_array(0, "mean")) == (3,), "map, then read_array")
        _expect(lambda: out.get(1)["meta"]["sq"] == 1, "a scalar output in meta")

    return call


def _ds_open(env: Env) -> Thunk:
    cls = resolve("ferroload.Dataset")

    def call() -> None:
        ds = cls.open(env.root, str(env.tmp / "cache"))
        _expect(lambda: len(ds) == 2, "Dataset.open(root, cache_dir)")

    return call


def _ds_read(ds: Any, env: Env) -> None:
    default, named = ds.read(0), ds.read(1, "image")
    _expect(lambda: (default, named) == (env.images[0], env.images[1]), "read")


def _ds_read_many(ds: Any, env: Env) -> None:
    got = ds.read_many([1, 0], "image")
    _expect(lambda: list(got) == [env.images[1], env.images[0]], "read_many")


def _ds_read_batch(ds: Any, env: Env) -> None:
    buf, spans = ds.read_batch([0, 1], "image")
    parts = [bytes(memoryview(buf)[o : o + n]) for o, n in spans]
    _expect(lambda: parts == env.images, "read_batch: one buffer and (offset, length) spans")


def _ds_read_array(ds: Any, env: Env) -> None:
    a = ds.read_array(1, "emb")
    _expect(lambda: a.tolist() == [1, 1, 1], "read_array")


def _ds_read_arrays(ds: Any, env: Env) -> None:
    arrays = ds.read_arrays([0, 1], "emb")
    _expect(lambda: [a.tolist() for a in arrays] == [[0] * 3, [1] * 3], "read_arrays")


def _ds_meta_batch(ds: Any, env: Env) -> None:
    cols = ds.meta_batch([0, 1], ["label", "caption"])
    _expect(lambda: list(cols["label"]) == [0, 1], "meta_batch of ints")
    _expect(lambda: list(cols["caption"]) == ["c0", "c1"], "meta_batch of strings")


def _ds_reader(ds: Any, env: Env) -> None:
    reader = ds.reader
    _expect(lambda: len(reader) == 2, "reader")


def _ds_manifest(ds: Any, env: Env) -> None:
    m = ds.manifest()
    _expect(lambda: m["name"] == "tiny", 'manifest()["name"]')


def _ds_modalities(ds: Any, env: Env) -> None:
    mods = ds.modalities()
    want = {"ext": "jpg", "kind": "tensor", "codec": "image"}
    _expect(lambda: mods["image"] == want, "modalities()")


def _ds_schema(ds: Any, env: Env) -> None:
    schema = ds.schema()  # 0.1.1: the declared index columns, [] when none were declared
    _expect(lambda: all("name" in c for c in schema), "schema(): a list of {name, ...}")


def _ds_num_shards(ds: Any, env: Env) -> None:
    n = ds.num_shards()
    _expect(lambda: n == 1, "num_shards()")


def _ds_verify(ds: Any, env: Env) -> None:
    report = ds.verify()
    same = report == 2
    _expect(lambda: same, "verify() == number of samples")


def _ds_root(ds: Any, env: Env) -> None:
    root = ds.root
    _expect(lambda: os.path.samefile(root, env.root), "root")


def _ds_name(ds: Any, env: Env) -> None:
    name = ds.name
    _expect(lambda: name == "tiny", "name")


def _ds_version(ds: Any, env: Env) -> None:
    version = ds.version
    _expect(lambda: isinstance(version, int), "version (an int)")


def _ds_len(ds: Any, env: Env) -> None:
    n = len(ds)
    _expect(lambda: n == 2, "len(ds)")


def _writer(step: str) -> Callable[[Env], Thunk]:
    def setup(env: Env) -> Thunk:
        w = _quiet(lambda: resolve("ferroload.Writer")(env.fresh_path("w"), "w"))
        if step != "declare":
            _quiet(lambda: w.declare("image", "jpg", "tensor", "image"))
        if step == "close":
            _quiet(lambda: w.add("k0", {"image": _jpg(8, 8, 0)}, {"label": 1}))

        def call() -> None:
            if step == "declare":  # PYTHON_API.md's own example
                w.declare("image", "jpg", "tensor", "image")
                w.declare("text", "json", "scalar", "passthrough")
            elif step == "add":
                w.add("k0", {"image": _jpg(8, 8, 0)}, {"label": 1, "split": "train"})
            else:
                w.close()

        return call

    return setup


def _sampler_indices(env: Env) -> Thunk:
    cls = resolve("ferroload.Sampler")
    r0, r1 = _quiet(lambda: cls(10, 2, 0)), _quiet(lambda: cls(10, 2, 1))

    def call() -> None:
        both = [*r0.indices(0, 0), *r1.indices(0)]
        _expect(lambda: sorted(both) == list(range(10)), "two ranks' indices cover range(10)")

    return call


def _layer_writer(step: str) -> Callable[[Env], Thunk]:
    def setup(env: Env) -> Thunk:
        cls = resolve("ferroload.LayerWriter")
        root = env.fresh_root()
        mods = {"emb2": ("npy", "tensor", "npy")}
        lw = _quiet(lambda: cls(root, "extra", mods))
        if step in ("close", "existing_ids"):
            _quiet(lambda: lw.add(0, {"emb2": _npy(np.zeros(2, np.float32))}, None))

        def call() -> None:
            if step == "commit":
                cls.commit(root, "extra", mods)
            elif step == "add":
                lw.add(1, {"emb2": _npy(np.zeros(2, np.float32))}, {"note": "x"})
            elif step == "existing_ids":
                lw.existing_ids()
            else:
                lw.close()
                _expect(lambda: env.ds(root).read_array(0, "emb2").shape == (2,), "the layer")

        return call

    return setup


def _run_plan(ex_cls: str) -> Callable[[Env], Thunk]:
    def setup(env: Env) -> Thunk:
        import ferroload

        root = env.fresh_root()
        ex = _quiet(lambda: getattr(ferroload, ex_cls)(_topology()))
        plan_cls = _quiet(lambda: resolve("ferroload.executor.MapPlan"))

        def process(writer: Any, positions: list[int]) -> int:
            for p in positions:
                writer.add(p, None, {"plan": p})
            return len(positions)

        plan = _quiet(
            lambda: plan_cls(
                root=root, layer_name="plan", modalities={}, total=2, process=process, sample_id=int
            )
        )

        def call() -> None:
            written = ex.run(plan)
            _expect(lambda: written == 2, f"{ex_cls}.run(plan)")
            _expect(lambda: env.ds(root).get(1)["meta"]["plan"] == 1, "the plan's layer")

        return call

    return setup


def _ferro_sampler_set_epoch(env: Env) -> Thunk:
    s = _quiet(lambda: resolve("ferroload.FerroSampler")(2))

    def call() -> None:
        s.set_epoch(1)
        _expect(lambda: sorted(s) == [0, 1], "FerroSampler after set_epoch(1)")

    return call


def _tds_getitem(env: Env) -> Thunk:
    tds = env.tds()

    def call() -> None:
        sample = tds[1]
        _expect(lambda: _shape(sample["image"]) == (16, 16, 3), "FerroTorchDataset[i] image")
        _expect(lambda: sample["label"] == 1, "FerroTorchDataset[i] label")

    return call


def _stack(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A collate_fn of the caller's own (0.1.1's PrefetchLoader took any)."""
    return {k: np.stack([np.asarray(s[k]) for s in samples]) for k in samples[0]}


def _prefetch_iter(env: Env) -> Thunk:
    tds = env.tds()
    loader = _quiet(lambda: resolve("ferroload.PrefetchLoader")(tds, [[0, 1]], _stack, 2))

    def call() -> None:
        batches = list(loader)
        _expect(lambda: [_shape(b["image"]) for b in batches] == [(2, 16, 16, 3)], "batches")

    return call


_DS = "ferroload.Dataset"

#: 0.1.1 calls of class members: (class path, member) -> env -> a thunk. A member missing
#: here is resolved on an instance made as 0.1.1 made it (a protocol method is used:
#: len, next(iter(...)), [0], __getitems__).
MEMBERS: dict[tuple[str, str], Callable[[Env], Thunk]] = {
    (_DS, "decode_audio"): _on_ds(_ds_decode_audio),
    (_DS, "decode_many"): _on_ds(_ds_decode_many),
    (_DS, "decode_video"): _on_ds(_ds_decode_video),
    (_DS, "get"): _on_ds(_ds_get),
    (_DS, "indices"): _on_ds(_ds_indices),
    (_DS, "iterable"): _on_ds(_ds_iterable),
    (_DS, "jax"): _on_ds(_ds_jax),
    (_DS, "map"): _ds_map,
    (_DS, "meta_batch"): _on_ds(_ds_meta_batch),
    (_DS, "numpy"): _on_ds(_ds_numpy),
    (_DS, "open"): _ds_open,
    (_DS, "read"): _on_ds(_ds_read),
    (_DS, "read_array"): _on_ds(_ds_read_array),
    (_DS, "read_arrays"): _on_ds(_ds_read_arrays),
    (_DS, "read_batch"): _on_ds(_ds_read_batch),
    (_DS, "read_many"): _on_ds(_ds_read_many),
    (_DS, "reader"): _on_ds(_ds_reader),
    (_DS, "subset"): _on_ds(_ds_subset),
    (_DS, "torch"): _on_ds(_ds_torch),
    (_DS, "__len__"): _on_ds(_ds_len),
    (_DS, "__getitem__"): _on_ds(_ds_getitem),
    (_DS, "manifest"): _on_ds(_ds_manifest),
    (_DS, "modalities"): _on_ds(_ds_modalities),
    (_DS, "name"): _on_ds(_ds_name),
    (_DS, "num_shards"): _on_ds(_ds_num_shards),
    (_DS, "root"): _on_ds(_ds_root),
    (_DS, "schema"): _on_ds(_ds_schema),
    (_DS, "verify"): _on_ds(_ds_verify),
    (_DS, "version"): _on_ds(_ds_version),
    ("ferroload.Writer", "declare"): _writer("declare"),
    ("ferroload.Writer", "add"): _writer("add"),
    ("ferroload.Writer", "close"): _writer("close"),
    ("ferroload.Sampler", "indices"): _sampler_indices,
    ("ferroload.LayerWriter", "add"): _layer_writer("add"),
    ("ferroload.LayerWriter", "existing_ids"): _layer_writer("existing_ids"),
    ("ferroload.LayerWriter", "close"): _layer_writer("close"),
    ("ferroload.LayerWriter", "commit"): _layer_writer("commit"),
    ("ferroload.LocalExecutor", "run"): _run_plan("LocalExecutor"),
    ("ferroload.StaticPartitionExecutor", "run"): _run_plan("StaticPartitionExecutor"),
    ("ferroload.FerroSampler", "set_epoch"): _ferro_sampler_set_epoch,
    ("ferroload.FerroTorchDataset", "__getitem__"): _tds_getitem,
    ("ferroload.PrefetchLoader", "__iter__"): _prefetch_iter,
}


# --------------------------------------------------------------------------- classification


def _class_of() -> dict[str, str]:
    """Every 0.1.1 path of a class (its aliases too) -> its class path in the JSON."""
    out = {}
    for path, entry in API["classes"].items():
        out[path] = path
        for alias in entry["aliases"]:
            out[alias] = path
    return out


def _module_thunk(path: str, env: Env) -> Thunk:
    class_path = _class_of().get(path)
    name = path.rsplit(".", 1)[1]

    def thunk() -> None:
        value = resolve(path)
        if path in PATH_CALLS:
            PATH_CALLS[path](value, env)()
        elif class_path is not None and class_path in FACTORIES:
            FACTORIES[class_path](value, env)
        elif name in CALLS:
            CALLS[name](value, env)()

    return thunk


def _instance(class_path: str, env: Env) -> tuple[Any, Outcome | None]:
    """An instance made as 0.1.1 made it, or how making it failed."""
    made: list[Any] = []
    outcome = classify(
        class_path, lambda: made.append(FACTORIES[class_path](resolve(class_path), env))
    )
    return (made[0], None) if made else (None, outcome)


def _member_thunk(class_path: str, member: dict[str, Any], env: Env) -> Thunk | Outcome:
    name = member["name"]
    recipe = MEMBERS.get((class_path, name))
    if recipe is not None:
        try:
            return recipe(env)
        except Exception as exc:  # the setup itself failed (under the member's own name)
            status = "refused" if _is_refusal(exc) else "failing"
            return Outcome("", status, f"setting up the 0.1.1 call: {type(exc).__name__}: {exc}")
    instance, failed = _instance(class_path, env) if class_path in FACTORIES else (None, None)
    if instance is None:
        if member["kind"] in ("method", "staticmethod", "classmethod", "property"):
            return lambda: getattr(resolve(class_path), name)
        assert failed is not None, f"no factory for {class_path}"
        return Outcome("", failed.status, f"making an instance as 0.1.1 did: {failed.detail}")
    if member["kind"] == "protocol":
        return lambda: _protocol(name, instance)
    return lambda: getattr(instance, name)


def names() -> Iterator[tuple[str, str | None, dict[str, Any] | None]]:
    """Every name of the JSON: (path, class path, member) for members, (path, None, None)
    for module names."""
    for module, module_names in API["modules"].items():
        for name in module_names:
            yield f"{module}.{name}", None, None
    for class_path, entry in API["classes"].items():
        for member in entry["members"]:
            yield f"{class_path}.{member['name']}", class_path, member


def classify_all(tmp: Path) -> list[Outcome]:
    """The classification of every 0.1.1 name (the test's, and docs/migrating.md's)."""
    env = Env(tmp)
    outcomes = []
    for path, class_path, member in names():
        if class_path is None or member is None:
            thunk: Thunk | Outcome = _module_thunk(path, env)
        else:
            thunk = _member_thunk(class_path, member, env)
        got = (
            Outcome(path, thunk.status, thunk.detail)
            if isinstance(thunk, Outcome)
            else classify(path, thunk)
        )
        extra = EXTRAS.get(path)
        if extra is not None and importlib.util.find_spec(extra) is None:
            got = Outcome(path, "unavailable", f"needs {extra}, which is not installed")
        if path in DIFFERS and got.status == "failing":
            got = Outcome(path, "differs", f"{got.detail} ({DIFFERS[path]})")
        outcomes.append(got)
    return outcomes


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    """`{status: number of names}`, every status present."""
    c = Counter(o.status for o in outcomes)
    return {s: c.get(s, 0) for s in STATUSES}


@contextlib.contextmanager
def fresh_env(tmp: Path) -> Iterator[None]:
    """While classifying: no launcher variables (the executors read them), the catalogs
    (0.1.1's `$FERROLOAD_HOME`, 0.2's `$FERROLOAD_CATALOG`) in `tmp`, not the user's, and
    Hugging Face offline (0.1.1's importers download)."""
    keys = (
        *("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "NNODES", "SLURM_NTASKS", "SLURM_PROCID"),
        *("RAY_ADDRESS", "FERROLOAD_EXECUTOR", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
    )
    ours = {
        "FERROLOAD_HOME": str(tmp / "rs011-home"),
        "FERROLOAD_CATALOG": str(tmp / "catalog.duckdb"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    saved = {k: os.environ.pop(k) for k in (*keys, *ours) if k in os.environ}
    os.environ.update(ours)
    try:
        yield
    finally:
        for k in ours:
            os.environ.pop(k, None)
        os.environ.update(saved)


# --------------------------------------------------------------------------- tests


def test_the_list_is_the_wheels() -> None:
    """The JSON holds 0.1.1's names (a check on the file, not on 0.2)."""
    assert API["version"] == "0.1.1"
    assert set(API["modules"]) == {
        "ferroload",
        "ferroload.dataset",
        "ferroload.loader",
        "ferroload.executor",
        "ferroload.cli",
    }
    assert {"FerroTorchDataset", "make_loader", "FerroDataset", "commit_layer"} <= set(
        API["modules"]["ferroload"]
    )
    delegated = {
        m["name"] for m in API["classes"]["ferroload.Dataset"]["members"] if m.get("delegated")
    }
    assert delegated == {
        "manifest",
        "modalities",
        "name",
        "num_shards",
        "root",
        "schema",
        "verify",
        "version",
    }
    assert set(FACTORIES) == set(API["classes"]), "a class without a 0.1.1 constructor call"


def test_classify_tells_the_three_outcomes_apart() -> None:
    """The classifier itself: silent, warned with a pointer, refused with a pointer, and
    everything else failing."""
    from ferroload.compat import deprecated, removed

    def warns() -> None:
        deprecated("old()", "new()")

    def refuses() -> None:
        raise removed("old()", "new()")

    def warns_bare() -> None:
        warnings.warn("going away", FutureWarning, stacklevel=1)

    def bare_error() -> None:
        raise AttributeError("no attribute 'x'")

    assert classify("a", lambda: None).status == "silent"
    assert classify("a", warns).status == "warned"
    assert classify("a", refuses).status == "refused"
    assert classify("a", warns_bare).status == "failing"
    assert classify("a", bare_error).status == "failing"
    assert classify("a", lambda: _expect(lambda: False, "x")).status == "failing"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    """The classification of every 0.1.1 name (once per module)."""
    tmp = tmp_path_factory.mktemp("rs011-names")
    with fresh_env(tmp):
        return classify_all(tmp)


def test_every_rs011_name_works_warns_or_refuses(outcomes: list[Outcome]) -> None:
    """Each 0.1.1 name works, warns naming the 0.2 spelling, or refuses naming it."""
    c = counts(outcomes)
    print(f"\n0.1.1 names: {len(outcomes)}; " + ", ".join(f"{k} {v}" for k, v in c.items()))
    failing = [o for o in outcomes if o.status == "failing"]
    assert len(outcomes) == sum(len(v) for v in API["modules"].values()) + sum(
        len(v["members"]) for v in API["classes"].values()
    )
    assert not failing, f"{len(failing)} 0.1.1 names neither work, warn nor refuse:\n" + "\n".join(
        f"  {o.name}: {o.detail}" for o in failing
    )
    stale = [n for n in DIFFERS if next(o for o in outcomes if o.name == n).status != "differs"]
    assert not stale, f"DIFFERS lists {stale}, which no longer fail: take them out"


# --------------------------------------------------------------------------- the docs

DOCS = Path(__file__).resolve().parents[3] / "docs"
#: How docs/migrating.md words each status.
WORDS = {"silent": "works", "warned": "warns", "refused": "refused", "differs": "differs"}
_CELL = re.compile(r"(?<!\\)\|")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _row_names(first_cell: str) -> list[str]:
    """The 0.1.1 names a row of docs/migrating.md's table gives in its first cell: a
    module name in full (`ferroload.loader.batched`), a class member as `Class.member`."""
    short = {path.rsplit(".", 1)[1]: path for path in API["classes"]}
    modules = {f"{m}.{n}" for m, names in API["modules"].items() for n in names}
    members = {
        f"{path}.{m['name']}" for path, entry in API["classes"].items() for m in entry["members"]
    }
    names = []
    for token in re.findall(r"`([^`]+)`", first_cell):
        if token in modules:
            names.append(token)
            continue
        cls, _, member = token.partition(".")
        name = f"{short.get(cls, cls)}.{member}"
        assert name in members, f"docs/migrating.md names {token!r}, not a 0.1.1 name"
        names.append(name)
    return names


def _table_rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each row of the tables under "Every 0.1.1 name"."""
    section = _section(text, "## Every 0.1.1 name")
    first = text[: text.index(section)].count("\n")
    for i, line in enumerate(section.splitlines()):
        cells = [c.strip() for c in _CELL.split(line.strip())[1:-1]]
        if len(cells) < 3 or set(cells[0]) <= {"-", ":"} or cells[0] == "0.1.1":
            continue
        yield first + i, cells


def migrating_table() -> dict[str, str]:
    """{0.1.1 name: the status word its row gives} from the tables under "Every 0.1.1
    name" of docs/migrating.md."""
    rows: dict[str, str] = {}
    for _, cells in _table_rows((DOCS / "migrating.md").read_text(encoding="utf-8")):
        for name in _row_names(cells[0]):
            assert name not in rows, f"docs/migrating.md lists {name!r} twice"
            rows[name] = cells[2]
    return rows


def update_migrating(outcomes: list[Outcome]) -> list[str]:
    """Rewrite the status cell of each row of docs/migrating.md's table from `outcomes`
    (the hand-written cells stay); what cannot be done that way, for a person to do."""
    path = DOCS / "migrating.md"
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    status = {o.name: o.status for o in outcomes}
    todo, seen = [], set()
    for number, cells in _table_rows(text):
        names = _row_names(cells[0])
        seen.update(names)
        words = {WORDS.get(status[n], "FAILS") for n in names}
        if len(words) != 1:
            todo.append(f"split the row of {names}: {sorted(words)}")
            continue
        cells[2] = words.pop()
        lines[number] = "| " + " | ".join(cells) + " |"
        if cells[2] == "FAILS":
            todo.append(f"{names} fail: fix them (the test says why)")
    todo += [f"add a row for {n}" for n in status if n not in seen]
    path.write_text("\n".join(lines), encoding="utf-8")
    return todo


def test_migrating_page_gives_every_name_as_it_behaves(outcomes: list[Outcome]) -> None:
    """docs/migrating.md's table has a row for every 0.1.1 name, saying what the test
    finds (works / warns / refused)."""
    rows = migrating_table()
    missing = [o.name for o in outcomes if o.name not in rows]
    assert not missing, f"docs/migrating.md has no row for {missing}"
    wrong = [
        f"{o.name}: the page says {rows[o.name]!r}, the test finds {WORDS.get(o.status, o.status)!r}"
        for o in outcomes
        if rows[o.name] != WORDS.get(o.status) and o.status != "unavailable"
    ]
    assert not wrong, "docs/migrating.md is out of date:\n  " + "\n  ".join(wrong)


def test_api_page_lists_the_deprecated_names(outcomes: list[Outcome]) -> None:
    """docs/api/compat.md names every module-level 0.1.1 name that warns or is refused,
    and says when they go."""
    page = (DOCS / "api" / "compat.md").read_text(encoding="utf-8")
    assert "removed in ferroload 0.4" in page
    from ferroload.compat import REMOVED_IN

    assert REMOVED_IN == "0.4"
    listed = set(re.findall(r"`([^`]+)`", _section(page, "## The deprecated names")))
    modules = {f"{m}.{n}" for m, names in API["modules"].items() for n in names}
    deprecated = [o.name for o in outcomes if o.name in modules and o.status != "silent"]
    missing = [n for n in deprecated if n not in listed]
    assert not missing, f"docs/api/compat.md does not list {missing}"


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp, fresh_env(Path(tmp)):
        result = classify_all(Path(tmp))
    if sys.argv[1:] == ["--update-docs"]:  # the status column of docs/migrating.md's table
        for line in update_migrating(result):
            print(line)
    else:
        print("| 0.1.1 name | status | message |\n|---|---|---|")
        for o in result:
            detail = o.detail.replace("|", "\\|").replace("\n", " ")
            print(f"| `{o.name}` | {o.status} | {detail} |")
    print(counts(result), file=sys.stderr)
