from __future__ import annotations

import sys

import _map_fns
import pytest

from ferroload_map import (
    ExecutorUnavailableError,
    LocalExecutor,
    RayExecutor,
    StaticPartitionExecutor,
    auto_executor,
    plan_partitions,
    rank_from_env,
)
from ferroload_map._executors import Executor, resolve_executor

ENV_VARS = (
    "RANK",
    "WORLD_SIZE",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "executor",
    [
        LocalExecutor("threads", workers=1),
        LocalExecutor("threads", workers=3),
        LocalExecutor("processes", workers=2),
    ],
    ids=repr,
)
def test_local_executors_run_every_item(executor: LocalExecutor) -> None:
    assert sorted(executor.run(_map_fns.square, range(7))) == [i * i for i in range(7)]
    assert list(executor.run(_map_fns.square, [])) == []


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_local_executors_raise_the_first_error(kind: str) -> None:
    ex = LocalExecutor(kind, workers=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="three is not allowed"):
        list(ex.run(_map_fns.fail_on_three, range(6)))


def test_local_executor_arguments() -> None:
    with pytest.raises(ValueError, match="kind"):
        LocalExecutor("fibers")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workers"):
        LocalExecutor(workers=0)


def test_static_partition_slices_are_disjoint_and_complete() -> None:
    plan = plan_partitions(100, 7)
    slices = [StaticPartitionExecutor(r, 3).assign(plan) for r in range(3)]
    assert sorted(p.index for s in slices for p in s) == list(range(len(plan)))
    assert [p.index for p in slices[1]] == [1, 4, 7, 10, 13]
    # a resumed run assigns what is left by partition number, not by position
    left = [p for p in plan if p.index not in (1, 2)]
    assert [p.index for p in StaticPartitionExecutor(1, 3).assign(left)][:2] == [4, 7]


def test_static_partition_from_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    ex = StaticPartitionExecutor()
    assert (ex.rank, ex.world_size) == (2, 4)
    assert sorted(ex.run(_map_fns.square, [1, 2])) == [1, 4]


def test_static_partition_from_slurm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    ex = StaticPartitionExecutor()
    assert (ex.rank, ex.world_size) == (2, 3)


def test_static_partition_needs_a_rank() -> None:
    with pytest.raises(ValueError, match="torchrun"):
        StaticPartitionExecutor()
    with pytest.raises(ValueError, match="rank must be in"):
        StaticPartitionExecutor(3, 3)


def test_rank_from_env() -> None:
    assert rank_from_env({}) == (None, None)
    assert rank_from_env({"RANK": "0"}) == (0, None)  # partial: the executors need both
    assert rank_from_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "9"}) == (1, 2)
    env = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_STEP": "2"}
    assert rank_from_env(env) == (2, 3)
    with pytest.raises(ValueError, match="RANK='x'"):
        rank_from_env({"RANK": "x", "WORLD_SIZE": "2"})


def test_auto_executor_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    got = auto_executor()
    assert isinstance(got, LocalExecutor) and got.kind == "threads"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    got = auto_executor()
    assert isinstance(got, StaticPartitionExecutor) and (got.rank, got.world_size) == (1, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    got = auto_executor()
    assert isinstance(got, StaticPartitionExecutor) and (got.rank, got.world_size) == (3, 4)


def test_auto_executor_picks_ray_only_when_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeRay:  # stands in for the module: auto_executor never imports ray itself
        connected = False

        def is_initialized(self) -> bool:
            return self.connected

    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)  # type: ignore[arg-type]
    assert isinstance(auto_executor(), LocalExecutor)
    fake.connected = True
    assert isinstance(auto_executor(), RayExecutor)


def test_resolve_executor_names() -> None:
    assert isinstance(resolve_executor("local"), LocalExecutor)
    assert resolve_executor("threads").kind == "threads"  # type: ignore[attr-defined]
    assert resolve_executor("processes").kind == "processes"  # type: ignore[attr-defined]
    assert isinstance(resolve_executor("ray"), RayExecutor)
    assert isinstance(resolve_executor(StaticPartitionExecutor(0, 1)), StaticPartitionExecutor)
    assert isinstance(LocalExecutor(), Executor)
    with pytest.raises(ValueError, match="unknown executor"):
        resolve_executor("cluster")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Executor"):
        resolve_executor(42)  # type: ignore[arg-type]


def test_ray_executor_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # type: ignore[arg-type]
    with pytest.raises(ExecutorUnavailableError, match=r"pip install 'ferroload-map\[ray\]'"):
        list(RayExecutor().run(_map_fns.square, [1]))
