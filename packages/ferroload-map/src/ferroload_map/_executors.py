"""Executors decide *where* partitions run: threads, processes, a static slice of ranks,
or a Ray cluster. The plan, the partition runner and the commit are shared."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from ferroload_core import LRU, available_cpus, rank_from_env
from ferroload_map._errors import ExecutorUnavailableError
from ferroload_map._plan import Partition

T = TypeVar("T")
R = TypeVar("R")

#: Names `map_dataset(executor=...)` accepts besides an `Executor`.
ExecutorName = Literal["auto", "local", "threads", "processes", "static", "ray"]


@runtime_checkable
class Executor(Protocol):
    """Where the partitions of a map run.

    `map_dataset` asks `assign` which of the partitions still to compute this process
    is responsible for, then `run`s the partition runner over them. Whatever an executor
    does, the runner stages each partition atomically and the driver commits only once
    every partition of the plan is staged.
    """

    def assign(self, partitions: Sequence[Partition]) -> list[Partition]:
        """The partitions (of those not staged yet) this process should compute."""
        ...

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """Call `fn` on every item and yield the results as they finish (any order).

        `fn` is picklable whenever the map's function is. The first exception raised by
        a call is raised here; calls not started yet are cancelled.
        """
        ...


class LocalExecutor:
    """Runs partitions on this machine, on a thread pool or a process pool.

    Threads suit functions that release the GIL (numpy, PIL, torch) and are the default;
    `fn` must then be thread-safe. Processes (the "spawn" start method: object-store
    clients are not fork-safe) suit pure-Python functions; `fn` must then be importable by
    the worker processes (a module-level function, not a lambda), and a script must guard
    its entry point with `if __name__ == "__main__":`.

    Args:
        kind: "threads" or "processes".
        workers: pool size (default: the CPUs this process may use). `workers=1` with
            threads runs in the calling thread.

    Examples:
        >>> ex = LocalExecutor("threads", workers=2)
        >>> sorted(ex.run(lambda x: x * x, [1, 2, 3]))
        [1, 4, 9]
    """

    def __init__(
        self, kind: Literal["threads", "processes"] = "threads", *, workers: int | None = None
    ) -> None:
        if kind not in ("threads", "processes"):
            raise ValueError(f"kind must be 'threads' or 'processes', got {kind!r}")
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise ValueError(f"workers must be a positive int or None, got {workers!r}")
        self.kind = kind
        self.workers = workers

    def __repr__(self) -> str:
        return f"LocalExecutor({self.kind!r}, workers={self.workers})"

    def assign(self, partitions: Sequence[Partition]) -> list[Partition]:
        """All of them."""
        return list(partitions)

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """Call `fn` on every item in the pool; yield results as they finish."""
        items = list(items)
        if not items:
            return
        workers = min(self.workers or available_cpus(), len(items))
        if self.kind == "threads" and workers == 1:
            for item in items:
                yield fn(item)
            return
        pool: cf.Executor
        call: Callable[[T], R]
        if self.kind == "threads":
            pool = cf.ThreadPoolExecutor(workers, thread_name_prefix="ferroload-map")
            call = fn
        else:
            # fn (with the dataset and writer it carries) travels once per worker process,
            # not once per item: what it caches (index columns) serves every item there.
            pool = cf.ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_set_worker_fn,
                initargs=(fn,),
            )
            call = _call_worker_fn
        try:
            futures = [pool.submit(call, item) for item in items]
            for future in cf.as_completed(futures):
                yield future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


_worker_fn: Callable[[Any], Any] | None = None


def _set_worker_fn(fn: Callable[[Any], Any]) -> None:
    """Initializer of a worker process: the function its items are called with."""
    global _worker_fn
    _worker_fn = fn


def _call_worker_fn(item: Any) -> Any:
    assert _worker_fn is not None, "the pool's initializer did not run"
    return _worker_fn(item)


class StaticPartitionExecutor:
    """Runs a fixed slice of the partitions: those with `index % world_size == rank`.

    For jobs launched as many processes that do not talk to each other: torchrun ranks,
    SLURM array tasks, or any launcher that can hand out a rank. Each process runs the
    same `map_dataset` call; each stages its slice; the one that finds every partition
    staged at its end commits (if two do at once, one commits and the other finds the
    layer committed). The others return the dataset unchanged with `report.pending`.

    Args:
        rank: this process's slice (default: `RANK`, else `SLURM_ARRAY_TASK_ID` minus
            `SLURM_ARRAY_TASK_MIN`, from the environment).
        world_size: the number of slices (default: `WORLD_SIZE`, else
            `SLURM_ARRAY_TASK_COUNT`).
        local: how this process runs its slice (default: `LocalExecutor("threads")`).

    Raises:
        ValueError: if rank and world size are neither given nor in the environment, or
            do not satisfy `0 <= rank < world_size`.

    Examples:
        >>> from ferroload_map import plan_partitions
        >>> ex = StaticPartitionExecutor(rank=1, world_size=3)
        >>> [p.index for p in ex.assign(plan_partitions(70, 10))]
        [1, 4]
    """

    def __init__(
        self,
        rank: int | None = None,
        world_size: int | None = None,
        *,
        local: Executor | None = None,
    ) -> None:
        if rank is None or world_size is None:
            env_rank, env_world = rank_from_env(os.environ)
            rank = env_rank if rank is None else rank
            world_size = env_world if world_size is None else world_size
        if rank is None or world_size is None:
            raise ValueError(
                "StaticPartitionExecutor needs rank and world_size: pass them, or run under "
                "torchrun (RANK, WORLD_SIZE) or as a SLURM array task (SLURM_ARRAY_TASK_ID, "
                "SLURM_ARRAY_TASK_COUNT)"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got {rank} of {world_size}")
        self.rank = rank
        self.world_size = world_size
        self.local: Executor = local if local is not None else LocalExecutor("threads")

    def __repr__(self) -> str:
        return f"StaticPartitionExecutor(rank={self.rank}, world_size={self.world_size})"

    def assign(self, partitions: Sequence[Partition]) -> list[Partition]:
        """The partitions of this rank's slice."""
        return [p for p in partitions if p.index % self.world_size == self.rank]

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """Run the slice with the local executor."""
        return self.local.run(fn, items)


