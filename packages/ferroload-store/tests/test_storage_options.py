from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import obstore
import pytest

from ferroload_store import (
    StorageOptionsError,
    StoreError,
    is_secret_option,
    normalize_storage_options,
    open_store,
)
from ferroload_store._storage_options import AZURE_KEYS, GCS_KEYS, S3_KEYS
from ferroload_testing import MotoServer

S3, GS, AZ = "s3://bucket/ds", "gs://bucket/ds", "az://account/container/ds"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"key": "AK", "secret": "SK", "token": "ST"},
         {"access_key_id": "AK", "secret_access_key": "SK", "session_token": "ST"}),
        ({"anon": True}, {"skip_signature": True}),
        ({"anon": "false"}, {}),
        ({"endpoint_url": "https://minio:9000"}, {"endpoint": "https://minio:9000"}),
        ({"endpoint_url": "http://minio:9000"}, {"endpoint": "http://minio:9000", "allow_http": True}),
        ({"endpoint_url": "http://m", "allow_http": False}, {"endpoint": "http://m", "allow_http": False}),
        ({"use_ssl": False}, {"allow_http": True}),
        ({"use_ssl": True}, {}),
        ({"requester_pays": True}, {"request_payer": True}),
        ({"client_kwargs": {"endpoint_url": "http://m:1", "region_name": "eu-west-3"}},
         {"endpoint": "http://m:1", "region": "eu-west-3", "allow_http": True}),
        ({"client_kwargs": {"aws_access_key_id": "AK", "aws_secret_access_key": "SK",
                            "aws_session_token": "ST", "verify": False}},
         {"access_key_id": "AK", "secret_access_key": "SK", "session_token": "ST",
          "allow_invalid_certificates": True}),
        ({"client_kwargs": {"verify": "/etc/ca.pem"}}, {"root_certificate": "/etc/ca.pem"}),
        ({"config_kwargs": {"region_name": "us-west-2", "s3": {"addressing_style": "virtual"},
                            "connect_timeout": 3, "read_timeout": 60}},
         {"region": "us-west-2", "virtual_hosted_style_request": True, "connect_timeout": 3,
          "timeout": 60}),
        ({"config_kwargs": {"s3": {"addressing_style": "path"}}},
         {"virtual_hosted_style_request": False}),
        # obstore's own keys, in any of the spellings obstore accepts, come out as it documents them
        ({"AWS_ACCESS_KEY_ID": "AK", "aws_endpoint_url": "http://e", "Region": "r", "bucket_name": "b"},
         {"access_key_id": "AK", "endpoint": "http://e", "region": "r", "bucket": "b"}),
        ({"allow_http": True, "timeout": "10s", "client_options": {"proxy_url": "http://p"},
          "retry_config": {"max_retries": 1}},
         {"allow_http": True, "timeout": "10s", "client_options": {"proxy_url": "http://p"},
          "retry_config": {"max_retries": 1}}),
    ],
)  # fmt: skip
def test_s3fs_spellings(given: dict[str, Any], expected: dict[str, Any]) -> None:
    assert normalize_storage_options(S3, given) == expected


def test_gcsfs_spellings(tmp_path: Path) -> None:
    sa = tmp_path / "sa.json"
    sa.write_text(json.dumps({"type": "service_account", "client_email": "x@y"}))
    user = tmp_path / "adc.json"
    user.write_text(json.dumps({"type": "authorized_user", "refresh_token": "r"}))
    n = normalize_storage_options
    assert n(GS, {"token": str(sa), "project": "my-project"}) == {"service_account": str(sa)}
    assert n(GS, {"token": sa}) == {"service_account": str(sa)}
    assert n(GS, {"token": str(user)}) == {"application_credentials": str(user)}
    assert n(GS, {"token": "/not/here.json"}) == {"service_account": "/not/here.json"}
    info = {"type": "service_account", "private_key": "k"}
    assert n(GS, {"token": info}) == {"service_account_key": json.dumps(info)}
    assert n(GS, {"token": "anon"}) == {"skip_signature": True}
    assert n(GS, {"anon": True}) == {"skip_signature": True}
    assert n(GS, {"token": "google_default"}) == n(GS, {"token": None}) == {}
    assert n(GS, {"endpoint_url": "http://127.0.0.1:4443"}) == {
        "base_url": "http://127.0.0.1:4443",
        "allow_http": True,
    }
    assert n(GS, {"GOOGLE_SERVICE_ACCOUNT_PATH": "/sa.json"}) == {"service_account": "/sa.json"}
    with pytest.raises(StorageOptionsError, match="interactive gcsfs login"):
        n(GS, {"token": "browser"})
    with pytest.raises(StorageOptionsError, match="service account key"):
        n(GS, {"token": {"type": "authorized_user"}})


