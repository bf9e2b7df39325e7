"""Storage options as the catalog stores them: no literal secret, `env:NAME` references
read from the environment when an entry is opened."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ferroload_catalog._errors import CatalogSecretError
from ferroload_store import is_secret_option

#: A stored storage option whose value is `env:NAME` is read from the environment
#: variable `NAME` when the entry is opened (the only way a secret reaches the catalog).
ENV_REFERENCE = "env:"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def storable_options(
    uri: str, storage_options: Mapping[str, Any] | None, *, name: str | None = None
) -> dict[str, Any]:
    """The storage options of an entry as the catalog stores them, checked.

    A value of the form `env:NAME` is kept as it is (it is read from the environment
    variable `NAME` when the entry is opened). Any other value is kept only if its key is
    not a secret (`ferroload_store.is_secret_option`: access keys, secret keys, tokens,
    account keys, SAS tokens, client secrets, service-account keys, connection strings,
    in any spelling, nested ones such as `client_kwargs` included).

    Args:
        uri: the dataset URI (its scheme says which keys are secrets).
        storage_options: the options as given.
        name: the entry, for messages.

    Returns:
        the options to store (JSON-serialisable).

    Raises:
        CatalogSecretError: (a `ValueError`) for a literal secret, or a malformed
            `env:` reference; the message says how to pass it.

    Examples:
        >>> storable_options("s3://b/ds", {"endpoint": "http://minio:9000", "secret": "env:S3_SECRET"})
        {'endpoint': 'http://minio:9000', 'secret': 'env:S3_SECRET'}
        >>> storable_options("s3://b/ds", {"secret_access_key": "abc"})
        Traceback (most recent call last):
        ...
        ferroload_catalog._errors.CatalogSecretError: storage option 'secret_access_key' is a secret, ...
    """
    return {
        str(k): _storable(uri, str(k), str(k), v, name)
        for k, v in dict(storage_options or {}).items()
    }


def _storable(uri: str, key: str, path: str, value: Any, name: str | None) -> Any:
    if isinstance(value, str) and value.startswith(ENV_REFERENCE):
        var = value[len(ENV_REFERENCE) :]
        if _ENV_NAME.fullmatch(var) is None:
            raise CatalogSecretError(
                f"storage option {path!r}: {value!r} does not name an environment variable "
                "(write env:NAME, NAME of letters, digits and '_')",
                name=name,
                key=path,
            )
        return value
    if isinstance(value, Mapping):
        return {
            str(k): _storable(uri, str(k), f"{path}[{str(k)!r}]", v, name) for k, v in value.items()
        }
    if is_secret_option(uri, key):
        raise CatalogSecretError(
            f"storage option {path!r} is a secret, and the catalog stores no secret: give "
            f"the name of an environment variable holding it instead, as {key}=env:MY_VAR "
            "(read when the entry is opened), or leave it out and let the standard "
            "variables (AWS_*, GOOGLE_*, AZURE_*) provide it",
            name=name,
            key=path,
        )
    if isinstance(value, list | tuple):
        return [_storable(uri, key, path, v, name) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise CatalogSecretError(
        f"storage option {path!r}: the catalog stores text, numbers, booleans, lists and "
        f"dicts, not {type(value).__name__}",
        name=name,
        key=path,
    )


def resolve_options(stored: Mapping[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """Stored storage options with each `env:NAME` value read from the environment.

    Raises:
        CatalogSecretError: if a named environment variable is not set.

    Examples:
        >>> os.environ["DOCS_DEMO_SECRET"] = "s3cr3t"
        >>> resolve_options({"region": "eu-west-3", "secret": "env:DOCS_DEMO_SECRET"})
        {'region': 'eu-west-3', 'secret': 's3cr3t'}
    """
    return {str(k): _resolved(str(k), v, name) for k, v in stored.items()}


def _resolved(path: str, value: Any, name: str | None) -> Any:
    if isinstance(value, str) and value.startswith(ENV_REFERENCE):
        var = value[len(ENV_REFERENCE) :]
        found = os.environ.get(var)
        if found is None:
            where = f"catalog entry {name!r}" if name else "the catalog entry"
            raise CatalogSecretError(
                f"{where} takes storage option {path!r} from the environment variable "
                f"{var}, which is not set; set it (or pass storage_options / -o {path}=…)",
                name=name,
                key=path,
            )
        return found
    if isinstance(value, Mapping):
        return {str(k): _resolved(f"{path}[{str(k)!r}]", v, name) for k, v in value.items()}
    return value
