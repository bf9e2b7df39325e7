"""`rank_from_env`: the one reading of torchrun's and SLURM's variables."""

from __future__ import annotations

import pytest

from ferroload_core import rank_from_env


def test_torchrun_then_slurm_arrays() -> None:
    assert rank_from_env({}) == (None, None)
    assert rank_from_env({"RANK": "2", "WORLD_SIZE": "4"}) == (2, 4)
    array = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1",
             "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}  # fmt: skip
    assert rank_from_env(array) == (3, 4)
    assert rank_from_env(array, slurm_arrays=False) == (None, None)
    assert rank_from_env({**array, "RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    assert rank_from_env({"WORLD_SIZE": "2"}) == (None, 2)
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        rank_from_env({"RANK": "0", "WORLD_SIZE": "two"})


def test_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "6")
    assert rank_from_env() == (5, 6)
