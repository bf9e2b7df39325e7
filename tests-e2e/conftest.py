from __future__ import annotations

import sys
from pathlib import Path

# Shared test data helpers (_colours.py) are imported by name (pytest runs with importlib mode).
HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
