"""Each package installs, imports and passes its own tests alone; imports stay light."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from _proctree import run_tree
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]

# distribution -> (import name, folder, distributions its plain install must not pull)
PACKAGES = {
    "ferroload-core": (
        "ferroload_core",
        "packages/ferroload-core",
        {"numpy", "torch", "ray", "av", "duckdb", "pyarrow"},
    ),
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
    "ferroload-convert": (
        "ferroload_convert",
        "packages/ferroload-convert",
        {"torch", "ray", "av"},
    ),
    "ferroload": ("ferroload", "packages/ferroload", {"torch", "ray", "av", "lightning"}),
    "ferroload-cli": ("ferroload_cli", "apps/ferroload-cli", {"torch", "ray", "lightning"}),
    "ferroload-catalog": ("ferroload_catalog", "apps/ferroload-catalog", {"torch", "ray", "av"}),
    "ferroload-testing": (
        "ferroload_testing",
        "packages/ferroload-testing",
        {"numpy", "torch", "ray", "av", "duckdb", "pyarrow"},
    ),
}
HEAVY_MODULES = {"torch", "ray", "av", "lightning"}


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


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


# The workspace lock replaces pillow by pillow-simd (a root dependency), so a package
# synced alone gets its PIL from here: the workspace's own build, or stock Pillow to prove
# the codecs work with it too.
NEEDS_PIL = {
    "ferroload-codec",
    "ferroload-loader",
    "ferroload-map",
    "ferroload-convert",
    "ferroload",
    "ferroload-cli",
}
EXTRAS = {
    "ferroload-codec": ["--extra", "video"],
    "ferroload-map": ["--extra", "ray"],
    "ferroload-convert": ["--extra", "hf"],
}
# What a package's own tests import beyond pytest, hypothesis, moto and PIL (the convert
# tests prove interop with webdataset both ways and write FLAC with soundfile).
TEST_TOOLS = {
    "ferroload-convert": ["webdataset", "soundfile", "imagecodecs"],
    "ferroload-core": ["tqdm"],  # progress bars: core draws none itself, its tests do
}
# The test helpers (MotoServer, FaultProxy): a development package that no package requires,
# installed from its folder next to the test tools; its own tests point a store at moto.
TESTING = "packages/ferroload-testing"
WORKSPACE_TEST_TOOLS = {
    "ferroload-testing": ["packages/ferroload-core", "packages/ferroload-store"]
}
CASES = [(dist, "pillow-simd") for dist in PACKAGES] + [("ferroload-codec", "pillow")]
# How long each isolated run takes (seconds, serial, measured at load ~5 with the
# bytecode cache below): tests-e2e's conftest.py starts the longest ones first, one list
# per xdist worker, so that no worker is left alone with a long run at the end of the
# suite. Only the order depends on them.
COST = {
    "ferroload-format": 240,
    "ferroload-cli": 140,
    "ferroload-map": 70,
    "ferroload-convert": 55,
    "ferroload-loader": 45,
    "ferroload-store": 45,
    "ferroload-catalog": 30,
    "ferroload-codec": 30,
    "ferroload": 13,
    "ferroload-testing": 10,
    "ferroload-core": 7,
}


def _run(*cmd: str, env: dict[str, str]) -> str:
    res = run_tree(cmd, cwd=ROOT, env=env)
    assert res.returncode == 0, (
        f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


def _pip_install(uv: str, python: str, *args: str, env: dict[str, str]) -> None:
    """`uv pip install` from uv's cache alone when it holds everything (the workspace's
    sync filled it); from the registry otherwise (an empty cache: a fresh machine).
    --no-config: the workspace's override, which drops pillow, must not apply here."""
    cmd = (uv, "pip", "install", "--no-config", "--python", python, "--quiet", *args)
    offline = subprocess.run((*cmd, "--offline"), cwd=ROOT, env=env, capture_output=True)
    if offline.returncode != 0:
        _run(*cmd, env=env)


