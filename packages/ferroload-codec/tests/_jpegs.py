"""JPEG test helpers shared by the image tests: the system's libjpeg-turbo (or a skip), the
decoder's JPEG binding switched, and the thread caps of its batches."""

from __future__ import annotations

from typing import Any

import pytest

import ferroload_codec._image as image_module
from ferroload_codec._backends import simplejpeg, turbojpeg
from ferroload_codec._pool import DecodePool
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


def use_jpeg_backend(which: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the image decoder's JPEG binding the system's libjpeg-turbo (`system`) or the
    one simplejpeg's wheel bundles (`bundled`), for the test; returns `which`."""
    if which == "system":
        tj = system_turbojpeg()
        monkeypatch.setattr(image_module, "jpeg", lambda: tj)
    else:
        sj = simplejpeg()
        assert sj is not None  # a dependency of ferroload-codec
        monkeypatch.setattr(image_module, "jpeg", lambda: sj)
    return which


def thread_caps(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """Record the `threads` cap of every `DecodePool.run` the image decoder makes (None:
    all the pool's threads), in order."""
    caps: list[int | None] = []
    run = DecodePool.run

    def spy(self: Any, n: int, fn: Any, **kw: Any) -> None:
        caps.append(kw.get("threads"))
        run(self, n, fn, **kw)

    monkeypatch.setattr(DecodePool, "run", spy)
    return caps