def test_adlfs_spellings() -> None:
    n = normalize_storage_options
    assert n(AZ, {"account_name": "acc", "account_key": "K", "sas_token": "sv=1"}) == {
        "account_name": "acc",
        "account_key": "K",
        "sas_key": "sv=1",
    }
    assert n(AZ, {"client_id": "c", "client_secret": "s", "tenant_id": "t", "anon": False}) == {
        "client_id": "c",
        "client_secret": "s",
        "tenant_id": "t",
    }
    assert n(AZ, {"anon": True}) == {"skip_signature": True}
    assert n(AZ, {"account_host": "acc.blob.core.windows.net"}) == {
        "endpoint": "https://acc.blob.core.windows.net"
    }
    cs = (
        "DefaultEndpointsProtocol=https;AccountName=acc;AccountKey=K==;"
        "EndpointSuffix=core.chinacloudapi.cn"
    )
    assert n(AZ, {"connection_string": cs}) == {
        "account_name": "acc",
        "account_key": "K==",
        "endpoint": "https://acc.blob.core.chinacloudapi.cn",
    }
    azurite = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=K==;"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    assert n(AZ, {"connection_string": azurite}) == {
        "account_name": "devstoreaccount1",
        "account_key": "K==",
        "endpoint": "http://127.0.0.1:10000/devstoreaccount1",
        "allow_http": True,
    }
    assert n(AZ, {"connection_string": "BlobEndpoint=https://e;SharedAccessSignature=sv=2"}) == {
        "endpoint": "https://e",
        "sas_key": "sv=2",
    }
    assert n(AZ, {"connection_string": "UseDevelopmentStorage=true"}) == {"use_emulator": True}
    assert n(AZ, {"AZURE_STORAGE_ACCOUNT_NAME": "a", "master_key": "K"}) == {
        "account_name": "a",
        "account_key": "K",
    }
    with pytest.raises(StorageOptionsError, match="not a connection string"):
        n(AZ, {"connection_string": "garbage"})


def test_unknown_keys_are_refused_naming_the_closest() -> None:
    with pytest.raises(StorageOptionsError) as err:
        open_store(S3, storage_options={"acess_key_id": "AK"})
    assert isinstance(err.value, ValueError)
    assert err.value.key == "acess_key_id"
    assert err.value.suggestions[0] == "access_key_id"
    assert "unknown storage option 'acess_key_id' for s3://bucket/ds (an S3 store)" in str(
        err.value
    )
    assert "Did you mean 'access_key_id'" in str(err.value)
    with pytest.raises(StorageOptionsError, match="obstore reads no AWS profiles"):
        normalize_storage_options(S3, {"profile": "dev"})
    with pytest.raises(StorageOptionsError, match="fsspec filesystem setting"):
        normalize_storage_options(S3, {"default_block_size": 1 << 20})
    with pytest.raises(StorageOptionsError, match=r"client_kwargs\['proxies'\] has no obstore"):
        normalize_storage_options(S3, {"client_kwargs": {"proxies": {}}})
    with pytest.raises(StorageOptionsError, match="a GCS store"):
        normalize_storage_options(GS, {"region": "eu"})
    with pytest.raises(StorageOptionsError, match="'key' and 'access_key_id' both set"):
        normalize_storage_options(S3, {"key": "A", "access_key_id": "B"})
    assert normalize_storage_options(S3, {"key": "A", "access_key_id": "A"}) == {
        "access_key_id": "A"
    }
    with pytest.raises(StorageOptionsError, match="'anon' must be true or false"):
        normalize_storage_options(S3, {"anon": "maybe"})
    # local and memory stores take (and ignore) whatever they are given, as before
    assert open_store("memory://opts/x", storage_options={"anything": 1}).uri == "memory://opts/x"


def test_secrets_by_any_spelling() -> None:
    secret = ["key", "secret", "token", "secret_access_key", "AWS_SESSION_TOKEN", "access_key_id"]
    assert all(is_secret_option(S3, k) for k in secret)
    public = ["endpoint", "endpoint_url", "region", "allow_http", "skip_signature", "anon"]
    assert not any(is_secret_option(S3, k) for k in [*public, "sse_kms_key_id", "use_ssl"])
    assert is_secret_option(GS, "token") and is_secret_option(GS, "service_account_key")
    assert not is_secret_option(GS, "service_account")  # a path to the key file
    assert all(
        is_secret_option(AZ, k)
        for k in ("account_key", "sas_token", "connection_string", "client_secret", "token")
    )
    assert not any(is_secret_option(AZ, k) for k in ("account_name", "client_id", "tenant_id"))
    assert is_secret_option(S3, "my_password") and not is_secret_option(S3, "colour")


@pytest.mark.parametrize(
    ("url", "keys", "prefixes"),
    [
        ("s3://b", S3_KEYS, ("", "aws_")),
        ("gs://b", GCS_KEYS, ("", "google_")),
        ("az://acct/c", AZURE_KEYS, ("",)),  # azure_ fits some keys only
    ],
)
def test_every_listed_key_is_one_obstore_accepts(
    url: str, keys: frozenset[str], prefixes: tuple[str, ...]
) -> None:
    """The key lists follow obstore: a key it dropped or renamed fails here."""
    for key in sorted(keys):
        for name in (p + key for p in prefixes):
            try:
                obstore.store.from_url(url, config={name: "x"}, client_options={})
                problem = ""
            except BaseException as exc:  # obstore raises a panic for some bad values
                problem = str(exc)
            assert "not valid for store" not in problem, name