@pytest.fixture(scope="module")
def local_wheels(uv: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The wheels of the workspace packages that isolated runs install from their folders
    (the test helpers, and core and store for the helpers' own tests), built once for the
    session: each xdist worker takes the first one's build (installing a folder builds
    its wheel again every time, ~5 s)."""
    folders = sorted({TESTING, *(p for ps in WORKSPACE_TEST_TOOLS.values() for p in ps)})
    shared = tmp_path_factory.getbasetemp().parent  # the same for every xdist worker
    out = shared / "isolated-wheels"
    with FileLock(shared / "isolated-wheels.lock"):
        if not (out / "done").exists():
            env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
            for folder in folders:
                _run(uv, "build", "--wheel", "--quiet", "--out-dir", str(out), folder, env=env)
            (out / "done").touch()
    wheels = {}
    for folder in folders:
        dist = _toml(ROOT / folder / "pyproject.toml")["project"]["name"]
        (found,) = out.glob(f"{dist.replace('-', '_')}-*.whl")
        wheels[folder] = str(found)
    return wheels


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dist", "pil"),
    [pytest.param(d, p, marks=pytest.mark.heavy(COST[d])) for d, p in CASES],
    ids=[f"{d}-{p}" for d, p in CASES],
)
def test_package_installs_and_passes_its_tests_alone(
    dist: str, pil: str, uv: str, local_wheels: dict[str, str], tmp_path: Path
) -> None:
    module, folder, forbidden = PACKAGES[dist]
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "FERROLOAD_ALLOW_SKIPS": "1"}
    env.pop("UV_COMPILE_BYTECODE", None)
    env.pop("VIRTUAL_ENV", None)
    # Bytecode: each module is compiled the first time an interpreter of this run imports
    # it, then read back (the tests start many interpreters: workers, CLIs, moto servers).
    # With PYTHONDONTWRITEBYTECODE set, each of them would compile every import again;
    # compiling the whole environment at install costs more than it saves (measured).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    sync = [uv, "sync", "--frozen", "--package", dist, "--no-dev", "--quiet"]
    _run(*sync, env=env)
    python = str(venv / "bin" / "python")
    listed = _run(uv, "pip", "list", "--python", python, "--format", "freeze", env=env)
    installed = {line.split("==")[0].lower() for line in listed.splitlines() if line}
    assert dist in installed
    assert not installed & forbidden, f"{dist} alone pulls {sorted(installed & forbidden)}"
    _run(python, "-c", f"import {module}", env=env)
    if dist in EXTRAS:  # its tests cover the extras too
        _run(*sync, *EXTRAS[dist], env=env)
    # pytest-xdist: the root pytest settings pass -n; the run inside is serial (-n 0), the
    # outer suite already runs two of these at once.
    tools = [f"{name}=={version(name)}" for name in ("pytest", "pytest-timeout", "pytest-xdist", "hypothesis")]  # fmt: skip
    tools.append(f"moto[server]=={version('moto')}")  # the S3 server the s3 tests start
    tools += [f"{name}=={version(name)}" for name in TEST_TOOLS.get(dist, [])]
    if folder != TESTING:
        tools.append(local_wheels[TESTING])
    tools += [local_wheels[path] for path in WORKSPACE_TEST_TOOLS.get(dist, [])]
    if dist in NEEDS_PIL:
        tools.append(f"pillow-simd=={version('pillow-simd')}" if pil == "pillow-simd" else "pillow")
    _pip_install(uv, python, *tools, env=env)
    if pil == "pillow":
        assert "pillow-simd" not in _run(uv, "pip", "list", "--python", python, env=env).lower()
    _run(python, "-m", "pytest", folder + "/tests", "-q", "-p", "no:cacheprovider",
         "-m", "not slow and not gpu", "-n", "0", env=env)  # fmt: skip
