"""ferroload-rs 0.1.1's map executors: `Topology`, `detect_topology`, `select_executor`,
`Executor`, `LocalExecutor`, `StaticPartitionExecutor`, `RayExecutor`, `MapPlan`,
`commit_layer` (the module `ferroload.executor` of 0.1.1).

They drive the 0.1.1 form of `Dataset.map` (`compat._map`); the 0.2 map takes
`executor="local" | "threads" | "processes" | "static" | "ray"` or a
`ferroload_map.Executor` instead.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ferroload_map._executors as map_executors
from ferroload.compat import deprecated, removed


@dataclass
class Topology:
    """0.1.1's launch topology (`num_nodes` decides local vs distributed)."""

    num_nodes: int
    node_rank: int
    local_size: int
    world_size: int
    rank: int
    source: str = "bare"


def _int(name: str, default: int | None = None) -> int | None:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        return default


def _local_size() -> int:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        return len([x for x in cvd.split(",") if x != ""]) or 1
    return os.cpu_count() or 1


def detect_topology() -> Topology:
    """0.1.1: the launch topology from torchrun, SLURM, MPI or Ray environment variables
    (in that order), else a single node."""
    world = _int("WORLD_SIZE")
    if world is not None and (
        "TORCHELASTIC_RUN_ID" in os.environ
        or "LOCAL_WORLD_SIZE" in os.environ
        or _int("RANK") is not None
    ):
        local = _int("LOCAL_WORLD_SIZE", world) or world
        rank = _int("RANK", 0) or 0
        nnodes = _int("NNODES") or max(1, world // max(local, 1))
        node_rank = _int("GROUP_RANK", _int("NODE_RANK", rank // max(local, 1))) or 0
        return Topology(nnodes, node_rank, local, world, rank, "torchrun")
    if _int("SLURM_NTASKS") is not None or _int("SLURM_PROCID") is not None:
        nnodes = _int("SLURM_NNODES", 1) or 1
        world = _int("SLURM_NTASKS") or nnodes
        local = _int("SLURM_NTASKS_PER_NODE") or max(1, world // max(nnodes, 1))
        return Topology(
            nnodes,
            _int("SLURM_NODEID", 0) or 0,
            local,
            world,
            _int("SLURM_PROCID", 0) or 0,
            "slurm",
        )
    world = _int("OMPI_COMM_WORLD_SIZE") or _int("PMI_SIZE")
    if world is not None:
        rank = _int("OMPI_COMM_WORLD_RANK") or _int("PMI_RANK") or 0
        local = _int("OMPI_COMM_WORLD_LOCAL_SIZE") or world
        return Topology(
            max(1, world // max(local, 1)), rank // max(local, 1), local, world, rank, "mpi"
        )
    if os.environ.get("RAY_ADDRESS"):
        ls = _local_size()
        return Topology(2, 0, ls, ls, 0, "ray")
    ls = _local_size()
    return Topology(1, 0, ls, ls, 0, "bare")


@dataclass
class MapPlan:
    """0.1.1: one map's work for an `Executor`: the layer, its outputs, and
    `process(positions) -> {output: values}` computing the outputs of some rows."""

    root: str
    layer_name: str
    modalities: dict[str, Any]
    total: int
    process: Callable[..., Any]
    sample_id: Callable[[int], int]
    progress: bool = False
    _meta: dict[str, Any] = field(default_factory=dict)


def _ours(plan: MapPlan) -> MapPlan:
    """`plan` when the 0.1.1 form of `Dataset.map` made it; a plan made by hand, whose
    `process(writer, positions)` wrote sample by sample into 0.1.1's `LayerWriter`, is
    refused."""
    if not plan._meta.get("compat"):
        raise removed(
            "Executor.run(MapPlan(..., process=fn(writer, positions)))",
            "ds.map(fn, inputs=..., outputs=..., layer=..., executor=...)",
            "0.2 writes a layer by partitions of rows, not sample by sample",
        )
    return plan


class Executor:
    """0.1.1's map backend: `run(plan)` computes and writes the layer (0.2:
    `ferroload_map.Executor`, a protocol with `assign` and `run(fn, items)`)."""

    def __init__(self, topo: Topology | None = None) -> None:
        self.topo = topo or detect_topology()

    def run(self, plan: MapPlan) -> int:
        """Compute and write the layer; the number of samples written."""
        raise NotImplementedError(f"{type(self).__name__}.run")


def _topology(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Topology | None:
    """The `Topology` of a 0.1.1-style executor call (`Executor(topo)`), else None."""
    topo: Topology | None = kwargs.pop(
        "topo", args[0] if args and isinstance(args[0], Topology) else None
    )
    if topo is not None:
        deprecated(
            f"{name}(Topology(...))",
            f"ferroload.{name}(...) with 0.2's arguments, or ds.map(..., executor=...)",
        )
    return topo


class LocalExecutor(map_executors.LocalExecutor):
    """`ferroload_map.LocalExecutor` (threads or processes); 0.1.1's `LocalExecutor(topo)`
    and `run(plan)` also work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        topo = _topology(args, kwargs, "LocalExecutor")
        super().__init__(*([] if topo is not None else args), **kwargs)
        self.topo = topo

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """0.2: `run(fn, items)`; 0.1.1: `run(plan)` computes every row and commits."""
        if len(args) == 1 and isinstance(args[0], MapPlan):
            return int(_ours(args[0]).process(None))
        return super().run(*args, **kwargs)


class StaticPartitionExecutor(map_executors.StaticPartitionExecutor):
    """`ferroload_map.StaticPartitionExecutor`; 0.1.1's `StaticPartitionExecutor(topo)`
    also works: its `run(plan)` computes the rows whose position modulo the world size
    is the rank and stages them (`commit_layer` commits; a single rank commits itself)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        topo = _topology(args, kwargs, "StaticPartitionExecutor")
        if topo is not None:
            super().__init__(topo.rank, max(topo.world_size, 1))
        else:
            super().__init__(*args, **kwargs)
        self.topo = topo

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """0.2: `run(fn, items)`; 0.1.1: `run(plan)` stages this rank's rows."""
        if len(args) == 1 and isinstance(args[0], MapPlan):
            return int(_ours(args[0]).process((self.rank, self.world_size)))
        return super().run(*args, **kwargs)


class RayExecutor(map_executors.RayExecutor):
    """`ferroload_map.RayExecutor`; 0.1.1's `RayExecutor(topo)` (which 0.1.1 shipped
    unimplemented) is refused at `run(plan)` with the 0.2 spelling."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        topo = _topology(args, kwargs, "RayExecutor")
        super().__init__(*([] if topo is not None else args), **kwargs)
        self.topo = topo

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """0.2: `run(fn, items)`; 0.1.1's `run(plan)` is refused."""
        if len(args) == 1 and isinstance(args[0], MapPlan):
            raise removed(
                "RayExecutor.run(plan)",
                'ds.map(fn, inputs=..., outputs=..., layer=..., executor="ray")',
            )
        return super().run(*args, **kwargs)


_BY_NAME: dict[str, Any] = {
    "local": LocalExecutor,
    "static": StaticPartitionExecutor,
    "static_partition": StaticPartitionExecutor,
    "ray": RayExecutor,
}


def select_executor(topo: Topology | None = None, override: str | None = None) -> Any:
    """0.1.1: the executor for `topo` (`override` or `FERROLOAD_EXECUTOR` forces one):
    one node -> `LocalExecutor`, torchrun/SLURM/MPI -> `StaticPartitionExecutor`."""
    topo = topo or detect_topology()
    choice = override or os.environ.get("FERROLOAD_EXECUTOR")
    if choice:
        cls = _BY_NAME.get(choice.lower())
        if cls is None:
            raise ValueError(f"unknown FERROLOAD_EXECUTOR={choice!r}; use local|static|ray")
        return cls(topo=topo)
    with warnings.catch_warnings():  # the caller used 0.1.1's select_executor: warned once
        warnings.simplefilter("ignore", FutureWarning)
        if topo.num_nodes <= 1:
            return LocalExecutor(topo=topo)
        if topo.source in ("torchrun", "slurm", "mpi"):
            return StaticPartitionExecutor(topo=topo)
        return RayExecutor(topo=topo)


def commit_layer(root: str, name: str, modalities: Any = None) -> int:
    """0.1.1: commit the layer `name` whose partitions `StaticPartitionExecutor` ranks
    staged (the manual step without a torch.distributed barrier); the rows it covers."""
    from ferroload.compat._map import commit_partitions

    deprecated(
        "commit_layer(root, name, modalities)", 'ds.map(..., executor="static") (it commits itself)'
    )
    return commit_partitions(root, name)
