"""Which accelerations are present, and a single warning when a fast path is missing.

Every optional library is imported on first use, never at `import ferroload_codec`.
`FERROLOAD_CODEC_DISABLE` (comma-separated: `turbojpeg`, `simplejpeg`, `opencv`,
`imagecodecs`) turns a fast path off, to compare or to work around a broken library
(`turbojpeg` alone simulates a machine without the system's libturbojpeg).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from types import ModuleType
from typing import Any

from ferroload_codec._turbo import JpegLib, SimpleJpeg, Turbo

logger = logging.getLogger(__name__)

_warned: set[str] = set()
_warn_lock = threading.Lock()


def _disabled(name: str) -> bool:
    return name in {
        part.strip().lower() for part in os.environ.get("FERROLOAD_CODEC_DISABLE", "").split(",")
    }


def _optional(module: str, key: str) -> ModuleType | None:
    if _disabled(key):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


@functools.cache
def opencv() -> Any:
    """OpenCV, set to one internal thread (ferroload's pool does the parallel work)."""
    cv2 = _optional("cv2", "opencv")
    if cv2 is not None:
        cv2.setNumThreads(1)
    return cv2


@functools.cache
def imagecodecs() -> Any:
    """imagecodecs when it has libspng, else None."""
    mod = _optional("imagecodecs", "imagecodecs")
    return mod if mod is not None and hasattr(mod, "spng_decode") else None


@functools.cache
def webp_fallback() -> Any:
    """imagecodecs, to decode WebP where Pillow was built without libwebp (a source build
    of Pillow-SIMD on a machine without its headers); None where Pillow reads WebP."""
    from PIL import features

    if features.check_module("webp"):
        return None
    mod = _optional("imagecodecs", "imagecodecs")
    return mod if mod is not None and getattr(mod, "WEBP", None) and mod.WEBP.available else None


#: The soname of libjpeg-turbo's TurboJPEG library on Linux.
TURBOJPEG_SONAME = "libturbojpeg.so.0"
# JPEG backends are looked up once, by one thread: the decode threads of a loader ask for
# them together on the first JPEG, and PyTurboJPEG's search runs `ldconfig` (20-40 ms)
_jpeg_lock = threading.Lock()


def _turbojpeg_path(mod: ModuleType) -> str:
    """The TurboJPEG library to load: on Linux the soname, when the dynamic loader finds
    it (what `ctypes.util.find_library` would answer, from `ldconfig -p`, without running
    `ldconfig`); else where PyTurboJPEG's own search finds it (raises when it cannot)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(TURBOJPEG_SONAME)
        except OSError:
            pass
        else:
            return TURBOJPEG_SONAME
    finder = mod.TurboJPEG()  # raises when libturbojpeg cannot be loaded
    return str(finder._TurboJPEG__find_turbojpeg())


@functools.cache
def _turbojpeg() -> Turbo | None:
    mod = _optional("turbojpeg", "turbojpeg")
    if mod is None:
        return None
    try:
        return Turbo(_turbojpeg_path(mod))
    except (OSError, RuntimeError, AttributeError) as exc:
        logger.info("libturbojpeg not usable: %s", exc)
        return None


def turbojpeg() -> Turbo | None:
    """libjpeg-turbo where PyTurboJPEG is installed and the library is found (None
    otherwise); looked up once."""
    with _jpeg_lock:
        return _turbojpeg()


@functools.cache
def _simplejpeg() -> SimpleJpeg | None:
    mod = _optional("simplejpeg", "simplejpeg")
    return SimpleJpeg(mod) if mod is not None else None


def simplejpeg() -> SimpleJpeg | None:
    """The libjpeg-turbo bundled in simplejpeg's wheel (None when it is not installed)."""
    with _jpeg_lock:
        return _simplejpeg()


_jpeg_cache: list[JpegLib | None] = []


def jpeg() -> JpegLib | None:
    """The JPEG fast path: the system's libjpeg-turbo (through PyTurboJPEG) where it is
    installed, else the one simplejpeg bundles, else None (Pillow decodes). Looked up
    once, by the first caller (others wait for it)."""
    if _jpeg_cache:
        return _jpeg_cache[0]
    with _jpeg_lock:
        if not _jpeg_cache:
            _jpeg_cache.append(_turbojpeg() or _simplejpeg())
    return _jpeg_cache[0]


@functools.cache
def pil_distribution() -> str:
    """`pillow-simd` or `pillow`: which distribution provides PIL."""
    dists = packages_distributions().get("PIL", [])
    return "pillow-simd" if "pillow-simd" in [d.lower() for d in dists] else "pillow"


def _libjpeg_turbo_version(tj: Turbo) -> str:
    return os.path.basename(os.path.realpath(tj.lib_path))


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def backends() -> dict[str, str | None]:
    """Which codec libraries are active, so you can tell why decoding is fast or slow.

    Returns:
        One entry per role; None where the fast library is missing (Pillow then does the
        work). `jpeg` names the libjpeg-turbo in use: the system's (`system
        libturbojpeg.so… (PyTurboJPEG …)`) when installed, else the one bundled in
        simplejpeg's wheel (`bundled libjpeg-turbo (simplejpeg …)`).

    Examples:
        >>> info = backends()
        >>> "jpeg" in info and "video" in info
        True
    """
    tj = turbojpeg()
    sj = simplejpeg()
    cv2 = opencv()
    ic = imagecodecs()
    pil = pil_distribution()
    try:
        import soundfile

        audio: str | None = (
            f"libsndfile {soundfile.__libsndfile_version__} via soundfile {soundfile.__version__}"
        )
    except (ImportError, OSError):
        audio = None
    try:
        import av

        video: str | None = f"PyAV {av.__version__}"
    except ImportError:
        video = None
    return {
        "jpeg": _jpeg_path(tj, sj),
        "png": f"libspng via imagecodecs {ic.__version__}" if ic is not None else None,
        "resize": f"OpenCV {cv2.__version__}" if cv2 is not None else None,
        "pil": f"{'Pillow-SIMD' if pil == 'pillow-simd' else 'Pillow'} {_dist_version(pil)}",
        "webp": _webp_path(),
        "audio": audio,
        "resample": f"soxr {_dist_version('soxr')}" if _dist_version("soxr") else None,
        "video": video,
    }


def _jpeg_path(tj: Turbo | None, sj: SimpleJpeg | None) -> str | None:
    if tj is not None:
        return f"system {_libjpeg_turbo_version(tj)} (PyTurboJPEG {_dist_version('pyturbojpeg')})"
    if sj is not None:
        return f"bundled libjpeg-turbo (simplejpeg {sj.version})"
    return None


def _webp_path() -> str | None:
    from PIL import features

    if features.check_module("webp"):
        return f"libwebp {features.version_module('webp')} via Pillow"
    ic = webp_fallback()
    return f"libwebp via imagecodecs {ic.__version__} (Pillow has no WebP)" if ic else None


def warn_slow_path(what: str, missing: str) -> None:
    """Warn once per process that `what` runs on a slower path because `missing` is absent."""
    with _warn_lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(
        f"ferroload_codec: {what} uses Pillow because {missing} is not available; "
        "decoding is slower (see ferroload_codec.backends())",
        RuntimeWarning,
        stacklevel=3,
    )


def _png_libs() -> None:
    ic = imagecodecs()
    if ic is not None:  # imagecodecs loads each codec's module on first access
        getattr(ic, "spng_decode", None)
        getattr(ic, "tiff_decode", None)


def _jpeg_libs() -> None:
    jpeg()
    opencv()  # resizes, and tiny JPEGs' lean path checks for it


#: What decoding an image of each stored extension loads first (`preload`).
_PRELOADS = {"png": _png_libs, "jpg": _jpeg_libs, "jpeg": _jpeg_libs}
_preloading: dict[Callable[[], None], threading.Thread] = {}
_preload_lock = threading.Lock()


def _join_preloads() -> None:
    for t in list(_preloading.values()):
        if t.is_alive() and t is not threading.current_thread():
            t.join()


def preload(ext: str) -> bool:
    """Start loading, on a background thread, the libraries that decoding images stored
    with extension `ext` needs (imagecodecs' libspng and libtiff for `png`; the JPEG
    binding and OpenCV for `jpg`), so that a loader's first batch does not wait for
    their imports (~15 ms for PNG, ~30 ms for JPEG) after reading its index. Once per
    format and process; returns whether it started one. A fork waits for it first
    (a child forked while another thread imports would inherit a held import lock)."""
    fn = _PRELOADS.get(ext.lower())
    if fn is None:
        return False
    with _preload_lock:
        if fn in _preloading:
            return False
        if not _preloading and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_join_preloads)
        t = _preloading[fn] = threading.Thread(
            target=fn, name=f"ferroload-preload-{fn.__name__}", daemon=True
        )
    t.start()
    return True
