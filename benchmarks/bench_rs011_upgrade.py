"""A ferroload-rs 0.1.1 dataset of 100,000 samples: read as it is vs after `upgrade`.

The dataset is written by the published 0.1.1 wheel (tiny 32x32 PNGs, 64 distinct ones
cycled, and an int label), in a virtualenv of its own (`FERROLOAD_RS011_PYTHON`, else one
made with uv under the data folder), once, under `/tmp/bench-rs011` (kept between runs).
Each round copies it to a work folder and times, each step in a fresh interpreter:

- `direct`: `Dataset.open(root)` (`open_s`) and the first batch of
  `make_loader(root, batch_size=64, images=["image"], meta=["label"], resize=(32, 32))`
  (`first_s`, from `make_loader`'s return to the batch in hand) on the 0.1.1 root;
- `upgrade_s`: `ferroload_format.upgrade(root)`, with its bytes read and written, and
  the bytes of the shards before and after (unchanged: only metadata is written);
- `upgraded`: the same open and first batch on the upgraded root.

Figures are medians of `--rounds` (3) with min-max. Results go to
`benchmarks/results/bench_rs011_upgrade.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _meta import git_commit, loadavg, utc_now, write_json

DATA = Path("/tmp/bench-rs011")
N = 100_000

_WRITE = """
import io, sys, zlib, struct
import numpy as np
import ferroload
rng = np.random.default_rng(0)
def png(a):
    raw = b"".join(b"\\x00" + a[y].tobytes() for y in range(a.shape[0]))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    head = struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 2, 0, 0, 0)
    return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
images = [png(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)) for _ in range(64)]
w = ferroload.Writer(sys.argv[1], "tiny")
w.declare("image", "png", "tensor", "image")
for i in range(int(sys.argv[2])):
    w.add(f"s{i:07d}", {"image": images[i % 64]}, {"label": i % 10})
w.close()
"""

_READ = """
import json, sys, time
t0 = time.perf_counter()
from ferroload_format import Dataset
from ferroload_loader import make_loader
t1 = time.perf_counter()
ds = Dataset.open(sys.argv[1])
t2 = time.perf_counter()
dl = make_loader(ds, batch_size=64, images=["image"], meta=["label"], resize=(32, 32), out="numpy")
t3 = time.perf_counter()
batch = next(iter(dl))
t4 = time.perf_counter()
assert batch["image"].shape == (64, 32, 32, 3) and len(ds) == int(sys.argv[2])
print(json.dumps({"format": ds.format, "open_s": t2 - t1, "make_s": t3 - t2, "first_s": t4 - t3}))
from ferroload_core import exit_process
exit_process(0)
"""

_UPGRADE = """
import json, sys, time
from ferroload_format import upgrade
t0 = time.perf_counter()
r = upgrade(sys.argv[1], progress=False)
t1 = time.perf_counter()
print(json.dumps({"upgrade_s": t1 - t0, "status": r.status, "bytes_read": r.bytes_read,
                  "bytes_written": r.bytes_written, "samples": r.samples}))
from ferroload_core import exit_process
exit_process(0)
"""


def _rs011_python() -> str:
    given = os.environ.get("FERROLOAD_RS011_PYTHON")
    if given:
        return given
    venv = DATA / "venv"
    if not (venv / "bin" / "python").exists():
        uv = shutil.which("uv") or sys.exit("uv is not on PATH (pip install uv)")
        subprocess.run(
            [uv, "venv", "-q", "--no-config", "-p", sys.executable, str(venv)], check=True
        )
        env = {**os.environ, "VIRTUAL_ENV": str(venv)}
        subprocess.run(
            [uv, "pip", "install", "-q", "--no-config", "ferroload==0.1.1", "numpy"],
            check=True,
            env=env,
        )
    return str(venv / "bin" / "python")


def _json(code: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    if out.returncode:
        sys.exit(out.stderr)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _shard_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.tar")):
        h.update(p.read_bytes())
    return h.hexdigest()


def _stat(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=N)
    args = parser.parse_args()
    started_at, load_start, begun = utc_now(), loadavg(), time.perf_counter()
    pristine = DATA / f"root-{args.n}"
    if not (pristine / "manifest.json").exists():
        shutil.rmtree(pristine, ignore_errors=True)
        started = time.perf_counter()
        subprocess.run([_rs011_python(), "-c", _WRITE, str(pristine), str(args.n)], check=True)
        print(f"wrote {pristine} with ferroload-rs 0.1.1 in {time.perf_counter() - started:.1f} s")
    rounds: list[dict[str, Any]] = []
    for k in range(args.rounds):
        work = DATA / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        before = _shard_digest(work)
        direct = _json(_READ, str(work), str(args.n))
        assert direct["format"] == "ferroload-rs 0.1.1", direct
        up = _json(_UPGRADE, str(work))
        assert up["status"] == "upgraded" and up["samples"] == args.n, up
        assert _shard_digest(work) == before, "the upgrade changed a shard"
        after = _json(_READ, str(work), str(args.n))
        assert after["format"] == "ferroload", after
        rounds.append({"direct": direct, "upgrade": up, "upgraded": after})
        print(
            f"round {k + 1}: direct open {direct['open_s']:.3f} s + first batch "
            f"{direct['first_s']:.3f} s | upgrade {up['upgrade_s']:.2f} s "
            f"(read {up['bytes_read'] / 1e6:.1f} MB, wrote {up['bytes_written'] / 1e6:.2f} MB) | "
            f"upgraded open {after['open_s']:.3f} s + first batch {after['first_s']:.3f} s"
        )
    shard_bytes = sum(p.stat().st_size for p in pristine.rglob("*.tar"))

    def spread(step: str, names: dict[str, str]) -> dict[str, dict[str, float]]:
        got = {label: _stat([r[step][key] for r in rounds]) for label, key in names.items()}
        return {k: {label: got[label][k] for label in got} for k in ("median", "min", "max")}

    reads = {"open_s": "open_s", "make_loader_s": "make_s", "first_batch_s": "first_s"}
    result = {
        "meta": {
            "started_at": started_at,
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": loadavg(),
            "samples": args.n,
            "rounds": args.rounds,
            "total_s": time.perf_counter() - begun,
        },
        "roots": {
            "read as it is": spread("direct", reads),
            "upgraded": spread("upgraded", reads),
        },
        "upgrade": {
            "upgrade": {
                **spread("upgrade", {"seconds": "upgrade_s"}),
                "bytes_read": rounds[-1]["upgrade"]["bytes_read"],
                "bytes_written": rounds[-1]["upgrade"]["bytes_written"],
                "shard_bytes": shard_bytes,
            }
        },
        "rounds": rounds,
    }
    print(json.dumps({k: result[k] for k in ("roots", "upgrade")}, indent=2))
    write_json(Path(__file__).parent / "results" / "bench_rs011_upgrade.json", result)


if __name__ == "__main__":
    main()
