"""How the peers are set up: the same samples written as ferroload, WebDataset and Hugging Face datasets, stock Pillow beside the workspace's Pillow-SIMD, and the peers' PIL-to-tensor transform.

Heavy imports (ferroload, webdataset, datasets, torch, PIL) happen inside the functions,
so that a worker process loads only what its system needs.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- writers


def write_ferroload(samples: Any, root: Path, name: str | None = None) -> None:
    """The quickstart way: one Writer, one declared modality, an int label as metadata."""
    import ferroload

    w = ferroload.Writer(root, name or samples.name)
    w.declare("image", samples.ext, "tensor", "image")
    for key, payload, label in zip(samples.keys, samples.payloads, samples.labels, strict=True):
        w.add(key, {"image": payload}, {"label": label})
    w.close()


def write_webdataset(samples: Any, root: Path, shards: int) -> list[str]:
    """`ShardWriter` with the default encoder (`cls` labels), `shards` shards of equal count
    (so that both DataLoader workers have shards to read), `mtime=0` (no PAX headers)."""
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    pattern = str(root / f"{samples.name}-%06d.tar")
    per = math.ceil(len(samples) / shards)
    with wds.ShardWriter(pattern, maxcount=per, maxsize=1 << 40, verbose=0, mtime=0) as sink:
        for key, payload, label in zip(samples.keys, samples.payloads, samples.labels, strict=True):
            sink.write({"__key__": key, samples.ext: payload, "cls": label})
    return sorted(str(p) for p in root.glob("*.tar"))


def write_hf(samples: Any, root: Path) -> None:
    """An HF dataset of the same bytes: `image` is an `Image()` feature (HF decodes it with
    PIL), `label` an int64 column."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    hfds = datasets.Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} for b in samples.payloads], "label": samples.labels},
        features=features,
    )
    hfds.save_to_disk(str(root))


# --------------------------------------------------------------------------- worker side


def pil_to_tensor(size: int) -> Callable[[Any], Any]:
    """The peers' transform: an RGB PIL image -> uint8 HWC tensor of `size` x `size`."""
    import torch
    from PIL import Image

    bilinear = Image.Resampling.BILINEAR

    def transform(img: Any) -> Any:
        return torch.from_numpy(np.array(img.convert("RGB").resize((size, size), bilinear)))

    return transform


def identity(x: Any) -> Any:
    """The label's transform in a WebDataset `map_tuple` (a module function: it pickles)."""
    return x


def shutdown(dl: Any) -> None:
    """Stop a DataLoader's persistent workers (so that RUSAGE_CHILDREN counts them)."""
    it = getattr(dl, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    dl._iterator = None
    import multiprocessing

    multiprocessing.active_children()  # reaps finished workers


def pil_info() -> dict[str, Any] | None:
    """The Pillow this process imported (version, folder, libjpeg-turbo), or None if none."""
    if "PIL" not in sys.modules:
        return None
    from PIL import __version__ as pil_version
    from PIL import features

    return {
        "pillow": pil_version,
        "path": str(Path(sys.modules["PIL"].__file__ or "").parent),
        "libjpeg_turbo": features.version("libjpeg_turbo"),
    }


# --------------------------------------------------------------------------- stock Pillow


def _imports(python: str | Path, probe: str, env: dict[str, str] | None = None) -> bool:
    """Whether `python -c probe` runs (within a minute)."""
    try:
        r = subprocess.run([str(python), "-c", probe], env=env, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _uv(folder: Path, *steps: list[str]) -> None:
    """Run `uv <step>` for each step, in `folder`'s parent, after emptying `folder`; on a
    failure remove `folder` and raise RuntimeError with the reason.

    Outside the workspace and with --no-config: the workspace's uv settings drop every
    requirement on pillow (pillow-simd replaces it there). Offline, fail fast rather than
    wait out uv's default 30 s per request."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        raise RuntimeError("uv not found")
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        for step in steps:
            subprocess.run(
                [uv, *step],
                check=True,
                capture_output=True,
                text=True,
                timeout=180,
                cwd=folder.parent,
                env={**os.environ, "UV_HTTP_TIMEOUT": "15"},
            )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        tail = (exc.stderr or "").strip().splitlines()[-1:] or [str(exc)]
        raise RuntimeError(tail[0]) from None
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(str(exc)) from None


def stock_pillow(workdir: Path) -> tuple[Path | None, str | None]:
    """A folder with stock Pillow from PyPI (`uv pip install --target`), cached in the
    workdir; put first on PYTHONPATH, it shadows the workspace's Pillow-SIMD and nothing
    else. Returns (folder, None) or (None, why not)."""
    target = workdir / "stock-pillow-lib"
    probe = "import PIL.Image, PIL.features; print(PIL.__version__)"

    def works() -> bool:
        env = {**os.environ, "PYTHONPATH": str(target)}
        return (target / "PIL").is_dir() and _imports(sys.executable, probe, env)

    if works():
        return target, None
    pip = ["pip", "install", "-q", "--no-config", "--python", sys.executable]
    try:
        _uv(target, [*pip, "--target", str(target), "pillow"])
    except RuntimeError as exc:
        return None, str(exc)
    if not works():
        return None, "the installed Pillow does not import"
    return target, None


class StockPillow:
    """Stock Pillow (from PyPI) in a side virtualenv, cached under the workdir, serving
    `script --stock-worker <data>` (a pickle of `data`) over a pipe.

    `available` is False (with `reason`) when the venv cannot be made (offline, no uv).
    """

    def __init__(
        self, workdir: Path, data: dict[str, list[bytes]], run_dir: Path, script: str | Path
    ) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.reason: str | None = None
        self.setup_s: float | None = None
        self.venv = workdir / "stock-pillow-venv"
        try:
            python = self._ensure_venv()
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            self.reason = f"side venv not available: {exc}"
            return
        path = run_dir / "stock-data.pkl"
        with open(path, "wb") as f:
            pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc = subprocess.Popen(
            [str(python), str(Path(script).resolve()), "--stock-worker", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._read()
        if not ready.get("ready"):
            self.close()
            self.reason = f"stock worker did not start: {ready}"
            return
        ready.pop("ready")
        self.info = ready

    @property
    def available(self) -> bool:
        return self.proc is not None

    def _ensure_venv(self) -> Path:
        python = self.venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        probe = "import PIL.Image, PIL.ImageOps, PIL.features, numpy"
        if python.exists() and _imports(python, probe):
            return python
        t0 = time.perf_counter()
        pip = ["pip", "install", "-q", "--no-config", "--python", str(python)]
        _uv(
            self.venv,
            ["venv", "-q", "--no-config", "--python", sys.executable, str(self.venv)],
            [*pip, "pillow", "numpy"],
        )
        if not (python.exists() and _imports(python, probe)):
            raise RuntimeError("the venv's Pillow does not import")
        self.setup_s = time.perf_counter() - t0
        return python

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"stock worker exited with {self.proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.ask(op="quit")
            except (OSError, RuntimeError, ValueError):
                pass
            finally:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(timeout=30)
                self.proc = None
