"""Lint, format and type checks run as part of the test suite (CI runs only pytest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint() -> None:
    res = run("ruff", "check", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format() -> None:
    res = run("ruff", "format", "--check", ".")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    res = run("mypy")
    assert res.returncode == 0, res.stdout + res.stderr
