"""Without torch, the torch adapters say how to install it (as the Lightning ones do)."""

from __future__ import annotations

import subprocess
import sys


def test_torch_adapters_without_torch_name_the_install() -> None:
    code = "import sys; sys.modules['torch'] = None\nimport ferroload_loader.torch"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1
    assert "needs torch" in last and "pip install 'ferroload-loader[torch]'" in last, last
