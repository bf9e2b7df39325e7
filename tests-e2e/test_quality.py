"""Lint, format and type checks run as part of the test suite (CI runs only pytest)."""

from __future__ import annotations

import ast
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


#: numpy calls that run on the BLAS library's own thread pool.
BLAS_CALLS = {"dot", "vdot", "inner", "matmul", "tensordot", "einsum", "linalg"}


def blas_uses(text: str, name: str) -> list[str]:
    """Where the code in `text` multiplies matrices (`@`) or calls numpy's BLAS-backed
    functions, as `name:line: what`."""
    found = []
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.MatMult):
            found.append(f"{name}:{node.lineno}: @")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in BLAS_CALLS
            and isinstance(node.value, ast.Name)
            and node.value.id in ("np", "numpy")
        ):
            found.append(f"{name}:{node.lineno}: np.{node.attr}")
        elif (  # an array's own product: x.dot(y)
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "dot"
        ):
            found.append(f"{name}:{node.lineno}: .dot()")
    return sorted(found)


def test_the_library_runs_nothing_on_blas_threads() -> None:
    # OpenBLAS's threads spin while they wait: in DataLoader workers on a busy machine
    # (this suite's audio benchmark run) matrix products took seconds each; the audio
    # mix-down was one until it summed the channels itself
    text = "y = x @ w\ny @= w\nz = np.linalg.norm(y.dot(w))\nplan.inner[k]\n"
    assert blas_uses(text, "t") == ["t:1: @", "t:2: @", "t:3: .dot()", "t:3: np.linalg"]
    sources = sorted(ROOT.glob("packages/*/src/**/*.py")) + sorted(ROOT.glob("apps/*/src/**/*.py"))
    assert len(sources) > 50
    found = [hit for p in sources for hit in blas_uses(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, found
