"""ferroload-rs 0.1.1, the Rust original, as a benchmark peer: its own virtualenv from its
published wheel, its `Writer` for the data and its documented training path for the reads.

Its package is also called `ferroload`, so it can never share an interpreter with ours:
it lives in a virtualenv of its own (`FERROLOAD_RS011_PYTHON` names one, else one is made
with uv under the work folder, once) with numpy and the same torch release as ours (its
`out="torch"` collates with torch's `default_collate`). A script reaches it by running a
child with that interpreter: the benchmark helpers it imports (`_procs`, `_memory`,
`_peers`, `_meta`) need nothing but the standard library and numpy at the top.

Its documented path (its README's "run native" and PYTHON_API.md) is

    make_loader(root, batch_size, images=["image"], meta=["label"], resize=(H, W),
                out="torch", seed=0[, streaming=True])

which decodes in Rust on its own thread pool with the GIL released; `make_loader` below
builds exactly that.
"""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

from _peers import _imports, _uv

RS011_VERSION = "0.1.1"
_PROBE = "import ferroload, numpy, torch; assert ferroload.__version__ == '0.1.1'"

_WRITE = """
import pickle, sys
import ferroload
with open(sys.argv[1], "rb") as f:
    data = pickle.load(f)
w = ferroload.Writer(sys.argv[2], data["name"])
w.declare("image", data["ext"], "tensor", "image")
for key, payload, label in zip(data["keys"], data["payloads"], data["labels"]):
    w.add(key, {"image": payload}, {"label": label})
w.close()
"""


def rs011_python(workdir: Path) -> tuple[str | None, str | None]:
    """The interpreter of a virtualenv with ferroload-rs 0.1.1, numpy and our torch
    release: (python, None), or (None, why not) where it cannot be made (offline, no uv)."""
    given = os.environ.get("FERROLOAD_RS011_PYTHON")
    if given:
        return (given, None) if _imports(given, _PROBE) else (None, f"{given}: {_PROBE} fails")
    venv = Path(workdir) / "rs011-venv"
    python = venv / "bin" / "python"
    if python.exists() and _imports(python, _PROBE):
        return str(python), None
    try:
        torch = importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None, "torch is not installed here (its version is the peer's)"
    pip = ["pip", "install", "-q", "--no-config", "--python", str(python)]
    try:
        _uv(
            venv,
            ["venv", "-q", "--no-config", "--python", sys.executable, str(venv)],
            [*pip, f"ferroload=={RS011_VERSION}", "numpy", f"torch=={torch}"],
        )
    except RuntimeError as exc:
        return None, f"ferroload-rs {RS011_VERSION} venv: {exc}"
    if not _imports(python, _PROBE):
        return None, f"ferroload-rs {RS011_VERSION} venv: {_PROBE} fails"
    return str(python), None


def write_rs011(python: str, samples: Any, root: Path) -> None:
    """`samples` (keys, payloads, labels) written by ferroload-rs 0.1.1's own `Writer`,
    the way its README writes a dataset: one declared image column, a `label` metadata."""
    root.parent.mkdir(parents=True, exist_ok=True)
    data = root.parent / f"{root.name}-input.pkl"
    with open(data, "wb") as f:
        pickle.dump(
            {
                "name": samples.name,
                "ext": samples.ext,
                "keys": list(samples.keys),
                "payloads": samples.payloads,
                "labels": [int(x) for x in samples.labels],
            },
            f,
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    try:
        subprocess.run([python, "-c", _WRITE, str(data), str(root)], check=True)
    finally:
        data.unlink(missing_ok=True)


def leave(code: int) -> None:
    """Leave a benchmark process without the interpreter's teardown: through
    `ferroload_core.exit_process` where our packages are installed (see
    benchmarks/README.md); in ferroload-rs 0.1.1's venv, which lacks them, with `os._exit`
    once the output is flushed (its loader's threads abort the teardown: "FATAL:
    exception not rethrown")."""
    try:
        from ferroload_core import exit_process
    except ImportError:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    exit_process(code)


def make_loader(path: str, batch: int, size: int, *, streaming: bool = False) -> Any:
    """ferroload-rs 0.1.1's documented training loader (run in its own venv only)."""
    import ferroload

    if ferroload.__version__ != RS011_VERSION:
        raise RuntimeError(f"this process runs ferroload {ferroload.__version__}, not 0.1.1")
    return ferroload.make_loader(
        path,
        batch,
        images=["image"],
        meta=["label"],
        resize=(size, size),
        out="torch",
        seed=0,
        streaming=streaming,
    )
