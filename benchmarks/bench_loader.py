"""ferroload's loader against WebDataset and Hugging Face `datasets`, side by side in one run.

1. tiny: 32x32 PNG + int label -> uint8 (B, 32, 32, 3) + int64 labels, batches of 256.
2. jpeg: 256x256 JPEG q90 + int label -> resized to uint8 (B, 224, 224, 3), batches of 64.

The same encoded images are written once as a ferroload dataset, as WebDataset shards and
as a Hugging Face `save_to_disk` folder. Each system (and each of its configurations) then
runs in its own fresh process: ferroload's `make_loader` (one process, its decode threads);
WebDataset's pipeline through `wds.WebLoader` (a torch DataLoader) with 0 and 2 worker
processes; `load_from_disk` + `set_transform` through a torch DataLoader with 0 and 2
workers; and the codec alone (`ImageDecoder.decode_batch` over the bytes in memory), the
ceiling of the loader. Every process runs a warm-up epoch (which also checks what it
delivers), then the processes take turns, one full epoch each per round, best of N.
Peak memory comes from the process itself (`ru_maxrss`, its workers' too) and from the
whole process tree (PSS, sampled). A last test stalls the consumer to measure what
`prefetch_bytes` (64 MiB vs the default 512 MiB) holds at most.

Run it from the repository root:

    uv run python benchmarks/bench_loader.py            # full run (several minutes)
    uv run python benchmarks/bench_loader.py --quick    # smoke run (about a minute)

It prints a table and writes the results as JSON (see benchmarks/README.md for what each
figure means). Timings are never asserted on: goals are reported as PASS / FAIL.

The peers decode with Pillow. By default their processes import stock Pillow from PyPI (what
WebDataset and HF users have), installed once into a folder under the workdir and put first
on their `PYTHONPATH`; `--no-stock` (or no network) runs them on the workspace's Pillow-SIMD,
which is faster, so a stricter test. Heavy imports happen inside the worker processes only:
this module imports nothing but the standard library and numpy at the top.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import pickle
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from _meta import git_commit, loadavg, pkg_version, write_json

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "bench_loader.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_loader_quick.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench"
SEED = 20261202
MiB = 1 << 20
NUM_CLASSES = 1000

GOAL_TINY = 2.0  # ferroload samples/s over the best peer configuration's, tiny set, at least
GOAL_JPEG = 1.3  # the same, JPEG set, at least
GOAL_CODEC = 0.85  # loader samples/s over the codec's own all-core images/s (JPEG), at least
GOAL_PREFETCH_OVERHEAD = 64 * MiB  # peak RSS growth above prefetch_bytes, stalled consumer
PREFETCH_BUDGETS = (64 * MiB, 512 * MiB)  # the test's small budget and the default
JPEG_MEAN_TOLERANCE = 1.0  # |mean pixel - ferroload's| across systems (different resizers)


class Sizes(NamedTuple):
    """How big one run is."""

    tiny: int  # 32x32 PNGs
    jpeg: int  # 256x256 JPEGs
    rounds: int  # timed epochs per configuration (best of)
    wds_shards: int  # WebDataset shards per set (so that every DataLoader worker has some)
    stall_s: float  # longest wait for the prefetcher to fill its budget
    peer_workers: tuple[int, ...]  # DataLoader num_workers of the peers' configurations


FULL = Sizes(tiny=20_480, jpeg=5_000, rounds=3, wds_shards=8, stall_s=60.0, peer_workers=(0, 2))
# Quick: every process imports torch (~3.5 s of CPU each), so fewer of them.
QUICK = Sizes(tiny=2_048, jpeg=256, rounds=1, wds_shards=4, stall_s=10.0, peer_workers=(2,))


class SetSpec(NamedTuple):
    """One benchmark data set and the batches every system makes of it."""

    key: str
    ext: str  # png | jpg
    src: int  # side of the encoded images
    out: int  # side of the output images
    batch: int


SETS = (
    SetSpec("tiny", "png", 32, 32, 256),
    SetSpec("jpeg", "jpg", 256, 224, 64),
)


# =========================================================================== worker side
# Everything below up to "driver side" runs in the per-system processes. Heavy imports
# (torch, ferroload, webdataset, datasets, PIL) stay inside these functions, so that each
# process loads only what its system needs.


def _maxrss(who: int) -> int:
    """Peak resident set size in bytes (`ru_maxrss` is KiB on Linux, bytes on macOS).

    For this process, VmHWM where there is one: Linux carries `ru_maxrss` over `execve`,
    so a process started from the (large) driver would report the driver's size."""
    if who == resource.RUSAGE_SELF:
        hwm = _status_kib("VmHWM")
        if hwm is not None:
            return max(hwm, _HWM_FLOOR)
    v = resource.getrusage(who).ru_maxrss
    return int(v if sys.platform == "darwin" else v * 1024)


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


_HWM_FLOOR = 0  # this process's peak RSS before the last reset of VmHWM


