"""The Azure and GCS paths of ferroload-store and ferroload-format against local emulators.

* **Azure**: Azurite (`azurite-blob`, from npm; `.ci/run` installs it). Every `Store`
  operation and a dataset round trip through the format layer run against it.
* **GCS**: gcp-storage-emulator (PyPI, a dev dependency). obstore's GCS client speaks
  the XML API, of which that emulator implements only a bare GET and PUT; the GCS tests
  pin down exactly what fails, so that a newer emulator that closes the gap shows up here
  (then add `"gcs"` to `BACKENDS` and drop the gap tests). See docs/store.md,
  "Backends tested".

Each emulator runs once per session in a subprocess on a free loopback port; each test
works under its own key prefix.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import importlib.util
import json
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import obstore.exceptions as obx
import pytest

from ferroload_format import Dataset, Writer
from ferroload_store import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    Store,
    StoreError,
    open_store,
)

#: Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
CONTAINER = "ferroload"  # Azure container names need 3 to 63 characters
GCS_BUCKET = "ferroload"
START_TIMEOUT = 60.0

#: Backends the full suite runs on (fixture names).
BACKENDS = ["azurite"]


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_until(
    ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, what: str
) -> None:
    """Poll `ready` until it is true; fail with the server's log if it dies or hangs."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"{what} exited with code {proc.returncode} before it was ready:\n"
                + log.read_text(errors="replace")[-4000:],
                pytrace=False,
            )
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.1)
    _stop(proc)
    pytest.fail(
        f"{what} was not ready after {START_TIMEOUT:.0f} s:\n"
        + log.read_text(errors="replace")[-4000:],
        pytrace=False,
    )


def _azure_create_container(endpoint: str, container: str) -> bool:
    """Create a container with a SharedKey-signed request (obstore cannot create one).

    True when it was created or already exists.
    """
    date = formatdate(usegmt=True)
    version = "2021-08-06"
    # Blob service SharedKey string-to-sign: verb, 11 empty standard headers (a zero
    # Content-Length is signed as empty), canonical x-ms-* headers, canonical resource.
    string_to_sign = "\n".join(
        [
            "PUT",
            *[""] * 11,
            f"x-ms-date:{date}\nx-ms-version:{version}",
            f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container",
        ]
    )
    digest = hmac.new(base64.b64decode(AZURITE_KEY), string_to_sign.encode(), hashlib.sha256)
    signature = base64.b64encode(digest.digest()).decode()
    host, port = endpoint.removeprefix("http://").split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "PUT",
            f"/{AZURITE_ACCOUNT}/{container}?restype=container",
            headers={
                "x-ms-date": date,
                "x-ms-version": version,
                "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}",
                "Content-Length": "0",
            },
        )
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status in (201, 409):  # 409: ContainerAlreadyExists
        return True
    if resp.status >= 500:
        return False  # still starting
    raise AssertionError(
        f"Azurite refused to create container {container!r}: {resp.status} {body!r}"
    )


@dataclass
class Backend:
    """A running emulator: where its bucket or container is and how obstore reaches it."""

    name: str
    root: str  # e.g. az://ferroload
    storage_options: dict[str, Any]
    endpoint: str
    _n: int = field(default=0, repr=False)

    def uri(self, label: str) -> str:
        """A fresh, unused prefix under the root."""
        self._n += 1
        return f"{self.root}/{label}-{self._n}-{secrets.token_hex(4)}"

    def store(self, label: str) -> Store:
        return open_store(self.uri(label), storage_options=self.storage_options)


# --------------------------------------------------------------------------- emulators


