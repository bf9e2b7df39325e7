"""ferroload-map: `Dataset.map` enrichment layers and their executors (local, static, Ray).

- `map_dataset(ds, fn, inputs=..., outputs=..., layer=...)` adds `fn`'s outputs as an
  additive, idempotent, resumable layer and commits it as a new version; `MapReport`
  says what it did (`return_report=True`).
- `MapSpec`, `plan_partitions`, `run_partition`: the identity, the one partition plan
  and the one partition runner every executor shares.
- Executors decide where partitions run: `LocalExecutor` (threads or processes),
  `StaticPartitionExecutor` (torchrun ranks, SLURM array tasks), `RayExecutor` (extra
  `ray`; importing this package does not import Ray); `auto_executor()` picks one.

See docs/map.md.
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_core import rank_from_env
from ferroload_map._errors import ExecutorUnavailableError, MapError, MapOutputError, MapSpecError
from ferroload_map._executors import (
    Executor,
    LocalExecutor,
    RayExecutor,
    StaticPartitionExecutor,
    auto_executor,
)
from ferroload_map._map import MapReport, execute_map, map_dataset
from ferroload_map._plan import (
    DEFAULT_PARTITION_SIZE,
    MIN_PARTITION_SIZE,
    TARGET_PARTITIONS,
    Partition,
    default_partition_size,
    plan_partitions,
)
from ferroload_map._run import PartitionResult, SkippedSample, run_partition
from ferroload_map._spec import EXTENSIONS, MapSpec, fn_identity, parse_type, storage_type

try:
    __version__ = version("ferroload-map")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_PARTITION_SIZE",
    "EXTENSIONS",
    "MIN_PARTITION_SIZE",
    "TARGET_PARTITIONS",
    "Executor",
    "ExecutorUnavailableError",
    "LocalExecutor",
    "MapError",
    "MapOutputError",
    "MapReport",
    "MapSpec",
    "MapSpecError",
    "Partition",
    "PartitionResult",
    "RayExecutor",
    "SkippedSample",
    "StaticPartitionExecutor",
    "__version__",
    "auto_executor",
    "default_partition_size",
    "execute_map",
    "fn_identity",
    "map_dataset",
    "parse_type",
    "plan_partitions",
    "rank_from_env",
    "run_partition",
    "storage_type",
]
