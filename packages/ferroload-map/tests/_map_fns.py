"""Map functions for the tests: module-level, so worker processes, Ray workers and the
kill-and-resume child import them by name (the conftest puts this folder on sys.path)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

#: Calls of `count_calls`-style functions in this process: sample ids seen.
SEEN: list[str] = []
_LOCK = threading.Lock()


def square(x: int) -> int:
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def stats(batch: dict[str, list[Any]]) -> dict[str, Any]:
    """Mean colour (float32[3]) and a 16x16 thumbnail (png) of each image."""
    means = []
    thumbs = []
    for img in batch["image"]:
        means.append(img.reshape(-1, img.shape[-1]).mean(axis=0))
        ys = np.linspace(0, img.shape[0] - 1, 16).astype(int)
        xs = np.linspace(0, img.shape[1] - 1, 16).astype(int)
        thumbs.append(np.ascontiguousarray(img[ys][:, xs]))
    with _LOCK:
        SEEN.extend(batch["sample_id"])
    return {"mean_color": np.stack(means), "thumb": thumbs}


def label_plus(batch: dict[str, list[Any]]) -> dict[str, Any]:
    """label + 100, and the label as text; records the sample ids it saw."""
    with _LOCK:
        SEEN.extend(batch["sample_id"])
    return {
        "bigger": [x + 100 for x in batch["label"]],
        "note": [f"label {x}" for x in batch["label"]],
    }


def slow_label(batch: dict[str, list[Any]]) -> dict[str, Any]:
    """Like `label_plus`, but slow, and appends each sample id to $MAP_CALLS_FILE."""
    time.sleep(float(os.environ.get("MAP_SLEEP", "0")))
    path = os.environ.get("MAP_CALLS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(f"{sid}\n" for sid in batch["sample_id"]))
            f.flush()
            os.fsync(f.fileno())
    return {
        "bigger": [x + 100 for x in batch["label"]],
        "note": [f"label {x}" for x in batch["label"]],
    }
