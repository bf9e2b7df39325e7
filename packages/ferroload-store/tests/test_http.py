"""Read-only HTTP(S) stores, against a plain `http.server` that serves byte ranges."""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferroload_store import (
    IOOptions,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StoreError,
    UnsupportedOperationError,
    open_store,
)


class RangeHandler(SimpleHTTPRequestHandler):
    """The standard library's file server, plus `Range: bytes=a-b` (as any web server)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    requests: list[str]  # set per server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def parse_request(self) -> bool:
        # recorded before the answer goes out: the client may look as soon as it has it
        ok = super().parse_request()
        if self.requestline:
            self.requests.append(self.requestline.split(" ", 1)[0])
        return ok

    def send_head(self) -> Any:
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if match is None or not os.path.isfile(path):
            return super().send_head()
        data = Path(path).read_bytes()
        first = int(match[1])
        last = min(int(match[2]) if match[2] else len(data) - 1, len(data) - 1)
        if first >= len(data):
            self.send_error(416)
            return None
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()
        return io.BytesIO(data[first : last + 1])


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """(URL of `tmp_path/ds` served over HTTP, the directory, the methods requested)."""
    (tmp_path / "ds").mkdir()
    requests: list[str] = []
    handler = type("Handler", (RangeHandler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ds", tmp_path / "ds", requests
    finally:
        server.shutdown()
        server.server_close()


def test_reads_over_plain_http(http_root: tuple[str, Path, list[str]]) -> None:
    url, root, _ = http_root
    data = bytes(range(256)) * 400
    (root / "shard.tar").write_bytes(data)
    store = open_store(url, storage_options={"allow_http": True}, io=IOOptions(part_size=40_000))
    assert store.get("shard.tar") == data
    assert store.head("shard.tar").size == len(data)
    assert store.get_range("shard.tar", 1000, 50_000) == data[1000:51_000]
    views = store.get_ranges("shard.tar", np.array([5, 60_000, 100]), np.array([10, 20, 30]))
    assert [bytes(v) for v in views] == [data[5:15], data[60_000:60_020], data[100:130]]
    with store.open_input("shard.tar") as f:
        f.seek(70_000)
        assert f.read(4) == data[70_000:70_004]
    with pytest.raises(ObjectNotFoundError):
        store.get("missing")
    with pytest.raises(ObjectTruncatedError) as info:
        store.get_range("shard.tar", len(data) - 5, 10)
    assert info.value.size == len(data)


def test_http_has_no_conditional_put(http_root: tuple[str, Path, list[str]]) -> None:
    url, _, requests = http_root
    store = open_store(url, storage_options={"allow_http": True})
    with pytest.raises(UnsupportedOperationError) as info:
        store.put_if_absent("_versions/1.json", b"{}")
    assert "conditional put" in str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert requests == []  # refused before any request


def test_a_501_is_permanent(http_root: tuple[str, Path, list[str]]) -> None:
    """`501 Not Implemented` is a 5xx that no retry cures: one request, a clear error."""
    url, _, requests = http_root
    store = open_store(url, storage_options={"allow_http": True}, io=IOOptions(retries=3))
    with pytest.raises(StoreError) as info:
        store.put("x", b"1")
    assert "501" in str(info.value)
    assert requests == ["PUT"]
    assert store.stats.retries == 0
