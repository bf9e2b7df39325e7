"""ferroload-rs 0.1.1's module `ferroload.executor`, deprecated: 0.2's `Dataset.map`
takes `executor="local" | "threads" | "processes" | "static" | "ray"` (docs/migrating.md)."""

from ferroload.compat import deprecated
from ferroload.compat._executor import (
    Executor,
    LocalExecutor,
    MapPlan,
    RayExecutor,
    StaticPartitionExecutor,
    Topology,
    commit_layer,
    detect_topology,
    select_executor,
)
from ferroload_format import LayerWriter

deprecated(
    "the module ferroload.executor",
    'ds.map(..., executor="local" | "static" | "ray")',
    stacklevel=2,
)

__all__ = [
    "Executor",
    "LayerWriter",
    "LocalExecutor",
    "MapPlan",
    "RayExecutor",
    "StaticPartitionExecutor",
    "Topology",
    "commit_layer",
    "detect_topology",
    "select_executor",
]
