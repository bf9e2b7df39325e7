"""Reading from object storage: ferroload streaming against naive per-sample GETs and
WebDataset, side by side in one run, through an S3 server behind a 20 ms proxy.

The S3 API is a moto server (a child process on 127.0.0.1); in front of it a
`FaultProxy` (another child process) adds a fixed delay to every request, like a bucket in
another zone. For each set (tiny 32x32 PNGs; 256x256 JPEGs resized to 224x224) the
ferroload dataset is written once, uploaded, and read as one epoch by, each in its own
fresh process:

* `ferroload`: `make_loader("s3://…", streaming=True)` with a fresh, empty block cache:
  epoch 1 from the server (cold), then 3 epochs from the cache (warm, best of 3);
* `local`: the same loader over the same dataset on local disk, best of 3 epochs (the
  cache's yardstick);
* `naive`: one GET per sample (a map-style torch Dataset reading each sample's byte
  range, Pillow decode, `DataLoader(num_workers=0)`), timed on a prefix of the epoch;
* `wds_w0`, `wds_w2`: WebDataset streaming the same shards from the same server through
  the same proxy (`pipe:curl`), its recommended pipeline through `wds.WebLoader` with 0
  and 2 workers.

Every system delivers uint8 NHWC images of the same size. A last test opens a
1,000,000-sample dataset cold from the server and times the first batch.

    uv run python benchmarks/bench_store.py            # full run (several minutes)
    uv run python benchmarks/bench_store.py --quick    # smoke run

Goals (reported PASS / FAIL, never asserted): ferroload's cold epoch at least 8x naive
and 1.2x the best WebDataset configuration; the warm (cached) epoch at least 0.9x local
disk.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _meta import git_commit, utc_now  # noqa: E402
from _peers import pil_to_tensor  # noqa: E402
from _procs import run_once, serve_once  # noqa: E402

from ferroload_core import exit_process  # noqa: E402

DEFAULT_JSON = HERE / "results" / "bench_store.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_store_quick.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench-store"
SEED = 20261203
BUCKET = "bench"
DELAY = 0.020  # seconds the proxy adds to every request

GOAL_NAIVE = 8.0  # ferroload cold epoch samples/s over naive one-GET-per-sample, at least
GOAL_WDS = 1.2  # ... over the best WebDataset configuration, at least
WARM_EPOCHS = 3  # cached epochs after the cold one, and local epochs: best of each
GOAL_CACHE = 0.9  # warm (cached) epoch samples/s over the same loader on local disk


class Sizes(NamedTuple):
    tiny: int
    jpeg: int
    naive_s: float  # seconds the naive reader runs (its rate is steady)
    ttfb_samples: int
    shard_size: int


FULL = Sizes(tiny=20_480, jpeg=5_000, naive_s=15.0, ttfb_samples=1_000_000, shard_size=8 << 20)
QUICK = Sizes(tiny=2_048, jpeg=256, naive_s=2.0, ttfb_samples=20_000, shard_size=1 << 20)


class SetSpec(NamedTuple):
    key: str
    ext: str
    src: int
    out: int
    batch: int


SETS = (SetSpec("tiny", "png", 32, 32, 256), SetSpec("jpeg", "jpg", 256, 224, 64))


# =========================================================================== workers
# Run as `bench_store.py --worker '<json>'`: one system, one fresh process; prints one
# JSON line.


def _opts(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(spec["storage_options"])


def _consume(batches: Iterator[Any], key: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    first = None
    n = 0
    shape = None
    for b in batches:
        images = key(b)
        if first is None:
            first = time.perf_counter() - t0
            shape = list(images.shape)
        n += len(images)
    return {"s": time.perf_counter() - t0, "n": n, "first_batch_s": first, "shape": shape}


def _worker_ferroload(spec: dict[str, Any]) -> dict[str, Any]:
    import ferroload
    from ferroload_store import BlockCache

    out = spec["set"]["out"]
    remote = spec["uri"].startswith("s3://")
    kwargs: dict[str, Any] = {}
    if remote:
        cache = BlockCache(spec["cache_dir"], max_bytes=8 << 30)
        kwargs = {"storage_options": _opts(spec), "cache": cache}
    t0 = time.perf_counter()
    dl = ferroload.make_loader(
        spec["uri"], batch_size=spec["set"]["batch"], images=["image"], meta=["label"],
        resize=(out, out), out="torch", seed=0, streaming=True, **kwargs,
    )  # fmt: skip
    store = dl.source.datasets[0].store
    res: dict[str, Any] = {"open_s": time.perf_counter() - t0, "epochs": []}
    for epoch in range(spec["epochs"]):
        store.stats.reset()
        dl.set_epoch(epoch)
        r = _consume(iter(dl), lambda b: b["image"])
        r["store"] = store.stats.snapshot()
        if remote:
            r["cache"] = cache.stats.snapshot()
            cache.stats.reset()
        res["epochs"].append(r)
    dl.close()
    return res


def _worker_ttfb(spec: dict[str, Any]) -> dict[str, Any]:
    import ferroload
    from ferroload_store import BlockCache

    cache = BlockCache(spec["cache_dir"], max_bytes=8 << 30)
    t0 = time.perf_counter()
    ds = ferroload.Dataset.open(spec["uri"], storage_options=_opts(spec), cache=cache)
    t_open = time.perf_counter() - t0
    open_stats = ds.store.stats.snapshot()
    dl = ferroload.make_loader(
        ds, batch_size=256, meta=["label"], images=["image"], resize=(32, 32),
        out="numpy", seed=0, streaming=True,
    )  # fmt: skip
    it = iter(dl)
    batch = next(it)
    t_first = time.perf_counter() - t0
    stats = ds.store.stats.snapshot()
    dl.close()
    return {
        "samples": len(ds),
        "open_s": t_open,
        "open_stats": open_stats,
        "first_batch_s": t_first,
        "first_batch_len": len(batch["sample_id"]),
        "store": stats,
    }


def _worker_naive(spec: dict[str, Any]) -> dict[str, Any]:
    """One GET per sample: what a map-style Dataset over an object store does."""
    import io

    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    import ferroload
    from ferroload_store import open_store

    ds = ferroload.Dataset.open(spec["uri"], storage_options=_opts(spec), cache=None)
    store = open_store(spec["uri"], storage_options=_opts(spec), cache=None)
    shards = [s.path for s in ds.manifest.shards]
    code, off, size = ds.shard_of(), ds.offsets("image"), ds.sizes("image")
    labels = ds.column("label").to_numpy()
    transform = pil_to_tensor(spec["set"]["out"])

    class PerSample(torch.utils.data.Dataset[Any]):
        def __len__(self) -> int:
            return len(ds)

        def __getitem__(self, i: int) -> Any:
            data = store.get_range(shards[int(code[i])], int(off[i]), int(size[i]))
            return transform(Image.open(io.BytesIO(data))), int(labels[i])

    dl = DataLoader(PerSample(), batch_size=spec["set"]["batch"], shuffle=True, num_workers=0)
    t0 = time.perf_counter()
    n = 0
    shape = None
    for images, _ in dl:
        n += len(images)
        shape = list(images.shape)
        if time.perf_counter() - t0 > spec["naive_s"]:
            break
    dt = time.perf_counter() - t0
    return {"epochs": [{"s": dt, "n": n, "shape": shape, "requests": n}]}


def _worker_wds(spec: dict[str, Any]) -> dict[str, Any]:
    import webdataset as wds

    transform = pil_to_tensor(spec["set"]["out"])
    workers = spec["workers"]
    key = f"image.{spec['set']['ext']}"
    pipeline = (
        wds.WebDataset(spec["urls"], shardshuffle=100, seed=0, empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple(key)
        .map_tuple(transform)
        .batched(spec["set"]["batch"])
    )
    dl = wds.WebLoader(pipeline, batch_size=None, num_workers=workers)
    r = _consume(iter(dl), lambda b: b[0])
    r["requests"] = len(spec["urls"])
    return {"epochs": [r]}


WORKERS = {
    "ferroload": _worker_ferroload,
    "ttfb": _worker_ttfb,
    "naive": _worker_naive,
    "wds": _worker_wds,
}


def worker(spec_json: str) -> None:
    serve_once(WORKERS, spec_json)


# =========================================================================== driver


def _log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def _run_worker(spec: dict[str, Any], log: Path, timeout: float = 900) -> dict[str, Any]:
    try:
        return run_once(__file__, spec, timeout=timeout, log=log)
    except RuntimeError as exc:
        raise RuntimeError(f"{spec['kind']} worker failed ({exc})") from None


class ProxyProcess:
    """A `FaultProxy` in its own process (so that it does not share a GIL with the
    systems it measures); stats on request."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        code = (
            "import sys, json\n"
            "from ferroload_testing import FaultProxy\n"
            f"p = FaultProxy({host!r}, {port}, delay={delay}).start()\n"
            "print(p.endpoint, flush=True)\n"
            "for line in sys.stdin:\n"
            "    if line.strip() == 'stats':\n"
            "        import dataclasses\n"
            "        print(json.dumps(dataclasses.asdict(p.stats())), flush=True)\n"
            "    elif line.strip() == 'reset':\n"
            "        p.reset_stats(); print('{}', flush=True)\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().strip()
        if not self.endpoint.startswith("http"):
            raise RuntimeError("the proxy did not start")

    def _ask(self, cmd: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        res: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return res

    def stats(self) -> dict[str, Any]:
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _write_set(spec: SetSpec, n: int, root: Path, shard_size: int) -> None:
    from _data import encode_samples

    import ferroload

    samples = encode_samples(spec.key, n, size=spec.src, fmt=spec.ext, seed=SEED)
    with ferroload.Writer(root, spec.key, shard_size=shard_size) as w:
        w.declare("image", spec.ext, "tensor", "image")
        for key, payload, label in zip(samples.keys, samples.payloads, samples.labels, strict=True):
            w.add(key, {"image": payload}, {"label": label})


def _write_many(n: int, root: Path, shard_size: int) -> None:
    """`n` tiny samples quickly: the same few 32x32 PNGs over and over."""
    from _data import encode_samples

    import ferroload

    base = encode_samples("ttfb", 64, size=32, fmt="png", seed=SEED)
    with ferroload.Writer(root, "ttfb", shard_size=shard_size) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(n):
            w.add(f"s{i:07d}", {"image": base.payloads[i % 64]}, {"label": i % 1000})


def _upload(local: Path, uri: str, options: dict[str, Any]) -> int:
    """Copy a dataset folder to the object store, byte for byte; returns bytes copied."""
    from ferroload_store import open_store

    store = open_store(uri, storage_options=options, cache=None)
    total = 0
    for path in sorted(local.rglob("*")):
        if path.is_file():
            key = path.relative_to(local).as_posix()
            w = store.open_writer(key)
            with open(path, "rb") as f:
                while chunk := f.read(16 << 20):
                    w.write(chunk)
            w.close()
            total += path.stat().st_size
    return total


def _rate(r: dict[str, Any]) -> float:
    return float(r["n"] / r["s"]) if r["s"] else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--json", type=Path, default=None, help="where to write the results")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker)
        exit_process(0)
    from ferroload_testing import MotoServer

    sizes = QUICK if args.quick else FULL
    out_json = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    run_dir = args.workdir / ("quick" if args.quick else "full")
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "started_at": utc_now(),
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "delay_s": DELAY,
            "sizes": sizes._asdict(),
        },
        "sets": {},
        "goals": [],
    }
    with MotoServer() as s3:
        direct = s3.storage_options(BUCKET)
        proxy = ProxyProcess(*s3.address, DELAY)
        try:
            via_proxy = s3.storage_options(endpoint=proxy.endpoint)
            for spec in SETS:
                n = getattr(sizes, spec.key)
                local = run_dir / spec.key
                _log(f"{spec.key}: writing {n} samples")
                _write_set(spec, n, local, sizes.shard_size)
                uri = f"s3://{BUCKET}/{spec.key}"
                nbytes = _upload(local, uri, direct)
                _log(f"{spec.key}: uploaded {nbytes / 1e6:.1f} MB")
                results["sets"][spec.key] = _bench_set(
                    spec, sizes, uri, local, via_proxy, proxy, run_dir
                )
            results["ttfb"] = _bench_ttfb(sizes, run_dir, direct, via_proxy, proxy)
        finally:
            proxy.close()
    _goals(results)
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=1) + "\n")
    _report(results)
    print(f"\nresults: {out_json}")
    return 0