@pytest.fixture(scope="module", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep any remote-read block cache of these tests out of the user's cache directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FERROLOAD_CACHE_DIR", str(tmp_path_factory.mktemp("ferroload-cache")))
        yield


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """Azurite's blob service on a free loopback port, with one container."""
    exe = shutil.which("azurite-blob")
    if exe is None:
        # Not a Python package, so not in uv.lock: the tests are reported as not run, and
        # fail the run under FERROLOAD_STRICT=1 (.ci/run). See the root conftest.py.
        pytest.skip(
            "service not available: azurite-blob is not on PATH: install it with "
            "`npm install -g azurite@3.35.0` (needs Node.js >= 18; .ci/run does this)"
        )
    workdir = tmp_path_factory.mktemp("azurite")
    log = workdir / "azurite.log"
    port = _free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                exe,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                str(workdir),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    try:
        _wait_until(lambda: _azure_create_container(endpoint, CONTAINER), proc, log, "Azurite")
        yield Backend(
            "azure",
            f"az://{CONTAINER}",
            {
                "account_name": AZURITE_ACCOUNT,
                "account_key": AZURITE_KEY,
                # `use_emulator` would ignore `endpoint` and always use 127.0.0.1:10000
                # (or $AZURITE_BLOB_STORAGE_URL); an explicit endpoint allows any port.
                "endpoint": endpoint,
                "client_options": {"allow_http": True},
                "retry_config": {"max_retries": 2},
            },
            endpoint,
        )
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """gcp-storage-emulator (in memory) on a free loopback port, with one bucket."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        pytest.fail(
            "gcp-storage-emulator is not installed: it is a dev dependency of the workspace "
            "(`uv sync` installs it; or `pip install gcp-storage-emulator`)",
            pytrace=False,
        )
    log = tmp_path_factory.mktemp("gcs") / "gcs-emulator.log"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--in-memory",
                "--default-bucket",
                GCS_BUCKET,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def ready() -> bool:
        with urllib.request.urlopen(f"{base}/storage/v1/b/{GCS_BUCKET}", timeout=5) as r:
            return bool(r.status == 200)

    try:
        _wait_until(ready, proc, log, "gcp-storage-emulator")
        # No OAuth: a service account key whose `disable_oauth` makes obstore send
        # unauthenticated requests to `gcs_base_url`.
        key = {
            "gcs_base_url": base,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        yield Backend(
            "gcs",
            f"gs://{GCS_BUCKET}",
            {
                "service_account_key": json.dumps(key),
                "client_options": {"allow_http": True},
                # the emulator answers 501 to what it lacks; do not retry those
                "retry_config": {"max_retries": 0},
            },
            base,
        )
    finally:
        _stop(proc)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    b: Backend = request.getfixturevalue(request.param)
    return b


# --------------------------------------------------------------------------- Store


def test_put_get_head_list_delete(backend: Backend) -> None:
    store = backend.store("basic")
    store.put("a/one.bin", b"0123456789")
    store.put("a/two.bin", b"x" * 1000)
    store.put("ab.bin", b"y")
    assert store.get("a/one.bin") == b"0123456789"

    info = store.head("a/one.bin")
    assert info.path == "a/one.bin"
    assert info.size == 10
    assert info.etag
    assert store.exists("a/two.bin")
    assert not store.exists("a/none.bin")

    assert [(o.path, o.size) for o in store.list("a/")] == [("a/one.bin", 10), ("a/two.bin", 1000)]
    assert [o.path for o in store.list("a")] == ["a/one.bin", "a/two.bin", "ab.bin"]
    assert [o.path for o in store.list("", offset="a/one.bin")] == ["a/two.bin", "ab.bin"]

    store.put("a/one.bin", b"replaced")  # put overwrites
    assert store.get("a/one.bin") == b"replaced"

    store.delete(["a/one.bin", "a/never-existed.bin"])  # missing keys are ignored
    store.delete("ab.bin")
    assert [o.path for o in store.list("")] == ["a/two.bin"]
    with pytest.raises(ObjectNotFoundError):
        store.get("a/one.bin")
    with pytest.raises(ObjectNotFoundError):
        store.head("ab.bin")


def test_get_range(backend: Backend) -> None:
    store = backend.store("range")
    data = bytes(range(256)) * 64  # 16 KiB
    store.put("obj", data)
    assert store.get_range("obj", 0, 1) == data[:1]
    assert store.get_range("obj", 1000, 3000) == data[1000:4000]
    assert store.get_range("obj", len(data) - 5, 5) == data[-5:]
    with pytest.raises(ObjectTruncatedError) as exc:
        store.get_range("obj", len(data) - 5, 10)
    assert exc.value.size == len(data)
    assert exc.value.end == len(data) + 5
    with pytest.raises(ObjectNotFoundError):
        store.get_range("missing", 0, 1)


def test_get_ranges_coalesced(backend: Backend) -> None:
    store = backend.store("ranges")
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    store.put("obj", data)
    # 200 ranges of 200 bytes, 1 KiB apart, in shuffled order: one region.
    starts = rng.permutation(np.arange(200, dtype=np.int64) * 1024 + 100)
    lengths = np.full(200, 200, dtype=np.int64)
    store.stats.reset()
    views = store.get_ranges("obj", starts, lengths)
    assert [bytes(v) for v in views] == [data[s : s + 200] for s in starts.tolist()]
    assert 1 <= store.stats.get_requests <= 2, store.stats.snapshot()
    # two clusters far apart: still few requests, still exact
    far = np.array([10, 20, 900_000, 900_050], dtype=np.int64)
    views = store.get_ranges("obj", far, np.full(4, 30, dtype=np.int64))
    assert [bytes(v) for v in views] == [data[s : s + 30] for s in far.tolist()]
    with pytest.raises(ObjectTruncatedError):
        store.get_ranges("obj", [0, len(data) - 10], [10, 20])


def test_put_if_absent(backend: Backend) -> None:
    store = backend.store("pia")
    store.put_if_absent("commit.json", b"first")
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("commit.json", b"second")
    assert store.get("commit.json") == b"first"


def test_put_if_absent_race_has_one_winner(backend: Backend) -> None:
    store = backend.store("race")
    n = 8
    barrier = threading.Barrier(n)
    won: list[int] = []
    lost: list[int] = []
    other: list[BaseException] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_absent("00000001.json", f"writer {i}".encode())
        except ObjectExistsError:
            lost.append(i)
        except BaseException as exc:
            other.append(exc)
        else:
            won.append(i)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not other, other
    assert len(won) == 1, (won, lost)
    assert len(lost) == n - 1
    assert store.get("00000001.json") == f"writer {won[0]}".encode()


def test_open_writer_multipart(backend: Backend) -> None:
    store = backend.store("writer")
    rng = np.random.default_rng(3)
    chunks = [rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes() for _ in range(12)]
    data = b"".join(chunks)
    w = store.open_writer("big.tar")
    for c in chunks:
        assert w.write(c) == len(c)
    assert not store.exists("big.tar")  # nothing visible before close
    w.close()
    assert store.head("big.tar").size == len(data)
    assert store.get("big.tar") == data
    boundary = 10 << 20  # obstore's default part size: a read across two parts
    assert store.get_range("big.tar", boundary - 100, 200) == data[boundary - 100 : boundary + 100]

    small = store.open_writer("small.bin")
    small.write(b"tiny")
    small.close()
    assert store.get("small.bin") == b"tiny"

    aborted = store.open_writer("aborted.bin")
    aborted.write(b"never")
    aborted.abort()
    assert not store.exists("aborted.bin")


# --------------------------------------------------------------------------- format


def _payload(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (1 + i % 7)


def test_dataset_round_trip(backend: Backend) -> None:
    uri = backend.uri("dataset")
    opts = backend.storage_options
    n = 200
    with Writer(uri, "emu", shard_size=4 << 10, storage_options=opts) as w:
        w.declare("blob", "bin")
        w.declare("note", "txt", "text")
        for i in range(n):
            data = {"blob": _payload(i)}
            if i % 4 == 0:
                data["note"] = f"note {i}".encode()
            w.add(f"s{i:04d}", data, {"label": i % 3, "caption": f"sample {i}"})
    assert w.version == 1

    ds = Dataset.open(uri, storage_options=opts)
    assert len(ds) == n
    assert ds.num_shards > 1
    s = ds[17]
    assert s["sample_id"] == "s0017"
    assert s["blob"] == _payload(17)
    assert s["note"] is None
    assert s["label"] == 17 % 3
    assert s["caption"] == "sample 17"
    assert ds[-1]["sample_id"] == f"s{n - 1:04d}"
    assert ds.get(40, ["note", "label"]) == {"label": 40 % 3, "note": b"note 40"}

    picks = [5, 199, 0, 64, 5, 123]
    many = ds.get_many(picks)
    assert [m["sample_id"] for m in many] == [f"s{i:04d}" for i in picks]
    assert [m["blob"] for m in many] == [_payload(i) for i in picks]
    assert [m["note"] for m in many] == [
        f"note {i}".encode() if i % 4 == 0 else None for i in picks
    ]

    ones = ds.subset("label = 1")
    expected = [i for i in range(n) if i % 3 == 1]
    assert len(ones) == len(expected)
    assert ones.column("sample_id").to_pylist() == [f"s{i:04d}" for i in expected]
    assert ones[0]["blob"] == _payload(expected[0])
    assert ds.subset("label = 1 AND caption LIKE '%7'", return_indices=True).tolist() == [
        i for i in expected if str(i).endswith("7")
    ]

    report = ds.verify()
    assert report.ok, report.problems
    assert report.shards_checked == ds.num_shards
    assert report.payloads_checked == n + n // 4

    # a second commit (put-if-absent of the next manifest) appends a version
    with Writer(uri, storage_options=opts) as w2:
        w2.add("extra", {"blob": b"more"}, {"label": 1, "caption": "extra"})
    assert Dataset.open(uri, storage_options=opts).version == 2
    assert len(Dataset.open(uri, storage_options=opts)) == n + 1
    assert len(Dataset.open(uri, version=1, storage_options=opts)) == n
    checked = Dataset.open(uri, storage_options=opts, verify_checksums=True)
    assert checked.get_many([0, n])[1]["blob"] == b"more"


def test_a_ferroload_rs_0_1_1_root_reads_and_upgrades(backend: Backend, tmp_path: Path) -> None:
    from ferroload_format import upgrade
    from ferroload_store import open_store
    from ferroload_testing import rs011_dataset

    local = rs011_dataset("mixed", tmp_path / "mixed")
    uri = backend.uri("rs011")
    opts = backend.storage_options
    store = open_store(uri, storage_options=opts)
    for p in sorted(local.rglob("*")):
        if p.is_file():
            store.put(str(p.relative_to(local)), p.read_bytes())
    ds = Dataset.open(uri, storage_options=opts)
    assert (ds.format, len(ds), ds.version) == ("ferroload-rs 0.1.1", 30, 3)
    assert ds.get(9, ["label", "note", "square"]) == {"label": 4, "note": b"note 9", "square": 81}
    assert ds.subset("square > 500", return_indices=True).tolist() == [23, 25, 27, 29]
    assert ds.verify().ok
    assert upgrade(uri, storage_options=opts, progress=False).status == "upgraded"
    up = Dataset.open(uri, storage_options=opts)
    assert (up.format, len(up), up.manifest.checksum_algorithm) == ("ferroload", 30, "xxh3_64")
    assert up.verify().ok
    assert [o.path for o in store.list("index/")] == ["index/part-0000000001.parquet"]


# --------------------------------------------------------------------------- GCS gap


def _gcs_media(gcs: Backend, key: str) -> bytes:
    """An object's bytes through the emulator's JSON API (which it does implement)."""
    url = f"{gcs.endpoint}/download/storage/v1/b/{GCS_BUCKET}/o/{quote(key, safe='')}?alt=media"
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def _gcs_store(gcs: Backend, label: str) -> tuple[Store, str]:
    uri = gcs.uri(label)
    # no block cache: its HEAD (501 here) would hide the read failure asserted below
    return open_store(uri, storage_options=gcs.storage_options, cache=None), uri.split("/", 3)[3]


def test_gcs_emulator_reached_and_not_found_maps(gcs_emulator: Backend) -> None:
    """The configuration is right: requests reach the emulator, a 404 maps to
    ObjectNotFoundError."""
    store, _ = _gcs_store(gcs_emulator, "reach")
    with pytest.raises(ObjectNotFoundError):
        store.get("missing.bin")
    with pytest.raises(ObjectNotFoundError):
        store.get_range("missing.bin", 0, 4)


def test_gcs_emulator_xml_responses_lack_metadata_headers(gcs_emulator: Backend) -> None:
    """The emulator's XML PUT stores the bytes but sends no ETag; its XML GET sends no
    Last-Modified. obstore needs both, so every write and read fails."""
    store, prefix = _gcs_store(gcs_emulator, "headers")
    with pytest.raises(StoreError, match="ETag Header missing from response"):
        store.put("x.bin", b"hello")
    assert _gcs_media(gcs_emulator, f"{prefix}/x.bin") == b"hello"  # it did land
    for read in (
        lambda: store.get("x.bin"),
        lambda: store.get_range("x.bin", 1, 3),
        lambda: store.get_ranges("x.bin", [0, 2], [1, 2]),
    ):
        with pytest.raises(StoreError, match="Last-Modified Header missing from response"):
            read()


@pytest.mark.parametrize("op", ["head", "list", "delete", "multipart"])
def test_gcs_emulator_xml_api_not_implemented(gcs_emulator: Backend, op: str) -> None:
    """HEAD, DELETE, list (`?list-type=2`) and multipart upload (`POST ?uploads`) of the
    XML API are answered 501 Not Implemented."""
    store, _ = _gcs_store(gcs_emulator, op)

    def multipart() -> None:
        w = store.open_writer("big.bin")
        w.write(bytes(11 << 20))  # past obstore's 10 MiB buffer: a multipart upload
        w.close()

    calls: dict[str, Callable[[], object]] = {
        "head": lambda: store.head("x.bin"),
        "list": lambda: store.list(""),
        "delete": lambda: store.delete("x.bin"),
        "multipart": multipart,
    }
    # ObjectWriter does not translate obstore's errors into StoreError (yet)
    with pytest.raises((StoreError, obx.GenericError), match="501 Not Implemented"):
        calls[op]()


def test_gcs_emulator_ignores_put_preconditions(gcs_emulator: Backend) -> None:
    """put-if-absent sends `x-goog-if-generation-match: 0`; the emulator ignores it and
    overwrites, so it cannot host the commit primitive even with the headers fixed."""
    store, prefix = _gcs_store(gcs_emulator, "precondition")
    with pytest.raises(StoreError, match="ETag Header missing"):
        store.put("m.json", b"first")
    with pytest.raises(StoreError, match="ETag Header missing"):
        store.put_if_absent("m.json", b"second")
    assert _gcs_media(gcs_emulator, f"{prefix}/m.json") == b"second"
