"""Parsing of dataset URIs into a backend kind and location."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from ferroload_store._errors import InvalidURIError

BackendKind = Literal["local", "memory", "object"]

#: URI schemes handed to obstore's own URL parser (it knows every form of each).
OBJECT_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "http", "https"}
)

#: Other spellings of a scheme (fsspec's `gcs://` is `gs://`), made canonical.
_SPELLINGS = {"gcs": "gs"}


@dataclass(frozen=True)
class ParsedURI:
    """Where a URI points.

    Attributes:
        kind: `local` (a directory), `memory` (a named in-process store) or `object`.
        location: the absolute directory for `local`, the store name for `memory`,
            the URI itself for `object`.
        prefix: key prefix inside a `memory` store ("" otherwise).
        uri: the canonical URI (`file:///abs/path`, `memory://name/prefix`, or as given).
    """

    kind: BackendKind
    location: str
    prefix: str
    uri: str


def parse_uri(uri: str | os.PathLike[str]) -> ParsedURI:
    """Tell which backend serves `uri` and where inside it the data lives.

    Plain paths and `file://` URIs are local; `memory://name/prefix` is an in-process store
    shared by every `open_store` call in this process with the same name; `s3://` (and
    `s3a://`), `gs://` (and fsspec's `gcs://`, made `gs://`), `az://` (and the other Azure
    forms: `azure://`, `abfs://`, `abfss://`, `adl://`), `http(s)://` go to obstore.

    Raises:
        InvalidURIError: for an empty URI, an unknown scheme, or a `.`/`..` segment in a
            memory or object-store URI (keys there are not paths: nothing resolves them).
    """
    text = os.fspath(uri)
    if not text or not text.strip():
        raise InvalidURIError(text, "empty URI")
    if "\x00" in text:
        raise InvalidURIError(text, "NUL character in URI")
    split = urlsplit(text)
    scheme = split.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = Path(text).expanduser().resolve()
        return ParsedURI("local", str(path), "", path.as_uri())
    if scheme == "file":
        if split.netloc not in ("", "localhost"):
            raise InvalidURIError(text, "file:// URIs must not name a host")
        path = Path(unquote(split.path)).resolve()
        return ParsedURI("local", str(path), "", path.as_uri())
    if scheme in ("memory", *OBJECT_SCHEMES):
        _refuse_dot_segments(text, f"{split.netloc}/{split.path}")
    if scheme == "memory":
        name = split.netloc
        if not name:
            raise InvalidURIError(text, "memory:// URIs need a store name, e.g. memory://tests/ds")
        prefix = split.path.strip("/")
        canonical = f"memory://{name}/{prefix}".rstrip("/")
        return ParsedURI("memory", name, prefix + "/" if prefix else "", canonical)
    if scheme in OBJECT_SCHEMES:
        if not split.netloc:
            raise InvalidURIError(text, f"{scheme}:// URIs need a bucket or container")
        if scheme in _SPELLINGS:  # fsspec's names that obstore's parser does not know
            text = _SPELLINGS[scheme] + text[len(scheme) :]
        return ParsedURI("object", text.rstrip("/"), "", text.rstrip("/"))
    raise InvalidURIError(
        text,
        f"unknown scheme {scheme!r}; use a local path, file://, memory://, "
        "s3://, gs://, az:// or https://",
    )


def _refuse_dot_segments(text: str, path: str) -> None:
    """Object-store keys have no relative segments; obstore refuses them only at the first
    request, with a bare ValueError. Refuse them here, naming the URI."""
    segments = unquote(path).split("/")
    if "." in segments or ".." in segments:
        raise InvalidURIError(text, "'.' and '..' segments are not allowed in object-store URIs")