def _bench_set(
    spec: SetSpec,
    sizes: Sizes,
    uri: str,
    local: Path,
    via_proxy: dict[str, Any],
    proxy: ProxyProcess,
    run_dir: Path,
) -> dict[str, Any]:
    from ferroload_format import Dataset

    shards = [s.path for s in Dataset.open(local).manifest.shards]
    base = {"set": spec._asdict(), "storage_options": via_proxy, "naive_s": sizes.naive_s}
    configs: dict[str, dict[str, Any]] = {
        "ferroload": {
            **base, "kind": "ferroload", "uri": uri, "epochs": 1 + WARM_EPOCHS,
            "cache_dir": str(run_dir / f"cache-{spec.key}"),
        },
        "local": {**base, "kind": "ferroload", "uri": str(local), "epochs": WARM_EPOCHS},
        "naive": {**base, "kind": "naive", "uri": uri},
        **{
            f"wds_w{w}": {
                **base, "kind": "wds", "workers": w,
                "urls": [f"pipe:curl -s -f '{u}'" for u in _presigned(proxy.endpoint, spec.key, shards)],
            }
            for w in (0, 2)
        },
    }  # fmt: skip
    out: dict[str, Any] = {"samples": getattr(sizes, spec.key), "configs": {}}
    for name, cfg in configs.items():
        _log(f"{spec.key}: {name}")
        proxy.reset()
        res = _run_worker(cfg, run_dir / f"{spec.key}-{name}.log")
        res["proxy"] = proxy.stats()
        for ep in res["epochs"]:
            ep["samples_per_s"] = _rate(ep)
        out["configs"][name] = res
    c = out["configs"]
    cold = c["ferroload"]["epochs"][0]["samples_per_s"]
    warm = max(e["samples_per_s"] for e in c["ferroload"]["epochs"][1:])
    local_best = max(e["samples_per_s"] for e in c["local"]["epochs"])
    best_wds = max(("wds_w0", "wds_w2"), key=lambda k: c[k]["epochs"][0]["samples_per_s"])
    out["ratios"] = {
        "cold_over_naive": cold / c["naive"]["epochs"][0]["samples_per_s"],
        "cold_over_best_wds": cold / c[best_wds]["epochs"][0]["samples_per_s"],
        "best_wds": best_wds,
        "warm_over_local": warm / local_best,
    }
    return out


