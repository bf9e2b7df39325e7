"""The distributions users install: one version for the whole workspace, wheels that build
from their sdists, and `pip install ferroload` that gives the library and the command.

The slow tests build every package with `uv build --all-packages` (an sdist, then a wheel
from it), install the `ferroload` wheel and the workspace wheels it needs into a fresh
virtual environment made by `python -m venv` with plain pip, and run `ferroload --version`
and the README's Quickstart there. See docs/releasing.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from _proctree import run_tree
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

import ferroload

ROOT = Path(__file__).resolve().parents[1]
MEMBERS = sorted([*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("apps/*/pyproject.toml")])
#: An older, unrelated `ferroload` on PyPI; a resolver must never prefer it to ours.
OLD_PYPI_FERROLOAD = Version("0.1.1")
HEAVY = {"torch", "lightning", "ray", "av"}


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


WORKSPACE_VERSION: str = _toml(ROOT / "pyproject.toml")["project"]["version"]
OURS = {canonicalize_name(_toml(p)["project"]["name"]) for p in MEMBERS}
_release = Version(WORKSPACE_VERSION).release
#: What a requirement on another workspace package must say: the workspace's minor series.
SERIES = SpecifierSet(f">={_release[0]}.{_release[1]},<{_release[0]}.{_release[1] + 1}")


def _run(*cmd: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    res = run_tree(cmd, cwd=cwd, env=env)
    assert res.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    )
    return res.stdout


def test_workspace_version_sorts_after_the_old_ferroload_on_pypi() -> None:
    assert Version(WORKSPACE_VERSION) > OLD_PYPI_FERROLOAD
    assert ferroload.__version__ == WORKSPACE_VERSION


@pytest.mark.parametrize("pyproject", MEMBERS, ids=lambda p: p.parent.name)
def test_member_takes_the_workspace_version(pyproject: Path) -> None:
    config = _toml(pyproject)
    project = config["project"]
    assert "version" not in project, "the version is set once, in the root pyproject.toml"
    assert "version" in project.get("dynamic", [])
    source = config["tool"]["hatch"]["version"]
    assert (pyproject.parent / source["path"]).resolve() == ROOT / "pyproject.toml"
    # hatchling's regex source: the pattern finds the root project's version
    root_text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(source["pattern"], root_text, flags=re.MULTILINE)
    assert found is not None and found["version"] == WORKSPACE_VERSION
    # uv rebuilds an editable member's metadata when the root's version changes
    assert {"file": "../../pyproject.toml"} in config["tool"]["uv"]["cache-keys"]
    installed = version(project["name"])
    assert installed == WORKSPACE_VERSION, f"{project['name']} {installed} installed: run uv sync"


@pytest.mark.parametrize("pyproject", MEMBERS, ids=lambda p: p.parent.name)
def test_requirements_on_workspace_packages_pin_the_workspace_series(pyproject: Path) -> None:
    project = _toml(pyproject)["project"]
    lines = list(project.get("dependencies", []))
    lines += [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
    reqs = [Requirement(line) for line in lines]
    for req in (r for r in reqs if canonicalize_name(r.name) in OURS):
        assert req.specifier == SERIES, f"{pyproject}: {req} must pin {SERIES}"
        assert WORKSPACE_VERSION in req.specifier
        assert str(OLD_PYPI_FERROLOAD) not in req.specifier


def _requires(wheel: Path) -> list[Requirement]:
    """The plain (no extra) requirements in a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(name).decode())
    reqs = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _closure(root: NormalizedName, wheels: dict[NormalizedName, Path]) -> set[NormalizedName]:
    """`root` and the workspace distributions it requires, directly or not."""
    seen: set[NormalizedName] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n for r in _requires(wheels[name]) if (n := canonicalize_name(r.name)) in OURS]
    return seen


def _quickstart() -> str:
    """The first python block under the README's Quickstart heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quickstart\n", 1)[1]
    found = re.search(r"^```python\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert found is not None, "README.md's Quickstart has no python block"
    return found[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every workspace package built as users get it: an sdist, and a wheel from the sdist."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH; the README's set-up command installs it (pip install uv)")
    out = tmp_path_factory.mktemp("dist")
    _run(uv, "build", "--all-packages", "--quiet", "--out-dir", out)
    return out


@pytest.mark.slow
def test_every_package_builds_an_sdist_and_a_wheel(dist: Path) -> None:
    sdists = {parse_sdist_filename(p.name) for p in dist.glob("*.tar.gz")}
    wheels = {parse_wheel_filename(p.name)[:2] for p in dist.glob("*.whl")}
    expected = {(name, Version(WORKSPACE_VERSION)) for name in OURS}
    assert sdists == expected
    assert wheels == expected


@pytest.mark.slow
def test_pip_install_ferroload_gives_the_command_and_the_quickstart_runs(
    dist: Path, tmp_path: Path
) -> None:
    wheels = {parse_wheel_filename(p.name)[0]: p for p in dist.glob("*.whl")}
    needed = _closure(canonicalize_name("ferroload"), wheels)
    assert canonicalize_name("ferroload-cli") in needed  # the `ferroload` command
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, env=env)
    python = venv / "bin" / "python"
    pip = (python, "-m", "pip", "--disable-pip-version-check")
    # Each of our distributions is given as a file, so pip takes none of them from an index
    # (PyPI's `ferroload` is another project); an index supplies third-party packages only.
    _run(*pip, "install", "-q", *(wheels[n] for n in sorted(needed)), env=env)
    listed = json.loads(_run(*pip, "list", "--format", "json", env=env))
    installed = {canonicalize_name(d["name"]): d["version"] for d in listed}
    assert {n: installed.get(n) for n in needed} == dict.fromkeys(needed, WORKSPACE_VERSION)
    assert not installed.keys() & HEAVY, f"pip install ferroload pulled {installed.keys() & HEAVY}"

    out = _run(venv / "bin" / "ferroload", "--version", cwd=tmp_path, env=env)
    assert out.strip() == f"ferroload {WORKSPACE_VERSION}"
    where = _run(python, "-c", "import ferroload; print(ferroload.__file__)", cwd=tmp_path, env=env)
    assert Path(where.strip()).is_relative_to(venv), "ferroload was not imported from the wheel"

    script = tmp_path / "quickstart.py"
    check = f"import sys\nprint(sorted(set(sys.modules) & set({sorted(HEAVY)!r})))\n"
    script.write_text(_quickstart() + "\n" + check, encoding="utf-8")
    out = _run(python, script, cwd=tmp_path, env=env)
    assert out.strip().splitlines()[-1] == "[]", "the Quickstart imported a heavy framework"
