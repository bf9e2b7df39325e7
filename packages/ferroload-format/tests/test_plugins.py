"""Higher packages reach the format only through the `ferroload.plugins` entry points:
loaded on first need, with an install hint when nothing is registered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ferroload_format import Dataset, Writer


def _run(code: str, *args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    with Writer(root, "plugins") as w:
        w.add("s0", None, {"label": 1})
    return root


# Nothing registered in the group: what an install of ferroload-format alone sees.
_NOTHING_REGISTERED = """
    import importlib.metadata as md
    real = md.entry_points
    md.entry_points = lambda **kw: (
        md.EntryPoints([]) if kw.get("group") == "ferroload.plugins" else real(**kw)
    )
    import sys
    from ferroload_format import Dataset, gc
    ds = Dataset.open(sys.argv[1])
    for call in (
        lambda: Dataset.open("catalog:demo"),
        lambda: gc("catalog:demo"),
        lambda: ds.map(lambda b: b, inputs=["label"], outputs={"x": "int64"}, layer="x"),
    ):
        try:
            call()
        except ImportError as exc:
            print(exc)
"""


def test_install_hints_when_nothing_is_registered(dataset: Path) -> None:
    assert _run(_NOTHING_REGISTERED, str(dataset)) == [
        "opening 'catalog:demo' needs the ferroload-catalog package: pip install "
        "ferroload-catalog (or pip install ferroload)",
        "opening 'catalog:demo' needs the ferroload-catalog package: pip install "
        "ferroload-catalog (or pip install ferroload)",
        "Dataset.map needs the ferroload-map package: pip install ferroload-map "
        "(or pip install ferroload)",
    ]


def test_registered_but_not_importable_keeps_the_hint(dataset: Path) -> None:
    lines = _run(
        """
        import importlib.metadata as md
        import sys
        ep = md.EntryPoint("dataset.map", "no_such_module_here:map_dataset", "ferroload.plugins")
        md.entry_points = lambda **kw: md.EntryPoints([ep])
        from ferroload_format import Dataset
        try:
            Dataset.open(sys.argv[1]).map(lambda b: b, inputs=[], outputs={}, layer="x")
        except ImportError as exc:
            print(type(exc.__cause__).__name__, exc)
        """,
        str(dataset),
    )
    assert len(lines) == 1
    assert lines[0].startswith(
        "ModuleNotFoundError Dataset.map needs the ferroload-map package: pip install"
    )
    assert "no_such_module_here" in lines[0]


def test_a_registered_resolver_opens_its_scheme(dataset: Path) -> None:
    # a plugin of this test's own: `here:` URIs resolve to the dataset
    lines = _run(
        """
        import importlib.metadata as md
        import sys, types
        mod = types.ModuleType("here_plugin")
        mod.resolve = lambda uri, options: (sys.argv[1], {"seen": uri})
        sys.modules["here_plugin"] = mod
        ep = md.EntryPoint("uri.here", "here_plugin:resolve", "ferroload.plugins")
        md.entry_points = lambda **kw: md.EntryPoints([ep])
        import ferroload_format
        from ferroload_format import Dataset
        print(len(Dataset.open("here:anything")))
        try:
            Dataset.open("nothere:x/y")
        except ValueError as exc:
            print(type(exc).__name__)
        """,
        str(dataset),
    )
    # an unregistered scheme goes to the store, which refuses it, as before
    assert lines == ["1", "InvalidURIError"]


def test_import_and_open_load_no_plugin(dataset: Path) -> None:
    lines = _run(
        """
        import importlib.metadata as md
        import sys
        calls = []
        real = md.entry_points
        md.entry_points = lambda **kw: calls.append(kw) or real(**kw)
        from ferroload_format import Dataset
        Dataset.open(sys.argv[1]).get(0)
        print(len(calls), "ferroload_map" in sys.modules, "ferroload_catalog" in sys.modules)
        """,
        str(dataset),
    )
    assert lines == ["0 False False"]


def test_open_of_a_plain_path_is_unchanged(dataset: Path) -> None:
    assert len(Dataset.open(str(dataset))) == 1
    assert len(Dataset.open(dataset)) == 1
