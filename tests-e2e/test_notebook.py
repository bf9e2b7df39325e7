"""notebooks/ferroload_demo.ipynb runs from top to bottom, headless, and is committed clean.

The notebook runs with nbclient in a kernel of this interpreter (a kernelspec written for
the test into a temporary JUPYTER_PATH, so a system or user `python3` kernel is never
picked), in a fresh temporary working directory; any cell error fails the test. The
committed file carries no outputs and no execution counts: they would go stale, and a
diff of the notebook should show only what a person changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "ferroload_demo.ipynb"
#: The name of the kernelspec this test writes; unlike `python3`, no system has one.
KERNEL = "ferroload-test-python"


def _cells() -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return cells


def test_committed_notebook_has_no_outputs() -> None:
    """Outputs are stripped in git: no outputs, no execution counts, no timing metadata."""
    code = [c for c in _cells() if c["cell_type"] == "code"]
    assert code, "the notebook has no code cells"
    dirty = [
        i
        for i, c in enumerate(code)
        if c.get("outputs") or c.get("execution_count") is not None or "execution" in c["metadata"]
    ]
    assert not dirty, (
        f"code cells {dirty} of {NOTEBOOK.relative_to(ROOT)} keep outputs or execution counts: "
        "clear them before committing (Jupyter: Edit > Clear Outputs of All Cells, or "
        "`jupyter nbconvert --clear-output --inplace notebooks/ferroload_demo.ipynb`)"
    )


def test_notebook_walks_through_every_step() -> None:
    """The walk-through the docs promise: write, SQL, a grid, training, a layer, versions."""
    source = "\n".join("".join(c["source"]) for c in _cells() if c["cell_type"] == "code")
    for needle in (
        "ferroload.Writer(",
        "duckdb.sql(",
        "/index/part-*.parquet",
        "ds.sql(",
        "ds.subset(",
        "ferroload.codec.decode_image(",
        "plt.subplots(",
        'out="torch"',
        "ferroload.make_loader(",
        ".map(",
        ".versions()",
        "version=1)",
    ):
        assert needle in source, f"the notebook no longer has {needle!r}"


def test_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell runs without an error, in a kernel of this interpreter."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:  # the dev dependency group installs both
        pytest.skip(
            f"nbclient or nbformat is not installed ({exc}): install the workspace's dev "
            "dependency group (`uv sync`), which has nbclient, nbformat and ipykernel"
        )
    kernels = tmp_path / "jupyter" / "kernels" / KERNEL
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "ferroload tests",
                "language": "python",
            }
        )
    )
    # The kernelspec, the kernel's connection files and IPython's profile all live in
    # tmp_path: nothing is read from or written to the user's Jupyter or IPython folders.
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    workdir = tmp_path / "work"
    workdir.mkdir()

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's tempfile.mkdtemp()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # One more cell, run last: which interpreter ran the kernel.
    nb.cells.append(nbformat.v4.new_code_cell("import sys\n\nprint(sys.executable)"))
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=300,  # per cell; the whole notebook takes seconds on an idle machine
        allow_errors=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a cell did not run"
    printed = "".join(
        o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream"
    )
    assert code[-1].outputs[0]["text"].strip() == sys.executable, "not this interpreter's kernel"
    assert "held-out accuracy" in printed
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2, f"expected the two image grids, got {len(images)} images"
    assert "[(1, 'create'), (2, 'layer'), (3, 'append'), (4, 'layer')]" in printed
    assert list(workdir.iterdir()) == [], "the notebook wrote into its working directory"
