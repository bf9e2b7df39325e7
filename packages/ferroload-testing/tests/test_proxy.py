"""FaultProxy against a plain HTTP/1.1 server: framing, keep-alive, the faults."""

from __future__ import annotations

import functools
import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ferroload_testing import FaultProxy, ProxyStats


class EchoHandler(BaseHTTPRequestHandler):
    """GET /fixed/<n>: n bytes with Content-Length; GET /chunked/<n>: n bytes chunked;
    POST: echoes the body (Content-Length or chunked)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    seen: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _payload(self) -> bytes:
        return expected(int(self.path.rsplit("/", 1)[1]))

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = self._payload()
        self.send_response(200)
        if self.path.startswith("/chunked/"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 1000):
                piece = body[i : i + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.seen.append("HEAD " + self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self._payload())))
        self.end_headers()

    def do_POST(self) -> None:
        self.seen.append("POST " + self.path)
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo() -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (EchoHandler,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


@functools.cache
def expected(n: int) -> bytes:
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def test_relays_many_requests_over_one_keep_alive_connection(echo: tuple[int, list[str]]) -> None:
    port, seen = echo
    with FaultProxy("127.0.0.1", port) as proxy:
        conn = http.client.HTTPConnection(*proxy.address, timeout=10)
        conn.request("GET", "/fixed/300000")
        assert conn.getresponse().read() == expected(300_000)
        conn.request("GET", "/chunked/5500")
        assert conn.getresponse().read() == expected(5500)
        conn.request("HEAD", "/fixed/77")
        response = conn.getresponse()
        assert response.getheader("Content-Length") == "77" and response.read() == b""
        conn.request("POST", "/echo", body=b"x" * 100_000)
        assert conn.getresponse().read() == b"x" * 100_000
        conn.request("POST", "/echo", body=iter([b"ab", b"cde"]), encode_chunked=True)
        assert conn.getresponse().read() == b"abcde"
        conn.close()
        stats = proxy.stats()
    assert stats.connections == 1
    assert stats.requests == stats.forwarded == 5
    assert stats.bytes >= 300_000 + 5500 + 100_000 + 5
    assert len(seen) == 5


def _fates(port: int, seed: int, n: int = 40) -> tuple[list[str], ProxyStats]:
    fates = []
    with FaultProxy("127.0.0.1", port, error_rate=0.3, drop_rate=0.2, seed=seed) as proxy:
        conn = http.client.HTTPConnection(*proxy.address, timeout=10)
        for _ in range(n):
            try:
                conn.request("GET", "/fixed/10")
                response = conn.getresponse()
                body = response.read()
                fates.append("ok" if response.status == 200 and body == expected(10) else "503")
            except (http.client.HTTPException, OSError):
                fates.append("drop")
                conn.close()
                conn = http.client.HTTPConnection(*proxy.address, timeout=10)
        conn.close()
        return fates, proxy.stats()


def test_faults_are_deterministic_given_the_seed(echo: tuple[int, list[str]]) -> None:
    port, seen = echo
    a, stats = _fates(port, seed=5)
    b, _ = _fates(port, seed=5)
    c, _ = _fates(port, seed=6)
    assert a == b and a != c
    assert {"ok", "503", "drop"} <= set(a)
    assert stats.errors_injected == a.count("503")
    assert stats.drops_injected == a.count("drop")
    assert stats.forwarded == a.count("ok")
    assert len(seen) == a.count("ok") + b.count("ok") + c.count("ok")  # faults never reach it


def test_lost_answers_reach_the_server(echo: tuple[int, list[str]]) -> None:
    port, seen = echo
    with FaultProxy("127.0.0.1", port, lose_rate=1.0) as proxy:
        conn = http.client.HTTPConnection(*proxy.address, timeout=10)
        conn.request("POST", "/commit", body=b"1")
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.getresponse()
        assert proxy.stats().answers_lost == 1
        proxy.reset_stats()
        assert proxy.stats() == ProxyStats()
    assert seen == ["POST /commit"]


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="sum to at most 1"):
        FaultProxy("127.0.0.1", 1, error_rate=0.6, drop_rate=0.6)
    with pytest.raises(ValueError, match="delay"):
        FaultProxy("127.0.0.1", 1, delay=-1)
    with pytest.raises(RuntimeError, match="not running"):
        _ = FaultProxy("127.0.0.1", 1).endpoint
