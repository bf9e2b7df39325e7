"""JPEG test helpers shared by the image tests: the system's libjpeg-turbo, or a skip."""

from __future__ import annotations

import pytest

from ferroload_codec._backends import turbojpeg
from ferroload_codec._turbo import Turbo


def system_turbojpeg() -> Turbo:
    """The system's libjpeg-turbo binding, or skip (it is a system package)."""
    tj = turbojpeg()
    if tj is None:
        pytest.skip(
            "service not available: libturbojpeg is not installed: install it with "
            "`apt-get install libturbojpeg0` (.ci/run does)"
        )
    return tj
