from __future__ import annotations

from importlib.metadata import entry_points, version

import ferroload_catalog


def test_version_comes_from_the_distribution() -> None:
    assert ferroload_catalog.__version__ == version("ferroload-catalog")
    assert all(
        hasattr(ferroload_catalog, name) for name in ferroload_catalog.__all__
    )  # order: ruff's RUF022


def test_registers_catalog_uris_for_the_format() -> None:
    # ferroload_format never imports this package: it finds `catalog:` URIs here
    from ferroload_catalog._uri import resolve_catalog_uri

    (ep,) = entry_points(group="ferroload.plugins", name="uri.catalog")
    assert ep.load() is resolve_catalog_uri
    assert ep.dist is not None and ep.dist.name == "ferroload-catalog"
