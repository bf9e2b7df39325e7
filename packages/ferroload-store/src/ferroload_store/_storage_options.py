"""`storage_options` as obstore reads them: fsspec spellings translated, keys checked.

Users arrive with the options they gave fsspec (s3fs, gcsfs, adlfs): `key`, `secret`,
`anon`, `client_kwargs={"endpoint_url": …}`, `token="/path/sa.json"`,
`connection_string=…`. `normalize_storage_options` turns them into obstore's
configuration keys (the table in docs/store.md), spells every obstore key the one way
obstore documents it (`AWS_ENDPOINT_URL` and `endpoint_url` become `endpoint`), and
refuses a key that neither obstore nor the translation knows, naming the closest ones.
`Store` calls it where storage options enter, so every URI-taking API accepts both.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ferroload_store._backend import CLIENT_KEYS, _client_key, env_prefix
from ferroload_store._errors import StoreError

logger = logging.getLogger(__name__)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: obstore's S3 configuration keys (`obstore.store.S3Config`; `aws_` in front also works).
S3_KEYS = _words(
    "access_key_id bucket checksum_algorithm conditional_put "
    "container_authorization_token_file container_credentials_full_uri "
    "container_credentials_relative_uri copy_if_not_exists default_region "
    "disable_bulk_delete disable_tagging endpoint imdsv1_fallback metadata_endpoint "
    "region request_payer role_arn role_session_name s3_express secret_access_key "
    "server_side_encryption session_token skip_signature sse_bucket_key_enabled "
    "sse_customer_key_base64 sse_kms_key_id unsigned_payload "
    "virtual_hosted_style_request web_identity_token_file"
)
#: obstore's GCS configuration keys (`obstore.store.GCSConfig`; `google_` in front too).
GCS_KEYS = _words(
    "application_credentials base_url bearer_token bucket service_account "
    "service_account_key skip_signature"
)
#: obstore's Azure configuration keys (`obstore.store.AzureConfig`; `azure_` or
#: `azure_storage_` in front too).
AZURE_KEYS = _words(
    "account_key account_name authority_host client_id client_secret container_name "
    "credential_type disable_tagging encryption_key endpoint fabric_cluster_identifier "
    "fabric_session_token fabric_token_service_url fabric_workload_host "
    "federated_token_file msi_endpoint msi_resource_id object_id sas_key skip_signature "
    "tenant_id token use_azure_cli use_emulator use_fabric_endpoint"
)
#: Other names obstore accepts for a key -> the name it documents.
_ALIASES: dict[str, dict[str, str]] = {
    "s3": {"endpoint_url": "endpoint", "token": "session_token", "bucket_name": "bucket"},
    "gcs": {"service_account_path": "service_account", "bucket_name": "bucket"},
    "azure": {
        "access_key": "account_key",
        "master_key": "account_key",
        "sas_token": "sas_key",
        "bearer_token": "token",
        "authority_id": "tenant_id",
    },
}
_KEYS = {"s3": S3_KEYS, "gcs": GCS_KEYS, "azure": AZURE_KEYS}
_PREFIXES = {"s3": ("aws_",), "gcs": ("google_",), "azure": ("azure_storage_", "azure_")}
_PASS_THROUGH = frozenset({"client_options", "retry_config"})

#: Keys whose value is a credential, per store (obstore's spelling). The catalog never
#: stores their values; `is_secret_option` answers for any spelling.
SECRET_KEYS = _words(
    "access_key_id secret_access_key session_token sse_customer_key_base64 "
    "service_account_key bearer_token account_key sas_key token client_secret "
    "encryption_key fabric_session_token connection_string"
)
_SECRET_WORDS = re.compile(r"secret|password|token|credential|sas|(?<!kms_)key(?!_id)", re.I)

#: fsspec filesystem settings with no meaning for obstore -> what to do instead.
_FSSPEC_ONLY = {
    "profile": "obstore reads no AWS profiles: pass the profile's keys (or set AWS_* "
    "environment variables)",
    "credential": "pass account_key, sas_token or client_id/client_secret/tenant_id instead "
    "of a credential object",
}
_FSSPEC_CACHE_WORDS = _words(
    "default_block_size default_cache_type default_fill_cache use_listings_cache "
    "listings_expiry_time max_paths skip_instance_cache asynchronous loop "
    "cache_regions version_aware blocksize max_concurrency"
)


class StorageOptionsError(StoreError, ValueError):
    """A `storage_options` key that no store knows, or a value that cannot be translated.

    Attributes:
        key: the key as given.
        suggestions: the closest known keys.
    """

    def __init__(
        self, message: str, *, key: str, uri: str = "", suggestions: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, uri=uri)
        self.key = key
        self.suggestions = suggestions


def store_kind(uri: str) -> str | None:
    """`s3`, `gcs` or `azure` for an object-store URI, None for any other (HTTP, local)."""
    return {"AWS_": "s3", "GOOGLE_": "gcs", "AZURE_": "azure"}.get(env_prefix(uri) or "")


def canonical_key(kind: str, key: str) -> str | None:
    """obstore's documented name of `key` for a store of `kind`, or None if obstore has
    no such key (fsspec spellings are not translated here)."""
    k = key.lower()
    for candidate in (k, *(k[len(p) :] for p in _PREFIXES[kind] if k.startswith(p))):
        candidate = _ALIASES[kind].get(candidate, candidate)
        if candidate in _KEYS[kind]:
            return candidate
    return None


def is_secret_option(uri: str, key: str) -> bool:
    """True when `key` (any spelling obstore or fsspec uses) holds a credential for the
    store of `uri`: access keys, secret keys, session and bearer tokens, account keys,
    SAS tokens, client secrets, service-account keys, connection strings. A key that is
    not known is a secret when its name looks like one (`…secret…`, `…token…`, …).

    Examples:
        >>> is_secret_option("s3://b", "secret"), is_secret_option("s3://b", "AWS_SECRET_ACCESS_KEY")
        (True, True)
        >>> is_secret_option("s3://b", "endpoint_url"), is_secret_option("s3://b", "sse_kms_key_id")
        (False, False)
    """
    kind = store_kind(uri)
    k = key.lower()
    if kind is not None:
        fsspec = {"key": "access_key_id", "secret": "secret_access_key", "token": "token"}
        k = canonical_key(kind, k) or fsspec.get(k, k)
        if kind == "s3" and k == "token":
            k = "session_token"
    if k in SECRET_KEYS:
        return True
    if kind is not None and (k in _KEYS[kind] or _client_key(k) is not None or k in _PASS_THROUGH):
        return False
    return _SECRET_WORDS.search(k) is not None


def _flag(value: Any, key: str, uri: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    if isinstance(value, int):
        return bool(value)
    raise StorageOptionsError(
        f"storage option {key!r} must be true or false, got {value!r}", key=key, uri=uri
    )


class _Out:
    """The translated options; a key given twice (two spellings) must agree."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.options: dict[str, Any] = {}
        self._given: dict[str, str] = {}
        self.implied_http = False

    def put(self, key: str, value: Any, given: str) -> None:
        if key in self.options and self.options[key] != value:
            raise StorageOptionsError(
                f"storage options {self._given[key]!r} and {given!r} both set {key!r}, to "
                "different values; pass one",
                key=given,
                uri=self.uri,
            )
        self.options[key] = value
        self._given.setdefault(key, given)

    def given(self, key: str) -> str:
        """How the caller spelled option `key` (the first spelling that set it)."""
        return self._given.get(key, key)

    def endpoint(self, key: str, value: Any, given: str) -> None:
        """An fsspec endpoint URL: `http://` allows plain HTTP, as it does in fsspec."""
        self.put(key, value, given)
        if isinstance(value, str) and value.lower().startswith("http://"):
            self.implied_http = True

    def finish(self) -> dict[str, Any]:
        """The options; `allow_http` added when an fsspec endpoint implied it and no
        spelling of `allow_http` was given."""
        client = self.options.get("client_options")
        given = any(_client_key(k) == "allow_http" for k in self.options) or (
            isinstance(client, Mapping) and any(_client_key(str(k)) == "allow_http" for k in client)
        )
        if self.implied_http and not given:
            self.options["allow_http"] = True
        return self.options


