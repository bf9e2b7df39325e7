"""A layer map run in a child process by the layer crash tests.

usage: python _child_layer.py URI --stage 0,1 [--crash-partition K] [--commit N]
       [--crash-at POINT]

Builds the test layer of test_layers.py (`double`, `thumb`, 3 rows per partition) on the
dataset at URI, stages the listed partitions, then: with --crash-partition, SIGKILLs
itself while staging that partition (after its shard is written, before its rows are);
with --commit, commits N partitions, SIGKILLing itself at --crash-at of the commit.
"""

from __future__ import annotations

import argparse
import os
import signal

import numpy as np
import pyarrow as pa

from ferroload_format import Dataset, LayerWriter, Modality, _commit

ROWS_PER_PARTITION = 3


def layer_writer(uri: str, identity: str = "v1") -> LayerWriter:
    return LayerWriter(
        Dataset.open(uri),
        "derived",
        identity=identity,
        columns={"double": pa.int64()},
        modalities=[Modality("thumb", "png", "tensor", "image")],
    )


def stage(lw: LayerWriter, k: int, total: int) -> None:
    rows = np.arange(k * ROWS_PER_PARTITION, min((k + 1) * ROWS_PER_PARTITION, total))
    lw.write_partition(
        k,
        rows,
        {"double": [2 * int(r) for r in rows]},
        {"thumb": [f"thumb-{int(r)}".encode() for r in rows]},
    )


def crash_at(target: str) -> None:
    def crash(name: str) -> None:
        if name == target:
            os.kill(os.getpid(), signal.SIGKILL)

    _commit._checkpoint = crash


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("--stage", default="")
    p.add_argument("--crash-partition", type=int)
    p.add_argument("--commit", type=int)
    p.add_argument("--crash-at", default="committed")
    args = p.parse_args()
    lw = layer_writer(args.uri)
    total = len(Dataset.open(args.uri))
    for k in [int(x) for x in args.stage.split(",") if x]:
        stage(lw, k, total)
    if args.crash_partition is not None:
        crash_at("partition-shard-written")
        stage(lw, args.crash_partition, total)
    if args.commit is not None:
        crash_at(args.crash_at)
        lw.commit(args.commit)


if __name__ == "__main__":
    main()
