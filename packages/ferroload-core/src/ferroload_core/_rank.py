"""Rank and world size from the environment: the one reading of torchrun's and SLURM's
variables (the loader adds torch.distributed and its defaults, the map its executors)."""

from __future__ import annotations

import os
from collections.abc import Mapping


def rank_from_env(
    env: Mapping[str, str] | None = None, *, slurm_arrays: bool = True
) -> tuple[int | None, int | None]:
    """`(rank, world size)` from torchrun's environment (`RANK`, `WORLD_SIZE`), else, with
    `slurm_arrays`, from a SLURM array task's (`SLURM_ARRAY_TASK_ID` minus
    `SLURM_ARRAY_TASK_MIN`, divided by `SLURM_ARRAY_TASK_STEP`, of
    `SLURM_ARRAY_TASK_COUNT`), else what is set of `RANK` and `WORLD_SIZE` (None for a
    variable that is not). `env` defaults to `os.environ`.

    Array tasks are independent jobs, so a training loader reads them with
    `slurm_arrays=False`; the map runs one partition per task and reads them.

    Raises:
        ValueError: naming the variable, for one that is set but not an integer.

    Examples:
        >>> rank_from_env({"RANK": "1", "WORLD_SIZE": "4"})
        (1, 4)
        >>> rank_from_env({"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10",
        ...                "SLURM_ARRAY_TASK_COUNT": "3"})
        (2, 3)
        >>> rank_from_env({"RANK": "1"})
        (1, None)
    """
    env = os.environ if env is None else env

    def number(name: str) -> int | None:
        text = env.get(name)
        if text is None or not text.strip():
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"environment variable {name}={text!r} is not an integer") from None

    rank, world = number("RANK"), number("WORLD_SIZE")
    if rank is not None and world is not None:
        return rank, world
    if slurm_arrays:
        task, count = number("SLURM_ARRAY_TASK_ID"), number("SLURM_ARRAY_TASK_COUNT")
        if task is not None and count is not None:
            step = number("SLURM_ARRAY_TASK_STEP") or 1
            return (task - (number("SLURM_ARRAY_TASK_MIN") or 0)) // step, count
    return rank, world