def normalize_storage_options(
    uri: str, storage_options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """`storage_options` for the store at `uri` in obstore's keys.

    fsspec's spellings (s3fs, gcsfs, adlfs) are translated, see the table in
    docs/store.md: s3fs `key`, `secret`, `token`, `anon`, `endpoint_url`, `use_ssl`,
    `requester_pays`, `client_kwargs` (`endpoint_url`, `region_name`, `verify`, `aws_*`
    keys) and `config_kwargs` (`region_name`, `s3.addressing_style`, timeouts); gcsfs
    `token` (a service-account file, a dict of its contents, `"anon"`,
    `"google_default"`), `project` (not needed: dropped), `endpoint_url`; adlfs
    `account_name`, `account_key`, `sas_token`, `connection_string`, `account_host`,
    `anon`, `client_id`, `client_secret`, `tenant_id`. An fsspec `endpoint_url` starting
    with `http://` also sets `allow_http`. obstore's own keys are spelled the way obstore
    documents them (any case, with or without `aws_` / `google_` / `azure_`). HTTP client
    keys (`allow_http`, `timeout`, …), `client_options` and `retry_config` pass through.
    Local, `memory://` and plain HTTP(S) URIs take the options unchanged.

    Args:
        uri: the store's URI (its scheme says which keys apply).
        storage_options: the options as given.

    Returns:
        a new dict of obstore keys.

    Raises:
        StorageOptionsError: (a `ValueError`) for a key neither obstore nor the
            translation knows (the message names the closest keys), a key given twice
            with two values, or a value that cannot be translated.

    Examples:
        >>> normalize_storage_options(
        ...     "s3://bucket/ds",
        ...     {"key": "AKIA", "secret": "s3cr3t", "client_kwargs": {"endpoint_url": "http://minio:9000"}},
        ... )
        {'access_key_id': 'AKIA', 'secret_access_key': 's3cr3t', 'endpoint': 'http://minio:9000', 'allow_http': True}
        >>> normalize_storage_options("gs://bucket/ds", {"token": "anon", "project": "p"})
        {'skip_signature': True}
    """
    options = dict(storage_options or {})
    kind = store_kind(uri)
    if kind is None:
        for key, value in options.items():
            _check_text(uri, str(key), value)
        return options
    out = _Out(uri)
    translate = {"s3": _s3, "gcs": _gcs, "azure": _azure}[kind]
    for key, value in options.items():
        if not isinstance(key, str):
            raise StorageOptionsError(
                f"storage option keys are strings, got {key!r}", key=repr(key), uri=uri
            )
        k = key.lower()
        if k in _PASS_THROUGH or _client_key(k) is not None:
            out.put(key, value, key)
            continue
        if translate(out, k, key, value):
            continue
        canonical = canonical_key(kind, k)
        if canonical is None:
            raise _unknown(kind, key, uri)
        out.put(canonical, value, key)
    options = out.finish()
    for key, value in options.items():
        _check_value(uri, key, out.given(key), value)
    return options


#: Keys whose value is a URL obstore sends requests to (`http://` or `https://`, a host).
URL_KEYS = _words(
    "endpoint base_url metadata_endpoint container_credentials_full_uri authority_host "
    "msi_endpoint fabric_token_service_url"
)
#: Keys whose value becomes part of a request's URL or host as it is (no blanks).
_NAME_KEYS = _words("region default_region bucket account_name container_name")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_text(uri: str, given: str, value: Any) -> None:
    """Refuse a control character in a string option (at any depth of a dict): obstore
    panics on one in a header or URL when it builds the first request."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_text(uri, f"{given}[{k!r}]", v)
        return
    if isinstance(value, str) and _CONTROL.search(value):
        raise StorageOptionsError(
            f"storage option {given!r}{_shown(uri, given, value)} holds a control character",
            key=given,
            uri=uri,
        )


def _shown(uri: str, given: str, value: str) -> str:
    """` = 'value'` for an error message, empty for a secret or a nested option (a
    header's value may be a credential): a secret never lands in a message or a log."""
    if "[" in given or is_secret_option(uri, given):
        return ""
    return f" = {value!r}"


def _check_value(uri: str, key: str, given: str, value: Any) -> None:
    """Refuse an option value that obstore cannot use, before any request: obstore takes
    an empty endpoint, a `file://` one, one without a scheme (`localhost:9000`), or a
    region with a blank or a NUL at open and then panics (a `BaseException` that
    `except Exception` misses) when it builds the first request.

    Raises:
        StorageOptionsError: naming the option as given.
    """
    _check_text(uri, given, value)
    if key in _PASS_THROUGH or _client_key(key) is not None or not isinstance(value, str):
        return
    problem = ""
    if key not in URL_KEYS and key not in _NAME_KEYS:
        return  # an empty token or secret is the caller's to give (a panic is a StoreError)
    if not value.strip():
        problem = "is empty"
    elif key in URL_KEYS:
        problem = _url_problem(value)
    elif key in _NAME_KEYS and any(c.isspace() for c in value):
        problem = "holds a blank"
    if problem:
        raise StorageOptionsError(
            f"storage option {given!r}{_shown(uri, given, value)} {problem}", key=given, uri=uri
        )


def _url_problem(value: str) -> str:
    """Why `value` is not an `http(s)://host…` URL (empty when it is one)."""
    if any(c.isspace() for c in value):
        return "holds a blank: expected an http:// or https:// URL"
    try:
        split = urlsplit(value)
        host = split.hostname
        split.port  # noqa: B018  (raises for a port that is not a number)
    except ValueError as exc:
        return f"is not a URL ({exc}): expected http://host[:port] or https://…"
    if split.scheme.lower() not in ("http", "https") or not host:
        return "is not an http:// or https:// URL with a host (e.g. http://localhost:9000)"
    return ""


def _s3(out: _Out, k: str, key: str, value: Any) -> bool:
    if k == "key":
        out.put("access_key_id", value, key)
    elif k == "endpoint_url":
        out.endpoint("endpoint", value, key)
    elif k == "secret":
        out.put("secret_access_key", value, key)
    elif k == "anon":
        if _flag(value, key, out.uri):
            out.put("skip_signature", True, key)
    elif k == "use_ssl":
        if not _flag(value, key, out.uri):
            out.put("allow_http", True, key)
    elif k == "requester_pays":
        if _flag(value, key, out.uri):
            out.put("request_payer", True, key)
    elif k == "client_kwargs":
        _nested(out, key, value, _S3_CLIENT_KWARGS)
    elif k == "config_kwargs":
        _nested(out, key, value, _S3_CONFIG_KWARGS)
    else:
        return False
    return True


def _region(out: _Out, key: str, value: Any) -> None:
    out.put("region", value, key)


def _verify(out: _Out, key: str, value: Any) -> None:
    if value is False or (isinstance(value, str) and value.lower() in ("false", "0")):
        out.put("allow_invalid_certificates", True, key)
    elif isinstance(value, str | os.PathLike) and value not in ("true", "1"):
        out.put("root_certificate", os.fspath(value), key)


def _addressing(out: _Out, key: str, value: Any) -> None:
    style = value.get("addressing_style") if isinstance(value, Mapping) else None
    extra = sorted(set(value) - {"addressing_style"}) if isinstance(value, Mapping) else []
    if style not in ("virtual", "path", "auto", None) or extra:
        raise StorageOptionsError(
            f"storage option {key!r} = {value!r}: only addressing_style 'virtual', 'path' "
            "or 'auto' is translated (to virtual_hosted_style_request)",
            key=key,
            uri=out.uri,
        )
    if style in ("virtual", "path"):
        out.put("virtual_hosted_style_request", style == "virtual", key)


_Nested = dict[str, Callable[[_Out, str, Any], None]]
_S3_CLIENT_KWARGS: _Nested = {
    "endpoint_url": lambda out, key, v: out.endpoint("endpoint", v, key),
    "region_name": _region,
    "aws_access_key_id": lambda out, key, v: out.put("access_key_id", v, key),
    "aws_secret_access_key": lambda out, key, v: out.put("secret_access_key", v, key),
    "aws_session_token": lambda out, key, v: out.put("session_token", v, key),
    "verify": _verify,
    "use_ssl": lambda out, key, v: (
        None if _flag(v, key, out.uri) else out.put("allow_http", True, key)
    ),
}
_S3_CONFIG_KWARGS: _Nested = {
    "region_name": _region,
    "s3": _addressing,
    "connect_timeout": lambda out, key, v: out.put("connect_timeout", v, key),
    "read_timeout": lambda out, key, v: out.put("timeout", v, key),
}


def _nested(out: _Out, key: str, value: Any, table: _Nested) -> None:
    if not isinstance(value, Mapping):
        raise StorageOptionsError(
            f"storage option {key!r} must be a dict, got {type(value).__name__}",
            key=key,
            uri=out.uri,
        )
    for sub, v in value.items():
        name = f"{key}[{sub!r}]"
        handler = table.get(str(sub))
        if handler is None:
            raise StorageOptionsError(
                f"storage option {name} has no obstore equivalent; translated keys of "
                f"{key}: {', '.join(sorted(table))}",
                key=name,
                uri=out.uri,
                suggestions=tuple(difflib.get_close_matches(str(sub), list(table), n=3)),
            )
        handler(out, name, v)


def _gcs(out: _Out, k: str, key: str, value: Any) -> bool:
    if k == "token":
        _gcs_token(out, key, value)
    elif k == "project":
        logger.debug("storage option %r dropped: obstore needs no GCS project", key)
    elif k == "endpoint_url":
        out.endpoint("base_url", value, key)
    elif k == "anon":
        if _flag(value, key, out.uri):
            out.put("skip_signature", True, key)
    else:
        return False
    return True


def _gcs_token(out: _Out, key: str, value: Any) -> None:
    """gcsfs's `token`: how to authenticate."""
    if value is None or value in ("google_default", "cloud"):
        return  # obstore's default: application default credentials, then the metadata server
    if value == "anon":
        out.put("skip_signature", True, key)
    elif isinstance(value, Mapping):
        if value.get("type") != "service_account":
            raise StorageOptionsError(
                f"storage option {key!r}: a dict token must hold a service account key "
                "(type 'service_account'); for other credentials pass the path of their "
                "file as application_credentials",
                key=key,
                uri=out.uri,
            )
        out.put("service_account_key", json.dumps(dict(value)), key)
    elif isinstance(value, str | os.PathLike) and value not in ("browser", "cache"):
        path = os.fspath(value)
        out.put(
            "application_credentials" if _is_user_credentials(path) else "service_account",
            path,
            key,
        )
    else:
        raise StorageOptionsError(
            f"storage option {key!r} = {value!r} is an interactive gcsfs login, which obstore "
            "does not do; pass the path of a service-account file (token=…) or run "
            "`gcloud auth application-default login` and pass nothing",
            key=key,
            uri=out.uri,
        )


def _is_user_credentials(path: str) -> bool:
    """True for a gcloud user-credentials file (`authorized_user`), which obstore reads
    as application credentials, not as a service account."""
    try:
        with open(path, encoding="utf-8") as f:
            return bool(json.load(f).get("type") == "authorized_user")
    except (OSError, ValueError, AttributeError):
        return False


def _azure(out: _Out, k: str, key: str, value: Any) -> bool:
    if k == "anon":
        if _flag(value, key, out.uri):
            out.put("skip_signature", True, key)
    elif k == "connection_string":
        _connection_string(out, key, value)
    elif k == "account_host":
        host = str(value)
        out.endpoint("endpoint", host if "://" in host else f"https://{host}", key)
    else:
        return False
    return True


def _connection_string(out: _Out, key: str, value: Any) -> None:
    """An Azure storage connection string (`AccountName=…;AccountKey=…;…`)."""
    parts: dict[str, str] = {}
    for item in str(value).split(";"):
        name, sep, v = item.strip().partition("=")
        if sep:
            parts[name.strip().lower()] = v.strip()
        elif name.strip():
            raise StorageOptionsError(
                f"storage option {key!r} is not a connection string (Name=value;…)",
                key=key,
                uri=out.uri,
            )
    if parts.get("usedevelopmentstorage", "").lower() == "true":
        out.put("use_emulator", True, key)
    for name, target in (
        ("accountname", "account_name"),
        ("accountkey", "account_key"),
        ("sharedaccesssignature", "sas_key"),
    ):
        if name in parts:
            out.put(target, parts[name], key)
    if "blobendpoint" in parts:
        out.endpoint("endpoint", parts["blobendpoint"], key)
    elif "endpointsuffix" in parts and "accountname" in parts:
        protocol = parts.get("defaultendpointsprotocol", "https")
        endpoint = f"{protocol}://{parts['accountname']}.blob.{parts['endpointsuffix']}"
        out.endpoint("endpoint", endpoint, key)


_FSSPEC_KEYS = {
    "s3": ("key", "secret", "token", "anon", "use_ssl", "requester_pays", "client_kwargs",
           "config_kwargs", "endpoint_url"),
    "gcs": ("token", "project", "endpoint_url", "anon"),
    "azure": ("connection_string", "account_host", "anon", "sas_token"),
}  # fmt: skip
_KIND_NAMES = {"s3": "S3", "gcs": "GCS", "azure": "Azure"}


def _unknown(kind: str, key: str, uri: str) -> StorageOptionsError:
    k = key.lower()
    known = sorted(_KEYS[kind] | CLIENT_KEYS | _PASS_THROUGH | set(_FSSPEC_KEYS[kind]))
    close = tuple(difflib.get_close_matches(k, known, n=3, cutoff=0.6))
    name = _KIND_NAMES[kind]
    text = (
        f"unknown storage option {key!r} for {uri} ({'an' if kind == 's3' else 'a'} {name} store)"
    )
    if k in _FSSPEC_ONLY:
        text += f": {_FSSPEC_ONLY[k]}."
    elif k in _FSSPEC_CACHE_WORDS:
        text += (
            ": an fsspec filesystem setting with no meaning here; drop it (ferroload's "
            "caching is BlockCache, its concurrency IOOptions)."
        )
    else:
        text += f". Did you mean {', '.join(map(repr, close))}?" if close else "."
    return StorageOptionsError(
        f"{text} Accepted: obstore's {name} keys, HTTP client keys and fsspec's "
        f"{', '.join(_FSSPEC_KEYS[kind])} (see docs/store.md)",
        key=key,
        uri=uri,
        suggestions=close,
    )
