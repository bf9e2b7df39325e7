"""Each package installs, imports and passes its own tests alone; imports stay light."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# distribution -> (import name, folder, distributions its plain install must not pull)
PACKAGES = {
    "ferroload-store": (
        "ferroload_store",
        "packages/ferroload-store",
        {"torch", "ray", "av", "duckdb", "pyarrow"},
    ),
    "ferroload-format": ("ferroload_format", "packages/ferroload-format", {"torch", "ray", "av"}),
    "ferroload-codec": (
        "ferroload_codec",
        "packages/ferroload-codec",
        {"torch", "ray", "av", "duckdb", "pyarrow"},
    ),
    "ferroload-loader": (
        "ferroload_loader",
        "packages/ferroload-loader",
        {"torch", "ray", "av", "lightning"},
    ),
    "ferroload-map": ("ferroload_map", "packages/ferroload-map", {"torch", "ray", "av"}),
    "ferroload": ("ferroload", "packages/ferroload", {"torch", "ray", "av", "lightning"}),
    "ferroload-cli": ("ferroload_cli", "apps/ferroload-cli", {"torch", "ray", "lightning"}),
    "ferroload-catalog": ("ferroload_catalog", "apps/ferroload-catalog", {"torch", "ray", "av"}),
}
HEAVY_MODULES = {"torch", "ray", "av", "lightning"}


def test_every_workspace_member_is_covered() -> None:
    members = {p.parent.name for p in ROOT.glob("packages/*/pyproject.toml")}
    members |= {p.parent.name for p in ROOT.glob("apps/*/pyproject.toml")}
    assert members == set(PACKAGES)


@pytest.mark.parametrize("module", [m for m, _, _ in PACKAGES.values()])
def test_import_pulls_no_heavy_framework(module: str) -> None:
    code = f"import sys, {module}; print(sorted({sorted(HEAVY_MODULES)!r} and set(sys.modules) & {HEAVY_MODULES!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"importing {module} imported {out.stdout.strip()}"


@pytest.fixture(scope="module")
def uv() -> str:
    exe = shutil.which("uv")
    if exe is None:
        pytest.fail("uv is not on PATH; the README's set-up command installs it (pip install uv)")
    return exe


@pytest.mark.slow
@pytest.mark.parametrize("dist", list(PACKAGES))
def test_package_installs_and_passes_its_tests_alone(dist: str, uv: str, tmp_path: Path) -> None:
    module, folder, forbidden = PACKAGES[dist]
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "FERROLOAD_ALLOW_SKIPS": "1"}
    env.pop("VIRTUAL_ENV", None)
    subprocess.run(
        [uv, "sync", "--frozen", "--package", dist, "--no-dev", "--quiet"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    python = str(venv / "bin" / "python")
    listed = subprocess.run(
        [uv, "pip", "list", "--python", python, "--format", "freeze"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines() if line}
    assert dist in installed
    assert not installed & forbidden, f"{dist} alone pulls {sorted(installed & forbidden)}"
    subprocess.run([python, "-c", f"import {module}"], check=True, env=env)
    test_tools = [f"{name}=={version(name)}" for name in ("pytest", "pytest-timeout", "hypothesis")]
    subprocess.run(
        [uv, "pip", "install", "--python", python, "--quiet", *test_tools],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    res = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            folder + "/tests",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow and not gpu",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, (
        f"{dist}'s own tests failed alone:\n{res.stdout[-4000:]}\n{res.stderr[-2000:]}"
    )
