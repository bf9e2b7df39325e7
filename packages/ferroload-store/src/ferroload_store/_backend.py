"""Building the obstore stores and request engine of an object-store URI from
`storage_options` and `IOOptions`.

`storage_options` holds obstore's configuration keys (`endpoint`, `region`,
`access_key_id`, …). HTTP client keys (`allow_http`, `timeout`, `proxy_url`, …) may sit
among them or under `client_options`; they are gathered into obstore's `client_options`.
`retry_config` passes through unchanged.

Two obstore behaviours shape this module:

* obstore replaces *all* the client options it read from the environment (`AWS_ALLOW_HTTP`,
  …) as soon as `client_options` is given; since the store always gives some (the
  timeouts), the environment's client keys are read here the way obstore reads them.
* obstore retries failed requests itself (10 times by default). The store turns that off
  for the requests it retries itself, so that `StoreStats.retries` is the whole truth;
  only multipart uploads, which cannot be replayed from Python, keep obstore's retries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import obstore

from ferroload_store._counters import StoreStats
from ferroload_store._errors import StoreError
from ferroload_store._options import IOOptions, parse_duration
from ferroload_store._remote import RemoteEngine, is_panic
from ferroload_store._uri import ParsedURI

#: obstore's HTTP client options (`obstore.store.ClientConfig`).
CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_max_frame_size",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "root_certificate",
        "timeout",
        "user_agent",
    }
)
_ENV_PREFIXES = ("aws_", "google_", "azure_")


def env_prefix(location: str) -> str | None:
    """The environment variable prefix obstore reads for the store at `location`."""
    split = urlsplit(location)
    scheme, host = split.scheme.lower(), split.netloc.lower()
    if scheme in ("s3", "s3a") or (scheme == "https" and host.endswith("amazonaws.com")):
        return "AWS_"
    if scheme in ("gs", "gcs"):
        return "GOOGLE_"
    if scheme in ("az", "azure", "abfs", "abfss", "adl") or (
        scheme == "https" and host.endswith(("windows.net", "fabric.microsoft.com", "azure.com"))
    ):
        return "AZURE_"
    return None


def _client_key(key: str) -> str | None:
    """The client option `key` names (with or without a cloud prefix), or None."""
    k = key.lower()
    if k in CLIENT_KEYS:
        return k
    for prefix in _ENV_PREFIXES:
        if k.startswith(prefix) and k[len(prefix) :] in CLIENT_KEYS:
            return k[len(prefix) :]
    return None


def obstore_kwargs(
    location: str, storage_options: Mapping[str, Any], io: IOOptions
) -> dict[str, Any]:
    """Keyword arguments of `obstore.store.from_url` for `location`.

    Returns:
        `{"config": {...}, "client_options": {...}, "retry_config": {...}}`.
    """
    opts = dict(storage_options)
    client: dict[str, Any] = {}
    for key, value in dict(opts.pop("client_options", None) or {}).items():
        client[_client_key(key) or key] = value
    retry = opts.pop("retry_config", None)
    config: dict[str, Any] = {}
    for key, value in opts.items():
        ck = _client_key(key)
        if ck is not None:
            client.setdefault(ck, value)
        else:
            config[key] = value
    prefix = env_prefix(location)
    if prefix is not None:
        for key in CLIENT_KEYS:
            value = os.environ.get(prefix + key.upper())
            if value is not None:
                client.setdefault(key, value)
    client.setdefault("timeout", timedelta(seconds=io.timeout_seconds))
    client.setdefault("connect_timeout", timedelta(seconds=io.connect_timeout_seconds))
    for key in ("allow_http", "allow_invalid_certificates"):
        if isinstance(client.get(key), str):
            client[key] = client[key].strip().lower() in ("1", "true", "yes", "on")
    return {
        "config": config,
        "client_options": client,
        "retry_config": dict(retry) if retry is not None else {"max_retries": 0},
    }


def user_sets_retry_config(storage_options: Mapping[str, Any]) -> bool:
    """True when the caller configured obstore's own retries."""
    return storage_options.get("retry_config") is not None


def obstore_retry_config(io: IOOptions) -> dict[str, Any]:
    """obstore's retry settings matching `io` (for the requests obstore retries itself)."""
    return {
        "max_retries": io.retries,
        "backoff": {
            "init_backoff": timedelta(seconds=max(io.backoff, 0.001)),
            "max_backoff": timedelta(seconds=max(io.max_backoff, io.backoff, 0.001)),
            "base": 2,
        },
        "retry_timeout": timedelta(minutes=3),
    }


def duration_text(value: Any) -> str:
    """A client-option duration as `12.5s` (or as given, when it cannot be read)."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return str(value)
    return f"{seconds:g}s"


def open_obstore(parsed: ParsedURI, kwargs: Mapping[str, Any]) -> Any:
    """The obstore store for an object-store URI.

    Raises:
        StoreError: if obstore rejects the URI or the configuration.
    """
    config = dict(kwargs.get("config") or {})
    call: dict[str, Any] = {
        "client_options": kwargs.get("client_options"),
        "retry_config": kwargs.get("retry_config"),
    }
    if config:
        call["config"] = config
    try:
        return obstore.store.from_url(parsed.location, **call)
    except BaseException as exc:
        if not (isinstance(exc, Exception) or is_panic(exc)):  # a bad key can make it panic
            raise
        raise StoreError(
            f"cannot open {parsed.uri}: {' '.join(str(exc).split())[:500]}; check "
            "storage_options (obstore configuration keys such as endpoint, region, "
            "access_key_id)",
            uri=parsed.uri,
        ) from exc


def remote_engine(
    parsed: ParsedURI, storage_options: Mapping[str, Any], io: IOOptions, stats: StoreStats
) -> RemoteEngine:
    """The request engine of an object-store URI (its obstore store built now, so that a
    bad configuration fails at open), obstore's own retries off.

    Raises:
        StoreError: if obstore rejects the URI or the configuration.
    """
    kwargs = obstore_kwargs(parsed.location, storage_options, io)
    client = kwargs["client_options"]
    timeouts = (
        f"timeout={duration_text(client.get('timeout'))}, "
        f"connect_timeout={duration_text(client.get('connect_timeout'))}"
    )
    return RemoteEngine(
        lambda: open_obstore(parsed, kwargs), uri=parsed.uri, io=io, stats=stats, timeouts=timeouts
    )


def open_writer_obstore(
    parsed: ParsedURI, storage_options: Mapping[str, Any], io: IOOptions
) -> Any:
    """An obstore store of an object-store URI that retries on its own (with `io`'s
    retries and backoff, unless `storage_options` configure them), for multipart
    uploads: a stream cannot be replayed from here."""
    kwargs = obstore_kwargs(parsed.location, storage_options, io)
    if not user_sets_retry_config(storage_options):
        kwargs["retry_config"] = obstore_retry_config(io)
    return open_obstore(parsed, kwargs)
