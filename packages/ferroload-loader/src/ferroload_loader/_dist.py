"""Rank and world size: explicit arguments, torch.distributed, or the environment."""

from __future__ import annotations

import sys

from ferroload_core import rank_from_env
from ferroload_loader._checks import check_rank


def resolve_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """`(rank, world_size)` of this process.

    Explicit arguments win; else `torch.distributed` when it is initialised (without
    importing torch if the program did not); else the `RANK` / `WORLD_SIZE` environment
    that torchrun, SLURM wrappers and Lightning set; else `(0, 1)`.

    Raises:
        LoaderOptionError: (a `ValueError`) for a world size outside
            `[1, MAX_WORLD_SIZE]` or a rank outside `[0, world_size)`.
    """
    check_rank(rank, world_size)  # what was given, before the environment fills in
    if rank is None or world_size is None:
        env_rank, env_world = _detected()
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
        check_rank(rank, world_size)
    return rank, world_size


def _detected() -> tuple[int, int]:
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    # array tasks are separate jobs, not ranks of one training run
    rank, world = rank_from_env(slurm_arrays=False)
    return (0 if rank is None else rank), (1 if world is None else world)