def _reset_hwm() -> bool:
    """Reset this process's peak RSS (VmHWM), Linux only (`_maxrss` still sees the old)."""
    global _HWM_FLOOR
    _HWM_FLOOR = max(_HWM_FLOOR, _status_kib("VmHWM") or 0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


_INFO: dict[str, Any] = {}  # what the builder wants the driver to know


class _Epoch(NamedTuple):
    run: Callable[[int, bool], dict[str, Any]]  # (epoch, check) -> result
    close: Callable[[], None]
    loader: Any


def _consume(batches: Any, unpack: Callable[[Any], tuple[Any, Any]], check: bool) -> dict[str, Any]:
    """One pass over `batches`; with `check`, also what they hold (slower, untimed use)."""
    t0 = time.perf_counter()
    n = 0
    if not check:
        for b in batches:
            n += len(unpack(b)[0])
        return {"s": time.perf_counter() - t0, "n": n}
    first: dict[str, Any] | None = None
    pixels = 0
    counts = np.zeros(NUM_CLASSES, dtype=np.int64)
    for b in batches:
        images, labels = unpack(b)
        arr = np.asarray(images)
        if first is None:
            first = {
                "image_type": type(images).__module__ + "." + type(images).__name__,
                "image_dtype": str(arr.dtype),
                "image_shape": list(arr.shape),
                "label_type": None if labels is None else type(labels).__name__,
                "label_dtype": None if labels is None else str(np.asarray(labels).dtype),
                "label_shape": None if labels is None else list(np.asarray(labels).shape),
            }
        pixels += int(arr.sum(dtype=np.int64))
        n += len(arr)
        if labels is not None:
            counts += np.bincount(np.asarray(labels), minlength=NUM_CLASSES)[:NUM_CLASSES]
    dt = time.perf_counter() - t0
    return {
        "s": dt,
        "n": n,
        "first": first,
        "pixel_sum": pixels,
        "label_counts": counts.tolist(),
    }


def _build_ferroload(spec: dict[str, Any]) -> _Epoch:
    import ferroload

    # The quickstart's `ferroload.make_loader`, or the loader package's where the facade
    # does not re-export it (yet).
    make_loader: Any = getattr(ferroload, "make_loader", None)
    _INFO["api"] = "ferroload.make_loader"
    if make_loader is None:
        import ferroload_loader

        make_loader = ferroload_loader.make_loader
        _INFO["api"] = "ferroload_loader.make_loader (not re-exported by the facade)"
    size = spec["out"]
    dl = make_loader(
        spec["path"],
        batch_size=spec["batch"],
        images=["image"],
        meta=["label"],
        resize=(size, size),
        out="torch",
        seed=0,
        prefetch_bytes=spec["prefetch_bytes"],
    )

    def run(epoch: int, check: bool) -> dict[str, Any]:
        dl.set_epoch(epoch)
        st = dl.stats
        b0, w0, n0 = st.build_seconds, st.wait_seconds, st.batches
        res = _consume(dl, lambda b: (b["image"], b["label"]), check)
        res["build_s"] = st.build_seconds - b0  # on the prefetch thread
        res["wait_s"] = st.wait_seconds - w0  # the consumer waiting for a batch
        res["batches"] = st.batches - n0
        return res

    return _Epoch(run, dl.close, dl)


def _build_codec(spec: dict[str, Any]) -> _Epoch:
    from ferroload_codec import ImageDecoder

    with open(spec["payloads"], "rb") as f:
        payloads: list[bytes] = pickle.load(f)
    size, batch = spec["out"], spec["batch"]
    chunks = [payloads[i : i + batch] for i in range(0, len(payloads), batch)]
    dec = ImageDecoder((size, size))  # the loader's defaults: exact, bilinear, every CPU

    def batches() -> Iterator[Any]:
        for c in chunks:
            yield dec.decode_batch(c).images

    def run(epoch: int, check: bool) -> dict[str, Any]:
        return _consume(batches(), lambda b: (b, None), check)

    return _Epoch(run, dec.close, dec)


def _pil_to_tensor(size: int) -> Callable[[Any], Any]:
    """The peers' transform: an RGB PIL image -> uint8 HWC tensor of `size` x `size`."""
    import torch
    from PIL import Image

    bilinear = Image.Resampling.BILINEAR

    def transform(img: Any) -> Any:
        return torch.from_numpy(np.array(img.convert("RGB").resize((size, size), bilinear)))

    return transform


def _shutdown(dl: Any) -> None:
    """Stop a DataLoader's persistent workers (so that RUSAGE_CHILDREN counts them)."""
    it = getattr(dl, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    dl._iterator = None
    import multiprocessing

    multiprocessing.active_children()  # reaps finished workers


def _identity(x: Any) -> Any:
    return x


def _build_wds(spec: dict[str, Any]) -> _Epoch:
    import webdataset as wds

    workers = spec["workers"]
    transform = _pil_to_tensor(spec["out"])
    ds = (
        wds.WebDataset(spec["urls"], shardshuffle=100, seed=0)
        .shuffle(1000)
        .decode("pil")
        .to_tuple(spec["ext"], "cls")
        .map_tuple(transform, _identity)
        .batched(spec["batch"])
    )
    dl = wds.WebLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)

    def run(epoch: int, check: bool) -> dict[str, Any]:
        return _consume(dl, lambda b: (b[0], b[1]), check)

    def close() -> None:
        _shutdown(dl.pipeline[0])

    return _Epoch(run, close, dl)


def _build_hf(spec: dict[str, Any]) -> _Epoch:
    import datasets
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()
    workers = spec["workers"]
    transform = _pil_to_tensor(spec["out"])
    hfds = datasets.load_from_disk(spec["path"])

    def batch_transform(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {"image": [transform(im) for im in batch["image"]], "label": batch["label"]}

    hfds.set_transform(batch_transform)
    dl = DataLoader(
        hfds,
        batch_size=spec["batch"],
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )

    def run(epoch: int, check: bool) -> dict[str, Any]:
        return _consume(dl, lambda b: (b["image"], b["label"]), check)

    return _Epoch(run, lambda: _shutdown(dl), dl)


BUILDERS: dict[str, Callable[[dict[str, Any]], _Epoch]] = {
    "ferroload": _build_ferroload,
    "codec": _build_codec,
    "wds": _build_wds,
    "hf": _build_hf,
}


def _stall(loader: Any, max_wait: float) -> dict[str, Any]:
    """One epoch whose consumer takes the first batch, then waits until the prefetcher has
    stopped building (its budget is full, or the epoch is built), then drains the rest.
    Returns the peak RSS growth over the RSS before the epoch."""
    gc.collect()
    hwm_before = _status_kib("VmHWM")  # the peak of every epoch so far
    exact = _reset_hwm()
    before = _status_kib("VmRSS") or 0
    peak_sampled = before
    loader.set_epoch(loader.epoch + 1)
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    last, stable = -1.0, 0
    while stable < 5 and time.perf_counter() - t0 < max_wait:
        time.sleep(0.1)
        peak_sampled = max(peak_sampled, _status_kib("VmRSS") or 0)
        built = loader.stats.build_seconds
        stable = stable + 1 if built == last else 0
        last = built
    waited = time.perf_counter() - t0
    rss_full = _status_kib("VmRSS") or 0
    n = 1
    for _ in it:
        n += 1
    hwm = _status_kib("VmHWM") if exact else None
    peak = max(hwm or 0, peak_sampled, rss_full)
    return {
        "hwm_before": hwm_before,
        "rss_before": before,
        "rss_full_queue": rss_full,
        "peak_rss": peak,
        "peak_exact": exact,
        "delta": peak - before,
        "waited_s": waited,
        "batches": n,
        "peak_prefetch_bytes": loader.stats.peak_prefetch_bytes,
        "prefetch_bytes": loader.prefetch_bytes,
    }


def _breakdown(ep: _Epoch, epoch: int) -> dict[str, Any]:
    """One epoch of a ferroload loader with its image decoders' `decode_batch` timed: how
    much of building a batch is the codec, and how much the rest (reads, index columns,
    collation). Untimed for the results (the timer wraps every call)."""
    decoders = [f.decoder for f in getattr(ep.loader, "fields", []) if hasattr(f, "decoder")]
    spent = [0.0]
    for d in decoders:

        def timed(*a: Any, _orig: Any = d.decode_batch, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0

        d.decode_batch = timed  # an instance attribute shadows the method
    try:
        res = ep.run(epoch, False)
    finally:
        for d in decoders:
            with contextlib.suppress(AttributeError):
                del d.decode_batch
    res["decode_s"] = spent[0] if decoders else None
    return res


def _pil_info() -> dict[str, Any] | None:
    if "PIL" not in sys.modules:
        return None
    from PIL import __version__ as pil_version
    from PIL import features

    return {
        "pillow": pil_version,
        "path": str(Path(sys.modules["PIL"].__file__ or "").parent),
        "libjpeg_turbo": features.version("libjpeg_turbo"),
    }


def worker(spec_json: str) -> None:
    """A per-system process: JSON commands on stdin, one JSON answer per line on stdout."""
    spec = json.loads(spec_json)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints goes to the log, not the protocol
    t0 = time.perf_counter()
    ep = BUILDERS[spec["system"]](spec)
    ready = {
        "ready": True,
        "setup_s": time.perf_counter() - t0,
        "rss_setup": _status_kib("VmRSS"),
        "pil": _pil_info(),
        "torch": "torch" in sys.modules,
        **_INFO,
    }
    print(json.dumps(ready), file=out, flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op in ("epoch", "breakdown"):
                gc.collect()
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                if op == "epoch":
                    answer = ep.run(cmd["epoch"], cmd.get("check", False))
                else:
                    answer = _breakdown(ep, cmd["epoch"])
                # Page faults of this process (not of DataLoader workers): fresh output
                # memory costs one per 4 KiB page touched.
                answer["minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            elif op == "stall":
                answer = _stall(ep.loader, cmd["max_wait"])
            elif op == "quit":
                ep.close()
                del ep
                gc.collect()
                answer = {
                    "maxrss_self": _maxrss(resource.RUSAGE_SELF),
                    "maxrss_children": _maxrss(resource.RUSAGE_CHILDREN),
                    "pil": _pil_info(),
                }
                print(json.dumps(answer), file=out, flush=True)
                return
            else:
                answer = {"error": f"unknown op {op!r}"}
        except Exception as exc:  # reported to the driver, which marks the system failed
            import traceback

            traceback.print_exc()
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), file=out, flush=True)


# =========================================================================== driver side


def _proc_tree(root: int) -> list[int]:
    """`root` and its descendants (scans /proc: no /proc/PID/task/TID/children here)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return [root]
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _smaps(pid: int) -> dict[str, int] | None:
    """Rss, Pss and Pss_Anon of one process, in bytes (Linux `smaps_rollup`)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss", "Pss_Anon"):
            out[key] = int(rest.split()[0]) * 1024
    return out


class MemSampler:
    """Samples the memory of a process tree every `interval` seconds, in a thread."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = {"rss": 0, "pss": 0, "pss_anon": 0, "procs": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        tot = {"rss": 0, "pss": 0, "pss_anon": 0}
        pids = _proc_tree(self.pid)
        for pid in pids:
            s = _smaps(pid)
            if s:
                tot["rss"] += s.get("Rss", 0)
                tot["pss"] += s.get("Pss", 0)
                tot["pss_anon"] += s.get("Pss_Anon", 0)
        for k, v in tot.items():
            self.peak[k] = max(self.peak[k], v)
        self.peak["procs"] = max(self.peak["procs"], len(pids))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Child:
    """One system's process, driven over a pipe; its stderr goes to a log file."""

    def __init__(self, name: str, spec: dict[str, Any], run_dir: Path, env: dict[str, str]):
        self.name = name
        self.spec = spec
        self.log = run_dir / f"{name}.log"
        self.error: str | None = None
        self.ready: dict[str, Any] = {}
        # Tree memory peaks per phase: "run" (warm-up and timed epochs), "stall".
        self.peaks: dict[str, dict[str, int]] = {}
        with open(self.log, "w") as log:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"exited with {self.proc.wait()}: {self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{answer['error']}: {self.log_tail()}")
        return answer

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log.read_text().strip().splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self) -> None:
        try:
            self.ready = self._read()
        except (RuntimeError, ValueError) as exc:
            self.fail(f"did not start: {exc}")

    @property
    def ok(self) -> bool:
        return self.proc is not None and self.error is None

    def fail(self, why: str) -> None:
        self.error = why
        print(f"  ! {self.name}: {why}", file=sys.stderr, flush=True)
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def ask(self, phase: str = "run", *, sample: bool = True, **cmd: Any) -> dict[str, Any] | None:
        """Send one command and, with `sample`, sample the process tree's memory until the
        answer (the peak goes to `peaks[phase]`).

        Timed epochs are not sampled: reading `smaps_rollup` walks the process's page
        tables under its memory-map lock, which stalls its allocations, and more so the
        larger its address space (torch's libraries, mapped shards) — it would tax some
        systems more than others.
        """
        if not self.ok:
            return None
        assert self.proc is not None and self.proc.stdin is not None
        try:
            with MemSampler(self.proc.pid) if sample else contextlib.nullcontext() as mem:
                self.proc.stdin.write(json.dumps(cmd) + "\n")
                self.proc.stdin.flush()
                answer = self._read()
        except (OSError, RuntimeError, ValueError) as exc:
            self.fail(f"{cmd['op']} failed: {exc}")
            return None
        if mem is not None:
            peak = self.peaks.setdefault(phase, dict.fromkeys(mem.peak, 0))
            for k, v in mem.peak.items():
                peak[k] = max(peak[k], v)
        return answer

    def close(self) -> dict[str, Any] | None:
        answer = self.ask(op="quit", phase="quit")
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        return answer


# --------------------------------------------------------------------------- data


def write_ferroload(samples: Any, root: Path) -> None:
    """The quickstart way: one Writer, one declared modality, an int label as metadata."""
    import ferroload

    w = ferroload.Writer(root, samples.name)
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


def stock_pillow(workdir: Path) -> tuple[Path | None, str | None]:
    """A folder with stock Pillow from PyPI (`uv pip install --target`), cached in the
    workdir; put first on PYTHONPATH, it shadows the workspace's Pillow-SIMD and nothing
    else. Returns (folder, None) or (None, why not)."""
    target = workdir / "stock-pillow-lib"
    probe = "import PIL.Image, PIL.features; print(PIL.__version__)"

    def works() -> bool:
        if not (target / "PIL").is_dir():
            return False
        env = {**os.environ, "PYTHONPATH": str(target)}
        try:
            r = subprocess.run(
                [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0

    if works():
        return target, None
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        return None, "uv not found"
    shutil.rmtree(target, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [uv, "pip", "install", "-q", "--no-config", "--python", sys.executable]
    try:
        # Outside the workspace and with --no-config: its settings drop every requirement
        # on pillow (pillow-simd replaces it there). Offline, fail fast.
        subprocess.run(
            [*cmd, "--target", str(target), "pillow"],
            check=True,
            capture_output=True,
            text=True,
            timeout=180,
            cwd=workdir,
            env={**os.environ, "UV_HTTP_TIMEOUT": "15"},
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(target, ignore_errors=True)
        tail = (exc.stderr or "").strip().splitlines()[-1:] or [str(exc)]
        return None, tail[0]
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        return None, str(exc)
    if not works():
        return None, "the installed Pillow does not import"
    return target, None


# --------------------------------------------------------------------------- helpers


_T0 = time.perf_counter()


def _log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- one set


class Config(NamedTuple):
    """One system configuration: a results key, its label, and its worker spec."""

    key: str
    label: str
    kind: str  # ferroload | codec | peer | prefetch
    spec: dict[str, Any]
    workers: int = 0


def _configs(
    s: SetSpec,
    paths: dict[str, Any],
    payloads_path: Path,
    threads: int,
    peer_workers: Sequence[int],
) -> list[Config]:
    common = {"out": s.out, "batch": s.batch, "ext": s.ext}
    fl = {"system": "ferroload", "path": paths["ferroload"], **common}
    configs = [
        Config(
            "ferroload",
            f"ferroload make_loader ({threads} decode threads, prefetch 512 MiB)",
            "ferroload",
            {**fl, "prefetch_bytes": PREFETCH_BUDGETS[1]},
        ),
    ]
    if s.key == "jpeg":
        configs.append(
            Config(
                "ferroload_prefetch64",
                "ferroload make_loader, prefetch_bytes=64 MiB",
                "prefetch",
                {**fl, "prefetch_bytes": PREFETCH_BUDGETS[0]},
            )
        )
    configs.append(
        Config(
            "codec",
            f"ferroload_codec decode_batch only ({threads} threads, bytes in memory)",
            "codec",
            {"system": "codec", "payloads": str(payloads_path), **common},
        )
    )
    for n in peer_workers:
        p = " (persistent)" if n else ""
        configs.append(
            Config(
                f"wds_w{n}",
                f"webdataset + WebLoader num_workers={n}{p}",
                "peer",
                {"system": "wds", "urls": paths["wds"], "workers": n, **common},
                n,
            )
        )
    for n in peer_workers:
        p = " (persistent)" if n else ""
        configs.append(
            Config(
                f"hf_w{n}",
                f"HF datasets + DataLoader num_workers={n}{p}",
                "peer",
                {"system": "hf", "path": paths["hf"], "workers": n, **common},
                n,
            )
        )
    return configs


def _check(
    s: SetSpec, n: int, labels: list[int], checks: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Did every system deliver the same samples, as the same tensors?"""
    want_counts = np.bincount(np.asarray(labels), minlength=NUM_CLASSES).tolist()
    want_shape = [s.batch, s.out, s.out, 3]
    problems = []
    means = {}
    for key, c in checks.items():
        f = c["first"] or {}
        if c["n"] != n:
            problems.append(f"{key}: {c['n']} samples, not {n}")
        shape = f.get("image_shape") or []
        if f.get("image_dtype") != "uint8" or shape[1:] != want_shape[1:] or shape[0] > s.batch:
            problems.append(f"{key}: images {f.get('image_dtype')} {f.get('image_shape')}")
        if key != "codec":
            if not f.get("image_type", "").startswith("torch"):
                problems.append(f"{key}: images are {f.get('image_type')}, not torch tensors")
            if f.get("label_dtype") != "int64" or f.get("label_type") != "Tensor":
                problems.append(f"{key}: labels {f.get('label_type')} {f.get('label_dtype')}")
            if c["label_counts"] != want_counts:
                problems.append(f"{key}: the labels differ from the data set's")
        means[key] = c["pixel_sum"] / max(1, c["n"] * s.out * s.out * 3)
    ref = means.get("ferroload")
    if ref is not None:
        for key, m in means.items():
            if s.ext == "png" and checks[key]["pixel_sum"] != checks["ferroload"]["pixel_sum"]:
                problems.append(f"{key}: pixel sum differs from ferroload's (lossless set)")
            elif abs(m - ref) > JPEG_MEAN_TOLERANCE:
                problems.append(f"{key}: mean pixel {m:.2f} vs ferroload's {ref:.2f}")
    return {
        "image_shape": want_shape,
        "image_dtype": "uint8",
        "label_dtype": "int64",
        "first_batch": {k: c["first"] for k, c in checks.items()},
        "mean_pixel": means,
        "problems": problems,
        "ok": not problems,
    }


def _round_plan(configs: list[Config], r: int) -> list[str]:
    """The order of round `r`: the ferroload processes and the codec next to each other
    (their ratio is taken between neighbours), between the peers; reversed every other
    round so that no configuration always meets the same moment of the machine."""
    peers = [c.key for c in configs if c.kind == "peer"]
    fast = [c.key for c in configs if c.kind != "peer"]
    half = (len(peers) + 1) // 2
    plan = peers[:half] + fast + peers[half:]
    return plan if r % 2 == 0 else plan[::-1]


def _summary(times: list[float], n: int) -> dict[str, Any]:
    best = min(times)
    med = float(np.median(times))
    return {
        "times_s": times,
        "best_s": best,
        "median_s": med,
        "samples_per_s": n / best,
        "median_samples_per_s": n / med,
    }


def _loader_overhead(
    s: SetSpec, configs: list[Config], rounds: int, run_dir: Path, env: dict[str, str]
) -> dict[str, Any]:
    """The loader's own overhead: ferroload against the codec alone, with no other
    process alive (the peers' idle processes, with their persistent workers, slow the
    loader's four threads more than the codec's two; that crowded figure is reported too).
    """
    keys = ("ferroload", "codec")
    specs = {c.key: c.spec for c in configs if c.key in keys}
    children = {k: Child(f"{s.key}-overhead-{k}", specs[k], run_dir, env) for k in keys}
    for ch in children.values():
        ch.wait_ready()
    best = dict.fromkeys(keys, math.inf)
    pairs: list[float] = []
    for key, ch in children.items():
        _log(f"  overhead warm-up {key}")
        ch.ask(op="epoch", epoch=0, sample=False)
    for r in range(rounds):
        this: dict[str, float] = {}
        for key in keys if r % 2 == 0 else keys[::-1]:
            got = children[key].ask(op="epoch", epoch=r + 1, sample=False)
            if got is not None:
                this[key] = got["s"]
                best[key] = min(best[key], got["s"])
        if len(this) == 2:
            pairs.append(this["codec"] / this["ferroload"])
    for ch in children.values():
        ch.close()
    ok = all(math.isfinite(v) for v in best.values())
    return {
        "loader_over_codec": best["codec"] / best["ferroload"] if ok else None,
        "loader_over_codec_paired_median": float(np.median(pairs)) if pairs else None,
    }


def bench_set(
    s: SetSpec,
    samples: Any,
    configs: list[Config],
    rounds: int,
    run_dir: Path,
    stock_path: Path | None,
    stall_s: float,
) -> dict[str, Any]:
    """Start every configuration's process, warm them up, then time `rounds` interleaved
    epochs (best of), with the machine reference probe in the same rounds."""
    from bench_codec import reference_pass

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    peer_env = dict(env)
    if stock_path is not None:
        peer_env["PYTHONPATH"] = str(stock_path)
    isolated = _loader_overhead(s, configs, rounds, run_dir, env)
    children: dict[str, Child] = {}
    for c in configs:
        e = peer_env if c.kind == "peer" else env
        children[c.key] = Child(f"{s.key}-{c.key}", c.spec, run_dir, e)
    for ch in children.values():
        ch.wait_ready()
    # Warm-up epoch (epoch 0), one process at a time; it also checks what each delivers.
    checks: dict[str, dict[str, Any]] = {}
    for key, ch in children.items():
        _log(f"  warm-up {key}")
        got = ch.ask(op="epoch", epoch=0, check=True)
        if got is not None:
            checks[key] = got
    n = len(samples)
    times: dict[str, list[float]] = {k: [] for k in children}
    epochs: dict[str, list[dict[str, Any]]] = {k: [] for k in children}
    ref: dict[int, list[float]] = {1: [], 2: []}
    pairs: list[float] = []  # loader / codec between neighbours, per round
    for r in range(rounds):
        _log(f"  round {r + 1}/{rounds}")
        for t in (1, 2):
            ref[t].append(reference_pass(t))
        this: dict[str, float] = {}
        for key in _round_plan(configs, r):
            got = children[key].ask(op="epoch", epoch=r + 1, sample=False)
            if got is None:
                continue
            if got["n"] != n:
                children[key].fail(f"epoch {r + 1} delivered {got['n']} samples, not {n}")
                continue
            times[key].append(got["s"])
            epochs[key].append(got)
            this[key] = got["s"]
        if "ferroload" in this and "codec" in this:
            pairs.append(this["codec"] / this["ferroload"])
    breakdown = None
    if children["ferroload"].ok:
        _log("  ferroload: one more epoch with decode_batch timed")
        breakdown = children["ferroload"].ask(op="breakdown", epoch=rounds + 1)
    stalls: dict[str, Any] = {}
    if s.key == "jpeg":
        for c in configs:
            if c.kind in ("ferroload", "prefetch"):
                _log(f"  stalled consumer {c.key}")
                got = children[c.key].ask(op="stall", phase="stall", max_wait=stall_s)
                if got is not None:
                    stalls[c.key] = got
    results: dict[str, Any] = {}
    for c in configs:
        ch = children[c.key]
        end = ch.close()
        res: dict[str, Any] = {
            "label": c.label,
            "kind": c.kind,
            "workers": c.workers,
            "ok": ch.error is None and bool(times[c.key]),
            "error": ch.error,
            "setup_s": ch.ready.get("setup_s"),
            "rss_setup": ch.ready.get("rss_setup"),
            "pil": (end or {}).get("pil") or ch.ready.get("pil"),
            "api": ch.ready.get("api"),
            # Warm-up and timed epochs only (not the stalled-consumer epoch).
            "tree_peak": ch.peaks.get("run", {"rss": 0, "pss": 0, "pss_anon": 0, "procs": 0}),
            "tree_peak_stall": ch.peaks.get("stall"),
        }
        if end:
            res["maxrss_self"] = end["maxrss_self"]
            if c.key in stalls and stalls[c.key].get("hwm_before"):
                res["maxrss_self_incl_stall"] = end["maxrss_self"]
                res["maxrss_self"] = stalls[c.key]["hwm_before"]
            res["maxrss_children"] = end["maxrss_children"]
            res["maxrss_main_plus_workers"] = (
                end["maxrss_self"] + c.workers * end["maxrss_children"]
            )
        if times[c.key]:
            res.update(_summary(times[c.key], n))
            best = epochs[c.key][times[c.key].index(res["best_s"])]
            for k in ("build_s", "wait_s", "batches", "minflt"):
                if k in best:
                    res[f"best_epoch_{k}"] = best[k]
        if c.key in stalls:
            res["stall"] = stalls[c.key]
        if c.key in checks:
            res["warmup_s"] = checks[c.key]["s"]
        results[c.key] = res
    out: dict[str, Any] = {
        "samples": n,
        "batch": s.batch,
        "out": s.out,
        "configs": results,
        "check": _check(s, n, samples.labels, checks),
        "reference_scaling_1_to_2": min(ref[1]) / min(ref[2]),
        "reference_times_s": ref,
    }
    fl = results["ferroload"].get("samples_per_s")
    fl_med = results["ferroload"].get("median_samples_per_s")
    peers = {k: r for k, r in results.items() if r["kind"] == "peer" and r.get("samples_per_s")}
    if peers:
        best_key = max(peers, key=lambda k: peers[k]["samples_per_s"])
        best = peers[best_key]
        out["best_peer"] = best_key
        out["best_peer_samples_per_s"] = best["samples_per_s"]
        out["ferroload_over_best_peer"] = fl / best["samples_per_s"] if fl else None
        out["ferroload_over_best_peer_medians"] = (
            fl_med / max(p["median_samples_per_s"] for p in peers.values()) if fl_med else None
        )
    codec = results["codec"].get("samples_per_s")
    out["loader_over_codec_crowded"] = fl / codec if fl and codec else None
    out["loader_over_codec_crowded_paired_median"] = float(np.median(pairs)) if pairs else None
    out.update(isolated)
    if breakdown is not None and breakdown.get("decode_s") is not None:
        nb = max(1, breakdown["batches"])
        out["breakdown"] = {
            "batches": breakdown["batches"],
            "epoch_s": breakdown["s"],
            "build_ms_per_batch": breakdown["build_s"] / nb * 1e3,
            "decode_ms_per_batch": breakdown["decode_s"] / nb * 1e3,
            "other_ms_per_batch": (breakdown["build_s"] - breakdown["decode_s"]) / nb * 1e3,
            "wait_ms_per_batch": breakdown["wait_s"] / nb * 1e3,
            "page_faults_per_batch": breakdown["minflt"] / nb,
            "codec_page_faults_per_batch": (
                results["codec"]["best_epoch_minflt"] / math.ceil(n / s.batch)
                if "best_epoch_minflt" in results["codec"]
                else None
            ),
            "codec_best_ms_per_batch": (
                results["codec"]["best_s"] / math.ceil(n / s.batch) * 1e3
                if results["codec"].get("best_s")
                else None
            ),
        }
    return out


# --------------------------------------------------------------------------- report


def _goal(goal: str, value: str, ok: bool) -> dict[str, Any]:
    return {"goal": goal, "value": value, "pass": bool(ok)}


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    goals = []
    against = res["meta"]["peer_pillow"]
    for key, target in (("tiny", GOAL_TINY), ("jpeg", GOAL_JPEG)):
        st = res["sets"][key]
        r = st.get("ferroload_over_best_peer")
        best = st.get("best_peer", "none")
        name = f"{key}: ferroload samples/s >= {target}x the best peer config ({best}, {against})"
        goals.append(_goal(name, "-" if r is None else f"{r:.2f}x", r is not None and r >= target))
    st = res["sets"]["jpeg"]
    r = st.get("loader_over_codec")
    name = f"jpeg: loader samples/s >= {GOAL_CODEC}x the codec's own all-core images/s"
    goals.append(_goal(name, "-" if r is None else f"{r:.2f}x", r is not None and r >= GOAL_CODEC))
    for key in ("ferroload_prefetch64", "ferroload"):
        stall = st["configs"].get(key, {}).get("stall")
        budget = PREFETCH_BUDGETS[0] if key.endswith("64") else PREFETCH_BUDGETS[1]
        name = (
            f"jpeg: prefetch_bytes={budget // MiB} MiB, stalled consumer: peak RSS growth "
            f"<= budget + {GOAL_PREFETCH_OVERHEAD // MiB} MiB"
        )
        if stall is None:
            goals.append(_goal(name, "-", False))
        else:
            d = stall["delta"]
            goals.append(_goal(name, f"{d / MiB:.0f} MiB", d <= budget + GOAL_PREFETCH_OVERHEAD))
    for key in ("tiny", "jpeg"):
        chk = res["sets"][key]["check"]
        name = f"{key}: every system delivers the same samples as uint8 NHWC + int64 labels"
        goals.append(_goal(name, "ok" if chk["ok"] else "; ".join(chk["problems"])[:80], chk["ok"]))
    return goals


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / MiB:,.0f}"


def render(res: dict[str, Any]) -> str:
    """The human-readable report of a result dict."""
    m = res["meta"]
    out = [
        f"ferroload loader benchmark ({m['mode']}) — {m['started_at']}, commit {m['git_commit']}",
        f"{m['cpu_count']} CPUs ({m['available_cpus']} available), Python {m['python']}, "
        f"{m['platform']}; load average {m['loadavg_start']} at start, {m['loadavg_end']} at end",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"ferroload via {m['ferroload_api']}; peers decode with {m['peer_pillow']}"
        + (f" ({m['stock_pillow']['reason']})" if m["stock_pillow"]["reason"] else ""),
        f"images: {m['image_source']}; "
        + "; ".join(
            f"{k}: {d['samples']:,} x {d['desc']} (avg {d['avg_bytes']:,.0f} B)"
            for k, d in m["sets"].items()
        ),
        f"each configuration in its own fresh process: a warm-up epoch (checked), then best of "
        f"{m['rounds']} epochs, configurations interleaved; datasets hot in the page cache; "
        f"WebDataset: {m['wds_shards']} shards per set, shardshuffle=100, shuffle(1000)",
        "memory over the warm-up and timed epochs: peak PSS = the process tree (main + "
        "DataLoader workers), sampled every 50 ms, shared pages split between processes; "
        "RSS main + workers = the main process's peak RSS + workers x the largest worker's "
        "ru_maxrss (forked workers count the pages they share again)",
    ]
    for i, (key, st) in enumerate(res["sets"].items(), 1):
        d = m["sets"][key]
        out += [
            "",
            f"{i}. {key}: {st['samples']:,} x {d['desc']} -> uint8 "
            f"(B, {st['out']}, {st['out']}, 3) + int64 labels, batch {st['batch']}",
        ]
        fl = st["configs"]["ferroload"].get("samples_per_s")
        rows = []
        for r in st["configs"].values():
            sps = r.get("samples_per_s")
            ratio = "-" if not sps or not fl else f"{fl / sps:.2f}x"
            main_w = "-"
            if "maxrss_self" in r:
                main_w = _mib(r["maxrss_self"])
                if r["workers"]:
                    main_w += f" + {r['workers']}x{_mib(r['maxrss_children'])}"
            tp = r["tree_peak"]
            rows.append(
                [
                    r["label"] + ("" if r["ok"] else "  FAILED"),
                    "-" if not sps else f"{r['best_s']:.3f}",
                    "-" if not sps else f"{sps:,.0f}",
                    ratio,
                    _mib(tp["pss"]) if tp["pss"] else "-",
                    _mib(tp["pss_anon"]) if tp["pss"] else "-",
                    main_w,
                    _mib(r.get("rss_setup")),
                ]
            )
        out.append(
            _table(
                [
                    "system / configuration",
                    "best s",
                    "samples/s",
                    "fl / this",
                    "peak PSS MiB",
                    "anon",
                    "RSS MiB main + workers",
                    "RSS setup",
                ],
                rows,
            )
        )
        notes = []
        if st.get("best_peer"):
            r, rm = st["ferroload_over_best_peer"], st["ferroload_over_best_peer_medians"]
            notes.append(
                f"best peer: {st['configs'][st['best_peer']]['label']} "
                f"({st['best_peer_samples_per_s']:,.0f} samples/s); ferroload / best peer = "
                + ("-" if r is None else f"{r:.2f}x")
                + ("" if rm is None else f" (on median epochs: {rm:.2f}x)")
            )
        if st.get("loader_over_codec") is not None:
            pm = st["loader_over_codec_paired_median"]
            notes.append(
                f"loader / codec, only these two processes alive = "
                f"{st['loader_over_codec']:.2f} (best epochs)"
                + ("" if pm is None else f", {pm:.2f} (median over rounds of neighbouring epochs)")
            )
        if st.get("loader_over_codec_crowded") is not None:
            pm = st["loader_over_codec_crowded_paired_median"]
            notes.append(
                f"loader / codec among the peers' idle processes (the table above) = "
                f"{st['loader_over_codec_crowded']:.2f} (best epochs)"
                + ("" if pm is None else f", {pm:.2f} (median of neighbouring epochs)")
            )
        bd = st.get("breakdown")
        if bd:
            codec_ms = bd["codec_best_ms_per_batch"]
            notes.append(
                f"ferroload per batch (an extra epoch, decode_batch timed): "
                f"{bd['build_ms_per_batch']:.2f} ms building on the prefetch thread = "
                f"{bd['decode_ms_per_batch']:.2f} ms decode_batch + "
                f"{bd['other_ms_per_batch']:.2f} ms the rest (reads, index columns, "
                f"collation: {bd['other_ms_per_batch'] / bd['build_ms_per_batch']:.0%}); "
                f"consumer waited {bd['wait_ms_per_batch']:.2f} ms; codec alone "
                + ("-" if codec_ms is None else f"{codec_ms:.2f} ms")
                + " per batch (best epoch)"
            )
            cf = bd["codec_page_faults_per_batch"]
            notes.append(
                f"minor page faults per batch (main process): ferroload "
                f"{bd['page_faults_per_batch']:,.0f}, codec alone "
                + ("-" if cf is None else f"{cf:,.0f}")
                + f" (a batch's output is {st['batch'] * st['out'] ** 2 * 3 / 4096:,.0f} pages)"
            )
        notes.append(
            f"machine reference (sha256, 1 vs 2 threads, same rounds): "
            f"{st['reference_scaling_1_to_2']:.2f} of linear"
        )
        chk = st["check"]
        means = ", ".join(f"{k} {v:.2f}" for k, v in chk["mean_pixel"].items())
        notes.append(
            "check: "
            + (
                "same samples, shapes and dtypes everywhere"
                if chk["ok"]
                else "PROBLEMS: " + "; ".join(chk["problems"])
            )
            + f"; mean pixel: {means}"
        )
        out += notes
    jp = res["sets"]["jpeg"]["configs"]
    rows = []
    for key in ("ferroload_prefetch64", "ferroload"):
        r = jp.get(key, {})
        stall = r.get("stall")
        if not stall:
            continue
        sps = r.get("samples_per_s")
        rows.append(
            [
                f"prefetch_bytes={stall['prefetch_bytes'] // MiB} MiB",
                "-" if not sps else f"{sps:,.0f}",
                _mib(stall["rss_before"]),
                _mib(stall["peak_rss"]),
                _mib(stall["delta"]),
                _mib(stall["delta"] - stall["prefetch_bytes"]),
                _mib(stall["peak_prefetch_bytes"]),
                f"{stall['waited_s']:.1f}",
            ]
        )
    if rows:
        out += [
            "",
            "3. prefetch memory bound (jpeg set): samples/s with a fast consumer; then one epoch "
            "whose consumer takes a batch and waits until the prefetch thread stops building",
            _table(
                [
                    "configuration",
                    "samples/s",
                    "RSS before",
                    "peak RSS",
                    "growth",
                    "growth - budget",
                    "loader's peak_prefetch",
                    "waited s",
                ],
                rows,
            ),
        ]
    out += ["", "GOALS"]
    out.append(
        _table(
            ["goal", "value", "result"],
            [[g["goal"], g["value"], "PASS" if g["pass"] else "FAIL"] for g in res["goals"]],
        )
    )
    refs = [st["reference_scaling_1_to_2"] for st in res["sets"].values()]
    if min(refs) < 0.9:
        out.append(
            f"note: the machine reference scaled only {min(refs):.2f}-{max(refs):.2f} of linear "
            "from 1 to 2 threads (other processes were using the CPUs): all-core figures are "
            "bounded by the machine, and ratios between systems that use 1 and 2 cores shift"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for a smoke run (2,048 PNGs, 256 JPEGs, one timed epoch)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"scratch folder; stock Pillow is cached here (default {DEFAULT_WORKDIR})",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the results (default {DEFAULT_JSON.relative_to(HERE.parent)}"
        f", or {DEFAULT_QUICK_JSON.name} with --quick)",
    )
    p.add_argument(
        "--no-stock",
        action="store_true",
        help="peers use the workspace's Pillow-SIMD (no stock-Pillow download)",
    )
    p.add_argument("--rounds", type=int, default=None, help="timed epochs per configuration")
    p.add_argument("--keep", action="store_true", help="keep the written datasets")
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every benchmark, print the table, write the JSON, and return the results."""
    args = _parse(argv)
    if args.worker:
        worker(args.worker)
        return {}
    sys.path.insert(0, str(HERE))
    from _data import encode_natural, natural_photos, natural_source

    from ferroload_core import available_cpus

    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = sizes._replace(rounds=args.rounds)
    mode = "quick" if args.quick else "full"
    json_path = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    workdir: Path = args.workdir
    run_dir = workdir / f"loader-run-{mode}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    t_start = time.perf_counter()
    load_start = loadavg()

    _log(f"[{mode}] encoding images (not timed) ...")
    photos = natural_photos(SEED)
    counts = {"tiny": sizes.tiny, "jpeg": sizes.jpeg}
    sets = {
        s.key: encode_natural(
            s.key, counts[s.key], fmt=s.ext, seed=SEED + i, size=s.src, photos=photos
        )
        for i, s in enumerate(SETS, 1)
    }
    stock_path: Path | None = None
    stock_reason: str | None = "--no-stock"
    if not args.no_stock:
        _log(f"[{mode}] stock Pillow for the peers ...")
        stock_path, stock_reason = stock_pillow(workdir)
        if stock_path is None:
            _log(f"[{mode}] stock Pillow unavailable: {stock_reason}")
    threads = available_cpus()
    res: dict[str, Any] = {
        "meta": {
            "mode": mode,
            "started_at": started,
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "available_cpus": threads,
            "loadavg_start": load_start,
            "versions": {
                n: pkg_version(n)
                for n in ("ferroload-loader", "webdataset", "datasets", "torch", "numpy")
            },
            "stock_pillow": {"path": str(stock_path) if stock_path else None, "reason": None},
            "image_source": natural_source(),
            "sets": {},
            "sizes": sizes._asdict(),
            "rounds": sizes.rounds,
            "wds_shards": sizes.wds_shards,
            "seed": SEED,
            "configs": {
                "ferroload": "make_loader(path, batch_size=B, images=['image'], meta=['label'], "
                "resize=(S, S), out='torch', seed=0); set_epoch(e) per epoch",
                "webdataset": "wds.WebDataset(urls, shardshuffle=100, seed=0).shuffle(1000)"
                ".decode('pil').to_tuple(ext, 'cls').map_tuple(transform, identity).batched(B); "
                "wds.WebLoader(ds, batch_size=None, num_workers=n, persistent_workers=n>0)",
                "hf": "load_from_disk(path) with image: Image(), label: int64; "
                "set_transform(transform of every image); DataLoader(hfds, batch_size=B, "
                "shuffle=True, num_workers=n, persistent_workers=n>0)",
                "transform": "torch.from_numpy(np.array(img.convert('RGB').resize((S, S), "
                "BILINEAR)))",
                "codec": "ImageDecoder((S, S)).decode_batch(chunk of B encoded images)",
            },
        },
        "sets": {},
    }
    if stock_path is None:
        res["meta"]["stock_pillow"]["reason"] = f"stock Pillow unavailable: {stock_reason}"
    descs = {"tiny": "32x32 PNG", "jpeg": "256x256 JPEG q90"}
    try:
        for s in SETS:
            samples = sets[s.key]
            res["meta"]["sets"][s.key] = {
                "samples": len(samples),
                "desc": descs[s.key],
                "avg_bytes": samples.payload_bytes / len(samples),
            }
            _log(f"[{mode}] {s.key}: writing the three formats ...")
            root = run_dir / s.key
            paths: dict[str, Any] = {"ferroload": str(root / "ferroload"), "hf": str(root / "hf")}
            t0 = time.perf_counter()
            write_ferroload(samples, root / "ferroload")
            t1 = time.perf_counter()
            write_hf(samples, root / "hf")
            t2 = time.perf_counter()
            paths["wds"] = write_webdataset(samples, root / "wds", sizes.wds_shards)
            wt = {"ferroload": t1 - t0, "hf": t2 - t1, "wds": time.perf_counter() - t2}
            res["meta"]["sets"][s.key]["write_s"] = wt
            res["meta"]["sets"][s.key]["wds_shards"] = len(paths["wds"])
            payloads_path = root / "payloads.pkl"
            with open(payloads_path, "wb") as f:
                pickle.dump(samples.payloads, f, protocol=pickle.HIGHEST_PROTOCOL)
            configs = _configs(s, paths, payloads_path, threads, sizes.peer_workers)
            _log(f"[{mode}] {s.key}: {len(configs)} processes ...")
            res["sets"][s.key] = bench_set(
                s, samples, configs, sizes.rounds, run_dir, stock_path, sizes.stall_s
            )
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            for p in run_dir.glob("*"):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
    peer_pil = {
        r["pil"]["pillow"]
        for st in res["sets"].values()
        for r in st["configs"].values()
        if r["kind"] == "peer" and r.get("pil")
    }
    res["meta"]["peer_pillow"] = (
        ("stock Pillow " if stock_path else "Pillow-SIMD ") + ", ".join(sorted(peer_pil))
        if peer_pil
        else "?"
    )
    apis = {r.get("api") for st in res["sets"].values() for r in st["configs"].values()}
    res["meta"]["ferroload_api"] = ", ".join(sorted(a for a in apis if a)) or None
    res["goals"] = _goals(res)
    res["meta"]["loadavg_end"] = loadavg()
    res["meta"]["total_s"] = time.perf_counter() - t_start
    print(render(res))
    print(f"\ntotal {res['meta']['total_s']:.0f} s; results written to {json_path}")
    write_json(json_path, res)
    return res


if __name__ == "__main__":
    main()
