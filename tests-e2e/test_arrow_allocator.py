"""pyarrow's allocator (mimalloc) asks for no transparent huge pages in a process that
imported ferroload first: where THP is `madvise`, their page faults could compact memory
for tens of ms (a loader's first index read). A user's own `MIMALLOC_ALLOW_THP` wins."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from _proctree import run_tree

# Imports `package` and, if that loaded pyarrow, allocates through pyarrow's default pool
# and prints how many mappings of the process were advised for huge pages (`hg` in their
# VmFlags); -1 for a package that does not load pyarrow (the CLI, until a command runs).
SCRIPT = r"""
import importlib, sys
importlib.import_module(sys.argv[1])
if "pyarrow" not in sys.modules:
    print(-1)
    sys.exit(0)
import pyarrow as pa
assert pa.default_memory_pool().backend_name == "mimalloc", pa.default_memory_pool()
buf = pa.allocate_buffer(1 << 20)
with open("/proc/self/smaps") as f:
    print(sum(" hg" in line for line in f if line.startswith("VmFlags:")))
"""


def _huge_page_mappings(package: str, thp: str | None) -> int:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MIMALLOC_ALLOW_THP", "ARROW_DEFAULT_MEMORY_POOL")
    }
    if thp is not None:
        env["MIMALLOC_ALLOW_THP"] = thp
    res = run_tree([sys.executable, "-c", SCRIPT, package], env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip().splitlines()[-1])


ROOT = Path(__file__).resolve().parents[1]
#: Every package of the workspace (each must import ferroload_core before pyarrow).
PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/*/src/*/__init__.py"))


def test_every_package_is_checked() -> None:
    assert {"ferroload", "ferroload_format", "ferroload_loader", "ferroload_cli"} <= set(PACKAGES)
    # the packages that load pyarrow when imported are among them
    assert _huge_page_mappings("ferroload_loader", None) == 0


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_ferroload_turns_off_arrows_huge_pages(package: str) -> None:
    assert _huge_page_mappings(package, None) in (0, -1)


def test_the_users_own_setting_wins() -> None:
    # the control: mimalloc asks for them when told to, so the count above can see it
    # (on a kernel with transparent huge pages; without, no mapping can have them)
    got = _huge_page_mappings("ferroload_format", "1")
    assert got >= (1 if Path("/sys/kernel/mm/transparent_hugepage/enabled").exists() else 0)