def _bench_ttfb(
    sizes: Sizes,
    run_dir: Path,
    direct: dict[str, Any],
    via_proxy: dict[str, Any],
    proxy: ProxyProcess,
) -> dict[str, Any]:
    n = sizes.ttfb_samples
    local = run_dir / "ttfb"
    _log(f"ttfb: writing {n} samples")
    _write_many(n, local, 256 << 20 if n >= 100_000 else sizes.shard_size)
    uri = f"s3://{BUCKET}/ttfb"
    nbytes = _upload(local, uri, direct)
    _log(f"ttfb: uploaded {nbytes / 1e6:.1f} MB; first batch")
    proxy.reset()
    spec = {"kind": "ttfb", "uri": uri, "storage_options": via_proxy,
            "cache_dir": str(run_dir / "cache-ttfb")}  # fmt: skip
    res = _run_worker(spec, run_dir / "ttfb.log")
    res["proxy"] = proxy.stats()
    res["dataset_bytes"] = nbytes
    return res


def _presigned(endpoint: str, prefix: str, keys: list[str]) -> list[str]:
    """Presigned GET URLs of the shards (how WebDataset users stream from a private
    bucket with `pipe:curl`), addressed to the proxy."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )  # fmt: skip
    return [
        client.generate_presigned_url(
            "get_object", Params={"Bucket": BUCKET, "Key": f"{prefix}/{k}"}, ExpiresIn=3600
        )
        for k in keys
    ]


def _goals(results: dict[str, Any]) -> None:
    goals = results["goals"]
    for key, s in results["sets"].items():
        r = s["ratios"]
        goals.append({"goal": f"{key}: cold streamed epoch >= {GOAL_NAIVE}x naive one-GET-per-sample",
                      "value": f"{r['cold_over_naive']:.1f}x", "pass": r["cold_over_naive"] >= GOAL_NAIVE})  # fmt: skip
        goals.append({"goal": f"{key}: cold streamed epoch >= {GOAL_WDS}x WebDataset ({r['best_wds']})",
                      "value": f"{r['cold_over_best_wds']:.2f}x", "pass": r["cold_over_best_wds"] >= GOAL_WDS})  # fmt: skip
        goals.append({"goal": f"{key}: second epoch from the cache >= {GOAL_CACHE}x local disk",
                      "value": f"{r['warm_over_local']:.2f}x", "pass": r["warm_over_local"] >= GOAL_CACHE})  # fmt: skip


def _report(results: dict[str, Any]) -> None:
    print(f"\nremote reading through a {DELAY * 1000:.0f} ms proxy ({results['meta']['mode']} run)")
    for key, s in results["sets"].items():
        print(f"\n{key}: {s['samples']} samples")
        print(
            f"  {'config':<22}{'epoch':>6}{'samples/s':>12}{'first batch':>13}{'requests':>10}{'MB read':>10}"
        )
        for name, res in s["configs"].items():
            for i, ep in enumerate(res["epochs"]):
                reqs = ep.get("store", {}).get("get_requests", ep.get("requests", 0))
                mb = ep.get("store", {}).get("bytes_read", 0) / 1e6
                fb = ep.get("first_batch_s")
                fbs = f"{fb * 1000:.0f} ms" if fb is not None else "-"
                print(
                    f"  {name:<22}{i + 1:>6}{ep['samples_per_s']:>12.0f}{fbs:>13}{reqs:>10}{mb:>10.1f}"
                )
    t = results.get("ttfb")
    if t:
        print(f"\ncold remote open of {t['samples']:,} samples: open {t['open_s'] * 1000:.0f} ms, "
              f"first batch {t['first_batch_s'] * 1000:.0f} ms, {t['store']['get_requests']} GETs, "
              f"{t['store']['bytes_read'] / 1e6:.1f} MB read (dataset {t['dataset_bytes'] / 1e6:.0f} MB)")  # fmt: skip
    print()
    for g in results["goals"]:
        print(f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']}")


if __name__ == "__main__":
    exit_process(main() or 0)  # without the interpreter's teardown (see README)