class RayExecutor:
    """Runs each partition as a Ray task; the driver (this process) commits.

    Needs the `ray` extra (`pip install 'ferroload-map[ray]'`). Uses the cluster this
    process is connected to (`ray.init(...)`), else starts a local one. The map's
    function must pickle (Ray's cloudpickle handles lambdas and closures); the dataset
    must be on storage the workers reach (local paths only on a one-machine cluster).

    Args:
        num_cpus_per_task: CPUs Ray reserves for each partition task.
        num_gpus_per_task: GPUs Ray reserves for each partition task.

    Raises:
        ExecutorUnavailableError: on `run` if Ray is not installed.
    """

    def __init__(self, num_cpus_per_task: float = 1, *, num_gpus_per_task: float = 0) -> None:
        if num_cpus_per_task < 0 or num_gpus_per_task < 0:
            raise ValueError("num_cpus_per_task and num_gpus_per_task must be >= 0")
        self.num_cpus_per_task = num_cpus_per_task
        self.num_gpus_per_task = num_gpus_per_task

    def __repr__(self) -> str:
        return f"RayExecutor(num_cpus_per_task={self.num_cpus_per_task})"

    def assign(self, partitions: Sequence[Partition]) -> list[Partition]:
        """All of them."""
        return list(partitions)

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """Submit one task per item; yield results as tasks finish."""
        ray = _import_ray()
        items = list(items)
        if not items:
            return
        if not ray.is_initialized():
            ray.init()
        remote = ray.remote(num_cpus=self.num_cpus_per_task, num_gpus=self.num_gpus_per_task)(
            _apply
        )
        fn_ref = ray.put(fn)
        # The reference travels inside a list, so that Ray does not resolve it per task:
        # each worker process resolves it once and keeps fn (and what it caches).
        pending = [remote.remote([fn_ref], item) for item in items]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    result: R = ray.get(done[0])
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, Exception):
                        raise cause from exc
                    raise
                yield result
        finally:
            for ref in pending:
                ray.cancel(ref)


#: The functions a Ray worker process fetched, by object ref (the two most recent).
_RAY_FNS: LRU[str, Callable[[Any], Any]] = LRU(2)


def _apply(fn_ref: list[Any], item: Any) -> Any:
    """The Ray task: call the function behind `fn_ref[0]` on one item (the function is
    fetched once per worker process)."""
    import ray

    key = fn_ref[0].hex()
    fn = _RAY_FNS.get(key)
    if fn is None:
        fn = ray.get(fn_ref[0])
        _RAY_FNS.put(key, fn)
    return fn(item)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorUnavailableError(
            "the Ray executor needs Ray: pip install 'ferroload-map[ray]'"
        ) from exc
    return ray


def auto_executor(env: Mapping[str, str] | None = None) -> Executor:
    """The executor `executor="auto"` picks.

    Ray when this process is connected to a Ray cluster (`ray.is_initialized()`; Ray is
    not imported to find out), else a static partition under torchrun (`RANK` and
    `WORLD_SIZE`) or a SLURM array task (`SLURM_ARRAY_TASK_ID` and
    `SLURM_ARRAY_TASK_COUNT`), else local threads.

    Args:
        env: the environment to read (default: `os.environ`).

    Examples:
        >>> auto_executor({})
        LocalExecutor('threads', workers=None)
        >>> auto_executor({"RANK": "0", "WORLD_SIZE": "2"})
        StaticPartitionExecutor(rank=0, world_size=2)
    """
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return RayExecutor()
    rank, world = rank_from_env(os.environ if env is None else env)
    if rank is not None and world is not None:
        return StaticPartitionExecutor(rank, world)
    return LocalExecutor("threads")


def resolve_executor(executor: ExecutorName | Executor) -> Executor:
    """An `Executor` from `map_dataset`'s `executor=` argument.

    Raises:
        ValueError: for an unknown name or an object that is not an `Executor`.
    """
    if isinstance(executor, str):
        if executor == "auto":
            return auto_executor()
        if executor in ("local", "threads"):
            return LocalExecutor("threads")
        if executor == "processes":
            return LocalExecutor("processes")
        if executor == "static":
            return StaticPartitionExecutor()
        if executor == "ray":
            return RayExecutor()
        raise ValueError(
            f"unknown executor {executor!r}: use 'auto', 'local', 'threads', 'processes', "
            "'static', 'ray' or an Executor"
        )
    if not isinstance(executor, Executor):
        raise ValueError(
            f"executor must be a name or an Executor (with assign and run), got "
            f"{type(executor).__name__}"
        )
    return executor
