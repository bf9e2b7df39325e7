"""Without torch, the torch adapters say how to install it (as the Lightning ones do)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "statement",
    [
        "from ferroload.loader.torch import FerroTorchDataset",
        "import ferroload_loader.torch",
        "import ferroload; ferroload.loader.torch",
    ],
)
def test_torch_adapters_without_torch_name_the_install(statement: str) -> None:
    code = f"import sys; sys.modules['torch'] = None\n{statement}"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "needs torch" in last and "pip install 'ferroload-loader[torch]'" in last, last
