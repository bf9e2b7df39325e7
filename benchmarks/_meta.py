"""What every benchmark records about the run: package versions, the commit, the load."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def pkg_version(name: str) -> str:
    """The installed version of distribution `name`, or "not installed"."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_commit() -> str | None:
    """The short commit hash, with `+dirty` when the working tree has uncommitted changes."""
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    return commit + ("+dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (`2026-12-01T18:00:00Z`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine() -> str:
    """The machine in one line: architecture, CPUs, platform."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}"


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def usage(children: bool = False) -> dict[str, float]:
    """CPU seconds (user + system) and page faults (major: read from disk) so far, of
    this process and, with `children`, of its reaped child processes (DataLoader
    workers); `usage_since` turns two readings into a stretch's."""
    rs = [resource.getrusage(resource.RUSAGE_SELF)]
    if children:
        rs.append(resource.getrusage(resource.RUSAGE_CHILDREN))
    return {
        "cpu_s": sum(r.ru_utime + r.ru_stime for r in rs),
        "major_faults": sum(r.ru_majflt for r in rs),
        "minor_faults": sum(r.ru_minflt for r in rs),
    }


def usage_since(before: dict[str, float], children: bool = False) -> dict[str, float]:
    """`usage(children)` now minus `before`."""
    now = usage(children)
    return {k: now[k] - before[k] for k in now}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as indented JSON to `path`, atomically (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def import_torch() -> None:
    """`import torch`, pinned meanwhile to the CPU this process runs on.

    torch's import counts the cores through MKL, which pins the process to each CPU in
    turn (`sched_setaffinity`, from `at::init_num_threads`). On this VM a process doing
    that once stayed in the kernel for good (`affine_move_task`, unkillable), and a
    benchmark that starts a few hundred fresh interpreters hung with it. Pinned to its
    current CPU, MKL sets only that one and nothing moves; the whole mask comes back
    after the import (the threads started later get it; torch's own thread count is
    left at one, which these benchmarks never use)."""
    try:
        cpus = os.sched_getaffinity(0)
        with open("/proc/self/stat") as f:  # field 39, the CPU it last ran on
            here = int(f.read().rsplit(")", 1)[1].split()[36])
    except (AttributeError, OSError, ValueError, IndexError):  # not Linux: nothing to pin
        import torch

        return
    os.sched_setaffinity(0, {here})
    try:
        import torch  # noqa: F401
    finally:
        os.sched_setaffinity(0, cpus)
