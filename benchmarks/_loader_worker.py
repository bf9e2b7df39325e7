"""The per-system worker processes of `bench_loader.py`: each builds one system's loader (ferroload in-process or in DataLoader workers, the codec alone, WebDataset, HF `datasets`, ferroload-rs 0.1.1) and runs its epochs on command.

`bench_loader.py --worker '<json spec>'` runs `worker(spec)`; ferroload-rs 0.1.1 runs in
its own virtualenv's interpreter, as `_loader_worker.py --worker '<json spec>'`. So this
module, and the helpers it imports at the top, import nothing but the standard library and
numpy: heavy imports (torch, ferroload, webdataset, datasets, PIL) stay inside the
builders, so that each process loads only what its system needs.

An epoch command may name a load (`_load.py`): under `step`, the consumer spends CPU on
every batch it takes, as a training step would.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
from _load import Step
from _memory import maxrss, reset_hwm, status_kib
from _peers import identity, pil_info, pil_to_tensor, shutdown
from _procs import counting_faults, serve, unknown
from _rs011_peer import leave

NUM_CLASSES = 1000
_INFO: dict[str, Any] = {}  # what the builder wants the driver to know


def loader_epoch(dl: Any, epoch: int, consume: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Epoch `epoch` of a ferroload loader, run by `consume()`, with what the loader's
    stats say of it: seconds building batches, seconds the consumer waited, batches."""
    dl.set_epoch(epoch)
    st = dl.stats
    b0, w0, n0 = st.build_seconds, st.wait_seconds, st.batches
    res = consume()
    res["build_s"] = st.build_seconds - b0  # on the prefetch thread
    res["wait_s"] = st.wait_seconds - w0  # the consumer waiting for a batch
    res["batches"] = st.batches - n0
    return res


class _Epoch(NamedTuple):
    run: Callable[[int, bool, Step], dict[str, Any]]  # (epoch, check, step) -> result
    close: Callable[[], None]
    loader: Any


def _consume(
    batches: Any, unpack: Callable[[Any], tuple[Any, Any]], check: bool, step: Step
) -> dict[str, Any]:
    """One pass over `batches`, calling `step()` after each batch (the consumer's work
    under the `step` load, a no-op otherwise); with `check`, also what they hold (slower,
    untimed use)."""
    t0 = time.perf_counter()
    n = 0
    if not check:
        for b in batches:
            n += len(unpack(b)[0])
            step()
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
        step()
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
        streaming=spec.get("streaming", False),
    )

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        return loader_epoch(
            dl, epoch, lambda: _consume(dl, lambda b: (b["image"], b["label"]), check, step)
        )

    return _Epoch(run, dl.close, dl)


def _build_ferroload_workers(spec: dict[str, Any]) -> _Epoch:
    from torch.utils.data import DataLoader

    from ferroload_loader.torch import FerroIterableDataset

    _INFO["api"] = "ferroload_loader.torch.FerroIterableDataset"
    size, workers = spec["out"], spec["workers"]
    ds = FerroIterableDataset(
        spec["path"],
        batch_size=spec["batch"],
        images=["image"],
        meta=["label"],
        resize=(size, size),
        seed=0,
    )
    dl = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        ds.set_epoch(epoch)
        return _consume(dl, lambda b: (b["image"], b["label"]), check, step)

    return _Epoch(run, lambda: shutdown(dl), ds)


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

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        return _consume(batches(), lambda b: (b, None), check, step)

    return _Epoch(run, dec.close, dec)


def _build_wds(spec: dict[str, Any]) -> _Epoch:
    import webdataset as wds

    workers = spec["workers"]
    transform = pil_to_tensor(spec["out"])
    ds = (
        wds.WebDataset(spec["urls"], shardshuffle=100, seed=0)
        .shuffle(1000)
        .decode("pil")
        .to_tuple(spec["ext"], "cls")
        .map_tuple(transform, identity)
        .batched(spec["batch"])
    )
    dl = wds.WebLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        return _consume(dl, lambda b: (b[0], b[1]), check, step)

    def close() -> None:
        shutdown(dl.pipeline[0])

    return _Epoch(run, close, dl)


