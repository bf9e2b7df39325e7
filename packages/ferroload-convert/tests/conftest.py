from __future__ import annotations

import sys
from pathlib import Path

# The helpers in _convert_data.py are imported by name (pytest runs with importlib mode).
TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
