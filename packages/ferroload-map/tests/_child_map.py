"""Run `map_dataset(uri, _map_fns.slow_label)` in a child process (killed by the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _map_fns

from ferroload_format import Dataset
from ferroload_map import LocalExecutor, map_dataset

if __name__ == "__main__":
    uri, partition_size = sys.argv[1], int(sys.argv[2])
    map_dataset(
        Dataset.open(uri),
        _map_fns.slow_label,
        inputs=["label"],
        outputs={"bigger": "int64", "note": "txt"},
        layer="slow",
        batch_size=2,
        partition_size=partition_size,
        executor=LocalExecutor("threads", workers=1),
        progress=False,
    )
