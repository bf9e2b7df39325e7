"""The root conftest.py's policy on skips: a test whose service is missing is reported as
not run (and fails the run under FERROLOAD_STRICT=1); any other skip fails the run.

Each case runs pytest in a subprocess: on small test files next to a copy of the root
conftest.py, and on the Azurite tests of test_backends.py with `azurite-blob` off PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HINT = "install it with `npm install -g azurite@3.35.0` (needs Node.js >= 18"

SERVICE_SKIP = """
import pytest

@pytest.fixture(scope="session")
def emulator():
    pytest.skip("service not available: emu is not on PATH: install it with `get emu`")

def test_runs():
    assert True

def test_one(emulator):
    pass

def test_two(emulator):
    pass
"""

PLAIN_SKIP = """
import pytest

def test_runs():
    assert True

def test_skipped():
    pytest.skip("some optional dependency is missing")
"""


def _pytest(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FERROLOAD_STRICT", "FERROLOAD_ALLOW_SKIPS")
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the root conftest.py and two test files."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_service.py").write_text(SERVICE_SKIP)
    (tmp_path / "test_plain.py").write_text(PLAIN_SKIP)
    return tmp_path


def test_a_service_skip_is_reported_as_not_run_and_passes(project: Path) -> None:
    res = _pytest("test_service.py", cwd=project)
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert "2 tests not run: emu is not on PATH: install it with `get emu`" in lines
    assert "FAILED" not in res.stdout
    # the verdict comes last, right before pytest's closing counts
    assert lines[-2] == "2 tests not run: emu is not on PATH: install it with `get emu`"


def test_a_service_skip_fails_the_run_when_strict(project: Path) -> None:
    res = _pytest("test_service.py", cwd=project, env={"FERROLOAD_STRICT": "1"})
    assert res.returncode == 1, res.stdout
    assert (
        "FAILED: 2 tests not run: emu is not on PATH: install it with `get emu` "
        "(FERROLOAD_STRICT=1: every service test must run)"
    ) in res.stdout.splitlines()


def test_any_other_skip_fails_the_run(project: Path) -> None:
    res = _pytest(cwd=project)
    assert res.returncode == 1, res.stdout
    assert "2 tests not run: emu is not on PATH" in res.stdout
    assert "FAILED: 1 test skipped; every test must run" in res.stdout


def test_allow_skips_lets_every_skip_through_even_when_strict(project: Path) -> None:
    res = _pytest(cwd=project, env={"FERROLOAD_ALLOW_SKIPS": "1", "FERROLOAD_STRICT": "1"})
    assert res.returncode == 0, res.stdout
    assert "2 tests not run: emu is not on PATH" in res.stdout
    assert "FAILED" not in res.stdout


def test_a_failing_run_still_fails_and_says_what_did_not_run(project: Path) -> None:
    (project / "test_fails.py").write_text("def test_fails():\n    assert 1 == 2\n")
    res = _pytest("test_service.py", "test_fails.py", cwd=project)
    assert res.returncode == 1, res.stdout
    assert "2 tests not run: emu is not on PATH" in res.stdout


def test_azurite_tests_are_not_run_without_azurite_blob(tmp_path: Path) -> None:
    # Only an empty folder on PATH: no azurite-blob, as on a fresh machine.
    env = {"PATH": str(tmp_path)}
    # -n 0: one process (the repository's settings would start a worker per CPU)
    args = ("tests-e2e/test_backends.py", "-k", "azurite", "-q", "-n", "0")
    res = _pytest(*args, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout[-3000:]
    assert f"8 tests not run: azurite-blob is not on PATH: {HINT}" in res.stdout
    assert "8 skipped" in res.stdout.splitlines()[-1]

    strict = _pytest(*args, cwd=ROOT, env={**env, "FERROLOAD_STRICT": "1"})
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert f"FAILED: 8 tests not run: azurite-blob is not on PATH: {HINT}" in strict.stdout