def _build_hf(spec: dict[str, Any]) -> _Epoch:
    import datasets
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()
    workers = spec["workers"]
    transform = pil_to_tensor(spec["out"])
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

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        return _consume(dl, lambda b: (b["image"], b["label"]), check, step)

    return _Epoch(run, lambda: shutdown(dl), dl)


def _build_rs011(spec: dict[str, Any]) -> _Epoch:
    """ferroload-rs 0.1.1's documented training loader (this process runs its venv)."""
    from _rs011_peer import make_loader

    import ferroload

    _INFO["rs011"] = {"version": ferroload.__version__, "path": ferroload.__file__}
    dl = make_loader(spec["path"], spec["batch"], spec["out"], streaming=spec["streaming"])

    def run(epoch: int, check: bool, step: Step) -> dict[str, Any]:
        dl.set_epoch(epoch)
        return _consume(dl, lambda b: (b["image"], b["label"]), check, step)

    return _Epoch(run, getattr(dl, "close", lambda: None), dl)


BUILDERS: dict[str, Callable[[dict[str, Any]], _Epoch]] = {
    "ferroload": _build_ferroload,
    "ferroload_workers": _build_ferroload_workers,
    "codec": _build_codec,
    "wds": _build_wds,
    "hf": _build_hf,
    "rs011": _build_rs011,
}


def _stall(loader: Any, max_wait: float) -> dict[str, Any]:
    """One epoch whose consumer takes the first batch, then waits until the prefetcher has
    stopped building (its budget is full, or the epoch is built), then drains the rest.
    Returns the peak RSS growth over the RSS before the epoch."""
    gc.collect()
    hwm_before = status_kib("VmHWM")  # the peak of every epoch so far
    exact = reset_hwm()
    before = status_kib("VmRSS") or 0
    peak_sampled = before
    loader.set_epoch(loader.epoch + 1)
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    last, stable = -1.0, 0
    while stable < 5 and time.perf_counter() - t0 < max_wait:
        time.sleep(0.1)
        peak_sampled = max(peak_sampled, status_kib("VmRSS") or 0)
        built = loader.stats.build_seconds
        stable = stable + 1 if built == last else 0
        last = built
    waited = time.perf_counter() - t0
    rss_full = status_kib("VmRSS") or 0
    n = 1
    for _ in it:
        n += 1
    hwm = status_kib("VmHWM") if exact else None
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
        res = ep.run(epoch, False, Step("quiet"))
    finally:
        for d in decoders:
            with contextlib.suppress(AttributeError):
                del d.decode_batch
    res["decode_s"] = spent[0] if decoders else None
    return res


def _handler(spec: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ep = BUILDERS[spec["system"]](spec)
    steps: dict[str, Step] = {}

    def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        nonlocal ep
        op = cmd["op"]
        load = cmd.get("load", "quiet")  # the consumer's work per batch (`step`)
        if load not in steps:
            steps[load] = Step(load)
        step = steps[load]
        if op == "ready":
            return {
                "rss_setup": status_kib("VmRSS"),
                "pil": pil_info(),
                "torch": "torch" in sys.modules,
                **_INFO,
            }
        if op == "epoch":
            return counting_faults(lambda: ep.run(cmd["epoch"], cmd.get("check", False), step))
        if op == "breakdown":
            return counting_faults(lambda: _breakdown(ep, cmd["epoch"]))
        if op == "stall":
            return _stall(ep.loader, cmd["max_wait"])
        if op == "quit":
            ep.close()
            del ep
            gc.collect()
            return {
                "maxrss_self": maxrss(resource.RUSAGE_SELF),
                "maxrss_children": maxrss(resource.RUSAGE_CHILDREN),
                "pil": pil_info(),
            }
        return unknown(cmd)

    return handle


def worker(spec_json: str) -> None:
    """A per-system process: JSON commands on stdin, one JSON answer per line on stdout."""
    serve(spec_json, _handler)


if __name__ == "__main__":  # a worker run by another interpreter (ferroload-rs 0.1.1's venv)
    if len(sys.argv) != 3 or sys.argv[1] != "--worker":
        raise SystemExit("usage: _loader_worker.py --worker '<json spec>'")
    worker(sys.argv[2])
    leave(0)
