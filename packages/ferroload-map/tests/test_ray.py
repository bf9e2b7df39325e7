"""The Ray executor on a local two-CPU cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _map_fns
import numpy as np
import pytest

from ferroload_map import LocalExecutor, RayExecutor, auto_executor, map_dataset

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    # Ray workers import the test functions (_map_fns) by name, as they would a user's
    # module: put this folder on their path.
    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def content(ds: Any) -> list[Any]:
    rows = ds.to_table(["sample_id", "mean_color"]).to_pylist()
    thumbs = ds.read(np.arange(len(ds)), "thumb")
    return [{**r, "thumb": t} for r, t in zip(rows, thumbs, strict=True)]


def run(ds: Any, executor: Any) -> Any:
    return map_dataset(
        ds,
        _map_fns.stats,
        inputs=["image"],
        outputs={"mean_color": "float32[3]", "thumb": "png"},
        layer="stats",
        batch_size=4,
        partition_size=5,
        executor=executor,
        progress=False,
        return_report=True,
    )


def test_ray_executor_matches_threads(ray_cluster: Any, make_dataset: Any) -> None:
    assert isinstance(auto_executor(), RayExecutor)  # connected to a cluster
    ds2, report = run(make_dataset(12), "auto")
    assert report.computed_partitions == (0, 1, 2) and report.committed
    reference, _ = run(make_dataset(12), LocalExecutor("threads"))
    assert content(ds2) == content(reference)
    _, again = run(ds2, RayExecutor())
    assert again.already_committed


def test_ray_task_errors_surface_as_map_errors(ray_cluster: Any, make_dataset: Any) -> None:
    from ferroload_map import MapError

    with pytest.raises(MapError, match="s00000") as info:
        map_dataset(
            make_dataset(3, images=False),
            _map_fns.stats,  # the dataset has no images: "image" is not an input it has
            inputs=["label"],
            outputs={"mean_color": "float32[3]", "thumb": "png"},
            layer="broken",
            executor=RayExecutor(),
            progress=False,
        )
    assert type(info.value) is MapError  # unwrapped from Ray's RayTaskError
    assert isinstance(info.value.__cause__, Exception)