@pytest.mark.s3
def test_round_trip_with_s3fs_keys_on_moto(moto: MotoServer, s3_uri: str) -> None:
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": moto.endpoint, "region_name": moto.region},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
    }
    store = open_store(s3_uri, storage_options=options, cache=None)
    store.put("a/b.bin", b"hello fsspec")
    assert store.get("a/b.bin") == b"hello fsspec"
    assert [i.path for i in store.list("a/")] == ["a/b.bin"]
    again = pickle.loads(pickle.dumps(store))  # workers get the translated options
    assert again.get_range("a/b.bin", 6, 6) == b"fsspec"
    # the same store through obstore's keys sees the object
    same = open_store(s3_uri, storage_options=moto.storage_options(), cache=None)
    assert same.get("a/b.bin") == b"hello fsspec"


_KEYS_AB = {"access_key_id": "a", "secret_access_key": "b"}


@pytest.mark.parametrize(
    ("uri", "options", "named", "why"),
    [
        (S3, {"endpoint": ""}, "endpoint", "is empty"),
        (S3, {"region": "\x00"}, "region", "control character"),
        (S3, {"endpoint": "file:///etc"}, "endpoint", "not an http:// or https:// URL"),
        (S3, {"endpoint": "localhost:9000"}, "endpoint", "not an http:// or https:// URL"),
        (S3, {"endpoint": "http//localhost:9000"}, "endpoint", "not an http:// or https://"),
        (S3, {"endpoint": "http://"}, "endpoint", "with a host"),
        (S3, {"endpoint": "http://[::1"}, "endpoint", "is not a URL"),
        (S3, {"endpoint": "http://localhost :9000"}, "endpoint", "blank"),
        (S3, {"aws_endpoint_url": " "}, "aws_endpoint_url", "is empty"),
        (S3, {"endpoint_url": ""}, "endpoint_url", "is empty"),
        (S3, {"client_kwargs": {"region_name": "us east 1"}}, "region_name", "blank"),
        (S3, {"region": "us-east-1 "}, "region", "blank"),
        (S3, {"bucket": "a b"}, "bucket", "blank"),
        (S3, {"session_token": "a\nb"}, "session_token", "control character"),
        (S3, {"client_options": {"user_agent": "a\rb"}}, "user_agent", "control character"),
        (GS, {"base_url": "file:///etc", "skip_signature": True}, "base_url", "http://"),
        (AZ, {"endpoint": "", "skip_signature": True}, "endpoint", "is empty"),
        (AZ, {"account_name": "\x00", "skip_signature": True}, "account_name", "control"),
    ],
)
def test_values_obstore_would_panic_on_are_refused_at_open(
    uri: str, options: dict[str, Any], named: str, why: str
) -> None:
    """obstore takes these at open, then panics (pyo3's PanicException, a BaseException
    that escapes `except Exception`) when it builds the first request: refused when the
    store opens, naming the option, and a secret's value never in the message."""
    with pytest.raises(StorageOptionsError, match=why) as info:
        open_store(uri, storage_options={**(_KEYS_AB if uri == S3 else {}), **options}, cache=None)
    assert named in info.value.key
    assert isinstance(info.value, ValueError)
    assert "a\nb" not in str(info.value)  # the session token is a secret


def test_good_values_still_open() -> None:
    for options in (
        {"endpoint": "http://127.0.0.1:9000", "region": "us-east-1"},
        {"endpoint": "https://user@minio.local:9000/prefix", "bucket": "b"},
        {"endpoint_url": "http://[::1]:9000"},
        {"aws_session_token": ""},  # an empty token, as fsspec users pass it
    ):
        assert open_store(S3, storage_options={**_KEYS_AB, **options}, cache=None).uri == S3


def test_an_obstore_panic_is_a_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad value obstore reads from the environment (not checked here) makes it panic
    at the first request: every call through the store raises a StoreError naming the
    object, never the panic itself, and is not retried."""
    monkeypatch.setenv("AWS_ENDPOINT", "localhost:9000")  # no scheme
    store = open_store(S3, storage_options=_KEYS_AB, cache=None)
    calls: list[Any] = [
        lambda: store.get("x"),
        lambda: store.get_range("x", 0, 4),
        lambda: store.get_ranges("x", [0, 10], [4, 4]),
        lambda: store.head("x"),
        lambda: store.list("a/"),
        lambda: store.put("x", b"1"),
        lambda: store.put_if_absent("x", b"1"),
        lambda: store.delete("x"),
    ]
    for call in calls:
        with pytest.raises(StoreError, match=r"obstore panicked.*storage_options") as info:
            call()
        assert type(info.value.__cause__).__name__ == "PanicException"
    assert store.stats.retries == 0
    with pytest.raises(StoreError, match=r"upload of .*/big\.bin failed: obstore panicked"):
        writer = store.open_writer("big.bin")
        writer.write(b"x" * (6 << 20))
        writer.close()
