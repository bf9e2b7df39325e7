"""What higher packages add to the format, found through the `ferroload.plugins` entry points.

The format never imports a package above it (docs/architecture.md, Layering). A package
that adds something registers it in its `pyproject.toml`, and the format loads it the
first time it is needed (importing `ferroload_format` reads no entry point):

```toml
[project.entry-points."ferroload.plugins"]
"uri.catalog" = "ferroload_catalog._uri:resolve_catalog_uri"  # Dataset.open("catalog:…")
"dataset.map" = "ferroload_map:map_dataset"                   # Dataset.map(fn, …)
```

- `uri.<scheme>`: a resolver `(uri, storage_options) -> (uri, storage_options)` that
  `Dataset.open` and `gc` call for a `<scheme>:…` URI (one without `//` after the colon).
- `dataset.<method>`: the function `Dataset.<method>(…)` calls as `function(dataset, …)`.
- `loader.rs011`: the module of ferroload-rs 0.1.1's loader names, which
  `ferroload_loader` serves lazily to 0.1.1's scripts (the facade's `ferroload.compat`).

When nothing is registered for a name, using it raises `ImportError` with the
`pip install` that registers it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUP = "ferroload.plugins"
# the distributions that register the names the format knows of (for the install hint)
_PROVIDERS = {
    "uri.catalog": "ferroload-catalog",
    "dataset.map": "ferroload-map",
    "loader.rs011": "ferroload",
}
# a URI scheme a plugin may resolve: two characters or more (not a Windows drive), and
# no `//` after the colon (those are the store's URLs)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


@cache
def _registered() -> dict[str, EntryPoint]:
    """The group's entry points by name (the first one wins when two share a name)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)
    return found


@cache
def _load(name: str) -> Any:
    return _registered()[name].load()


def plugin(name: str, *, needed_by: str) -> Any:
    """The object registered as `name`, imported on first use.

    Args:
        name: the entry point's name, e.g. `"dataset.map"`.
        needed_by: what needs it, for the error (e.g. `"Dataset.map"`).

    Raises:
        ImportError: when nothing is registered as `name`, or it cannot be imported;
            the message says which package to install.
    """
    dist = _PROVIDERS.get(name)
    hint = (
        f"{needed_by} needs the {dist} package: pip install {dist} (or pip install ferroload)"
        if dist
        else f"{needed_by} needs a package that registers {name!r} in the {GROUP!r} entry points"
    )
    if name not in _registered():
        raise ImportError(hint)
    try:
        return _load(name)
    except ImportError as exc:
        raise ImportError(f"{hint} ({exc})") from exc


def resolve_uri(
    uri: str, storage_options: Mapping[str, Any] | None
) -> tuple[str, Mapping[str, Any] | None]:
    """The URI and storage options that `uri` stands for.

    A `<scheme>:…` URI whose scheme a plugin resolves (`uri.<scheme>`, e.g. `catalog:name`)
    goes through it; anything else comes back unchanged, without reading an entry point
    unless it has such a scheme.

    Raises:
        ImportError: for a scheme the format knows of (`catalog:`) when nothing resolves it.
    """
    m = _SCHEME.match(uri)
    if m is None:
        return uri, storage_options
    name = f"uri.{m[1]}"
    if name not in _PROVIDERS and name not in _registered():
        return uri, storage_options
    resolver = plugin(name, needed_by=f"opening {uri!r}")
    resolved: tuple[str, Mapping[str, Any] | None] = resolver(uri, storage_options)
    return resolved
