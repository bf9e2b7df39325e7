"""A writer run in a child process by the concurrency and crash tests.

usage: python _child_writer.py URI FIRST COUNT [--crash-at POINT] [--go-file PATH] [--prefix P]
                               [--max-inline N]

Writes COUNT samples with ids <prefix>FIRST.. to URI. With --go-file, waits until that file
exists before closing (so that several children commit at the same moment). With
--crash-at, SIGKILLs itself at that point of the commit protocol. Exit codes: 0 committed,
3 CommitConflictError, 4 DuplicateSampleError.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import ferroload_format
from ferroload_format import _commit, _shard_lists


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
    args = p.parse_args()
    if args.max_inline is not None:
        _shard_lists.MAX_INLINE_SHARDS = args.max_inline
    if args.crash_at:
        target = args.crash_at

        def crash(name: str) -> None:
            if name == target:
                os.kill(os.getpid(), signal.SIGKILL)

        _commit._checkpoint = crash
    w = ferroload_format.Writer(args.uri, "concurrent", shard_size=2048)
    w.declare("image", "jpg", "tensor", "image")
    for i in range(args.first, args.first + args.count):
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
