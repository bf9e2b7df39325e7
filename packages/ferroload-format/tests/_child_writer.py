"""A writer run in a child process by the concurrency and crash tests.

usage: python _child_writer.py URI FIRST COUNT [--crash-at POINT] [--go-file PATH] [--prefix P]
                               [--max-inline N] [--mode MODE] [--loop N] [--overwrite-every K]

Writes COUNT samples with ids <prefix>FIRST.. to URI. With --go-file, waits until that file
exists before closing (so that several children commit at the same moment). With
--crash-at, SIGKILLs itself at that point of the commit protocol (or of retirement). With
--loop N, commits N writes of COUNT samples each, the ids going on from FIRST, every K-th
an overwrite with --overwrite-every K (for kill -9 at random moments). Exit codes: 0
committed, 3 CommitConflictError, 4 DuplicateSampleError.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import ferroload_format
from ferroload_format import _commit, _publish, _shard_lists


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("first", type=int)
    p.add_argument("count", type=int)
    p.add_argument("--crash-at")
    p.add_argument("--go-file")
    p.add_argument("--prefix", default="s")
    p.add_argument("--label-type", default="int")
    p.add_argument("--max-inline", type=int)
    p.add_argument("--mode", default="append")
    p.add_argument("--loop", type=int, default=1)
    p.add_argument("--overwrite-every", type=int, default=0)
    args = p.parse_args()
    if args.max_inline is not None:
        _shard_lists.MAX_INLINE_SHARDS = args.max_inline
    if args.crash_at:
        target = args.crash_at

        def crash(name: str) -> None:
            if name == target:
                os.kill(os.getpid(), signal.SIGKILL)

        _commit._checkpoint = crash
        _publish._checkpoint = crash
    for k in range(args.loop):
        every = args.overwrite_every
        mode = "overwrite" if every and k % every == every - 1 else args.mode
        first = args.first + k * args.count
        code = write(args, first, mode)
        if code:
            return code
    return 0


def write(args: argparse.Namespace, first: int, mode: str) -> int:
    w = ferroload_format.Writer(args.uri, "concurrent", shard_size=2048, mode=mode)
    w.declare("image", "jpg", "tensor", "image")
    for i in range(first, first + args.count):
        label: object = i % 5 if args.label_type == "int" else f"c{i % 5}"
        w.add(f"{args.prefix}{i:05d}", {"image": f"payload-{i}".encode() * 20}, {"label": label})
    if args.go_file:
        deadline = time.monotonic() + 60
        while not os.path.exists(args.go_file) and time.monotonic() < deadline:
            time.sleep(0.001)
    try:
        w.close()
    except ferroload_format.CommitConflictError as exc:
        print(f"conflict: {exc}", file=sys.stderr)
        return 3
    except ferroload_format.DuplicateSampleError as exc:
        print(f"duplicate: {exc}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
