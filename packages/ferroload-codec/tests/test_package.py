from __future__ import annotations

import subprocess
import sys

import ferroload_codec


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_codec.__version__ == "0.1.0"
    assert ferroload_codec.__all__ == sorted(ferroload_codec.__all__)


def test_import_pulls_no_heavy_framework() -> None:
    code = "import sys, ferroload_codec; print(sorted({'torch', 'ray', 'av', 'lightning'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
