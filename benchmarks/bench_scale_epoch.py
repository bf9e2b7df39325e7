"""One rank's whole epoch through `make_loader` on a bench_scale metadata dataset: time
per sample over the epoch (start-up, index windows and all) and peak RSS.

bench_scale.py times 200 batches after the first; with a shuffled order at 10^8 those
include the read of the first large index window, so this script gives the figure a
training job sees over an epoch. Run it in a fresh process per dataset:

    uv run python benchmarks/bench_scale_epoch.py /tmp/ferroload-scale/meta-100000000
    uv run python benchmarks/bench_scale_epoch.py PATH --streaming
"""

from __future__ import annotations

import argparse
import json
import time

from ferroload_loader import make_loader

RANK, WORLD, BATCH = 3, 8, 256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a dataset written by bench_scale (metadata series)")
    ap.add_argument("--streaming", action="store_true", help="the streaming order")
    args = ap.parse_args()
    t0 = time.perf_counter()
    dl = make_loader(args.path, batch_size=BATCH, meta=["label"], out="numpy", rank=RANK,
                     world_size=WORLD, prefetch_bytes=512 << 20, streaming=args.streaming)  # fmt: skip
    items, first = 0, None
    for batch in dl:
        if first is None:
            first = time.perf_counter() - t0
        items += len(batch["sample_id"])
    seconds = time.perf_counter() - t0
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    print(json.dumps({
        "path": args.path, "num_samples": len(dl.source.datasets[0]),
        "streaming": args.streaming, "items": items, "first_batch_s": first,
        "epoch_s": seconds, "per_sample_us": seconds / max(items, 1) * 1e6,
        "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
