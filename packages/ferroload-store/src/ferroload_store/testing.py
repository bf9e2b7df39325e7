"""Test helpers: a real S3 server, and a proxy that injects latency and faults.

* [`MotoServer`][ferroload_store.testing.MotoServer] runs moto's S3 server
  (`pip install "moto[server]"`) in a child process on 127.0.0.1 and a free port, and
  gives the `storage_options` that point a store at it.
* [`FaultProxy`][ferroload_store.testing.FaultProxy] sits between a client and an HTTP
  server: it adds a fixed delay to each request, answers some requests with a 503 itself,
  drops some connections mid-request, and loses some answers after the server acted,
  deterministically given a seed. It relays
  HTTP/1.1 keep-alive connections (several requests each), fast enough for benchmarks
  (hundreds of MB/s).

Importing this module needs only the standard library; moto is needed when a
`MotoServer` starts. Neither helper reaches anything but 127.0.0.1.

A typical test setup (a store reading moto's S3 through a slow, flaky network):

```python
from ferroload_store import IOOptions, open_store
from ferroload_store.testing import FaultProxy, MotoServer

with MotoServer() as s3, FaultProxy(*s3.address, delay=0.02, error_rate=0.1) as proxy:
    s3.create_bucket("data")
    store = open_store(
        "s3://data/ds",
        storage_options=s3.storage_options(endpoint=proxy.endpoint),
        io=IOOptions(retries=8),
    )
    store.put("a", b"hello")
    assert store.get("a") == b"hello"
```
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = ["FaultProxy", "MotoServer", "ProxyStats"]

logger = logging.getLogger(__name__)

_LOCALHOST = "127.0.0.1"


def _free_port() -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOCALHOST, 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------- moto

# The server's main program. moto 5.2.5's conditional put checks `If-None-Match: *` and
# then writes, without a lock: two concurrent creates of one key can both "win". Writes
# (every method but GET/HEAD/OPTIONS) are therefore serialised, which makes the check and
# the write atomic, as on S3; reads stay concurrent. Request logging is off (it costs
# more than a request).
_MOTO_MAIN = """
import logging, signal, sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app,
)

host, port = sys.argv[1], int(sys.argv[2])
logging.getLogger("werkzeug").setLevel(logging.ERROR)
app = DomainDispatcherApplication(create_backend_app)
write_lock = threading.Lock()

def serialized_writes(environ, start_response):
    if environ.get("REQUEST_METHOD", "GET") in ("GET", "HEAD", "OPTIONS"):
        return app(environ, start_response)
    with write_lock:
        return list(app(environ, start_response))

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
run_simple(host, port, serialized_writes, threaded=True, request_handler=MotoRequestHandler)
"""


class MotoServer:
    """moto's S3 server in a child process, on 127.0.0.1 and a free port.

    Starts on `start()` or when entering the `with` block, and waits until it answers.
    Every bucket lives in the server's memory and disappears with it.

    moto 5.2.5 checks a conditional put (`If-None-Match: *`) and then writes without a
    lock, so two concurrent creates of one key can both succeed. This server runs writes
    one at a time (reads stay concurrent), which makes conditional puts atomic, as on S3.

    Args:
        region: the region the `storage_options` name.
        startup_timeout: seconds to wait for the server to answer before giving up.

    ```python
    with MotoServer() as s3:
        s3.create_bucket("data")
        store = open_store("s3://data/ds", storage_options=s3.storage_options())
    ```
    """

    def __init__(self, *, region: str = "us-east-1", startup_timeout: float = 60.0) -> None:
        self.region = region
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on."""
        self._check_running()
        return (_LOCALHOST, self._port)

    @property
    def endpoint(self) -> str:
        """The server's URL, `http://127.0.0.1:<port>`."""
        self._check_running()
        return f"http://{_LOCALHOST}:{self._port}"

    def _check_running(self) -> None:
        if self._proc is None:
            raise RuntimeError("the moto server is not running; call start() first")

    def start(self) -> MotoServer:
        """Start the server and wait until it answers (a no-op when it runs already).

        Raises:
            RuntimeError: if moto is not installed or the server does not come up in time.
        """
        if self._proc is not None:
            return self
        last: BaseException | None = None
        for _ in range(3):  # the free port can be taken between choosing and binding it
            port = _free_port()
            log = tempfile.TemporaryFile()  # noqa: SIM115  (closed on every path below)
            proc = subprocess.Popen(
                [sys.executable, "-c", _MOTO_MAIN, _LOCALHOST, str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "MOTO_PORT": str(port)},
            )
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    last = RuntimeError(f"moto server exited with {proc.returncode}: {err[-2000:]}")
                    break
                try:
                    url = f"http://{_LOCALHOST}:{port}/moto-api/"
                    with urllib.request.urlopen(url, timeout=2) as resp:
                        resp.read()
                except (OSError, urllib.error.URLError) as exc:
                    last = exc
                    time.sleep(0.05)
                    continue
                log.close()  # the child keeps writing to its own copy (rarely: errors only)
                self._proc, self._port = proc, port
                logger.debug("moto S3 server on port %d", port)
                return self
            _terminate(proc)
            log.close()
            if isinstance(last, RuntimeError) and "No module named" in str(last):
                break
        raise RuntimeError(
            f"could not start the moto S3 server (pip install 'moto[server]'): {last}"
        )

    def stop(self) -> None:
        """Stop the server (a no-op when it is not running)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc)

    def create_bucket(self, name: str) -> None:
        """Create bucket `name` (a no-op if it exists already).

        Raises:
            ValueError: if S3 rejects the name (3 to 63 lowercase letters, digits, `-`, `.`).
        """
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            if "BucketAlreadyOwnedByYou" in body:
                return
            raise ValueError(f"moto refused to create bucket {name!r}: {exc.code} {body}") from exc

    def storage_options(
        self, bucket: str | None = None, *, endpoint: str | None = None
    ) -> dict[str, Any]:
        """The `storage_options` that point a store at this server.

        Args:
            bucket: a bucket to create first, if it does not exist yet.
            endpoint: another endpoint to use instead of the server's own (a
                [`FaultProxy`][ferroload_store.testing.FaultProxy] in front of it).

        Returns:
            obstore configuration: endpoint, region, dummy credentials, plain HTTP.
        """
        if bucket is not None:
            self.create_bucket(bucket)
        return {
            "endpoint": endpoint or self.endpoint,
            "region": self.region,
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "allow_http": True,
            "virtual_hosted_style_request": False,
        }

    def environ(self, *, endpoint: str | None = None) -> dict[str, str]:
        """The same settings as `AWS_*` environment variables (obstore reads them)."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port {self._port}" if self._proc is not None else "stopped"
        return f"MotoServer({state})"


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------- proxy


@dataclass(frozen=True)
class ProxyStats:
    """What a [`FaultProxy`][ferroload_store.testing.FaultProxy] saw.

    Attributes:
        connections: client connections accepted.
        requests: requests received (whatever happened to them).
        forwarded: requests forwarded to the target and answered.
        errors_injected: requests answered with a 503 by the proxy itself.
        drops_injected: connections dropped mid-request, without an answer.
        answers_lost: requests forwarded whose answer was never relayed.
        bytes: response bytes relayed from the target to clients.
        peak_in_flight: the most requests forwarded at the same time (waiting out the
            delay or the target's answer).
    """

    connections: int = 0
    requests: int = 0
    forwarded: int = 0
    errors_injected: int = 0
    drops_injected: int = 0
    answers_lost: int = 0
    bytes: int = 0
    peak_in_flight: int = 0


class _ClosedError(Exception):
    """A peer closed its connection (or it broke)."""


_RECV = 1 << 18  # bytes per recv: large enough to relay hundreds of MB/s in Python


class _Conn:
    """A socket with a read buffer, enough to parse HTTP/1.1 messages and relay bodies."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> None:
        chunk = self.sock.recv(_RECV)
        if not chunk:
            raise _ClosedError
        self.buf += chunk

    def read_head(self) -> bytes | None:
        """The next message head (up to and including the blank line); None at a clean EOF."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buf[: end + 4])
                del self.buf[: end + 4]
                return head
            if len(self.buf) > 1 << 20:
                raise _ClosedError  # not HTTP
            try:
                self._fill()
            except _ClosedError:
                if self.buf:
                    raise
                return None

    def read_line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buf[: end + 2])
                del self.buf[: end + 2]
                return line
            self._fill()

    def relay(self, n: int, dst: socket.socket | None) -> int:
        """Move exactly `n` body bytes to `dst` (or discard them when `dst` is None)."""
        left = n
        if self.buf:
            take = min(left, len(self.buf))
            if dst is not None:
                dst.sendall(self.buf[:take])
            del self.buf[:take]
            left -= take
        while left:
            chunk = self.sock.recv(min(left, _RECV))
            if not chunk:
                raise _ClosedError
            if dst is not None:
                dst.sendall(chunk)
            left -= len(chunk)
        return n

    def relay_chunked(self, dst: socket.socket | None) -> int:
        """Move a chunked body (chunks, last chunk, trailers) to `dst` unchanged."""
        total = 0
        while True:
            line = self.read_line()
            if dst is not None:
                dst.sendall(line)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            total += self.relay(size + 2, dst)  # the data and its CRLF
        while True:  # trailers up to the blank line
            line = self.read_line()
            if dst is not None:
                dst.sendall(line)
            if line == b"\r\n":
                return total

    def relay_to_eof(self, dst: socket.socket) -> int:
        total = len(self.buf)
        if self.buf:
            dst.sendall(self.buf)
            self.buf.clear()
        while True:
            chunk = self.sock.recv(_RECV)
            if not chunk:
                return total
            dst.sendall(chunk)
            total += len(chunk)


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The start line and the headers (lower-cased names; the last of repeated ones)."""
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _body_framing(headers: dict[str, str]) -> tuple[bool, int | None]:
    """(chunked, content length) of a message; (False, None) when neither is given."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return True, None
    if "content-length" in headers:
        return False, int(headers["content-length"])
    return False, None


_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>injected by FaultProxy</Message></Error>"
)
_ERROR_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
    + f"Content-Length: {len(_ERROR_BODY)}\r\n\r\n".encode()
    + _ERROR_BODY
)


class FaultProxy:
    """An HTTP/1.1 reverse proxy on 127.0.0.1 that adds latency and injects faults.

    Each request gets one fate, decided by one draw `r = random.Random(seed).random()` in
    arrival order: `r < error_rate`: the proxy answers `503 Service Unavailable` itself
    (the request never reaches the target); else `r < error_rate + drop_rate`: it closes
    the client's connection without an answer; else `r < error_rate + drop_rate +
    lose_rate`: it forwards the request but closes the connection instead of relaying the
    answer (the server acted, the client cannot know); otherwise it waits `delay` seconds
    and forwards the request. Keep-alive connections carry many requests; bodies are framed by
    `Content-Length` or chunked encoding, as HTTP/1.1 says. The `Host` header is passed on
    unchanged, so signed requests (S3 SigV4) stay valid for servers that check them.

    The rates and the delay are plain attributes: change them at any time.

    Args:
        target_host: host of the server to forward to.
        target_port: its port.
        delay: seconds to wait before forwarding each request.
        error_rate: fraction of requests answered with a 503.
        drop_rate: fraction of requests whose connection is dropped.
        lose_rate: fraction of requests forwarded whose answer is lost.
        seed: seed of the fate generator; the same seed gives the same sequence of fates.

    ```python
    with FaultProxy("127.0.0.1", 9000, delay=0.02, error_rate=0.1) as proxy:
        ...  # point the client at proxy.endpoint
        print(proxy.stats().errors_injected)
    ```
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        delay: float = 0.0,
        error_rate: float = 0.0,
        drop_rate: float = 0.0,
        lose_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay}")
        rates = (error_rate, drop_rate, lose_rate)
        if not all(0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0:
            raise ValueError(
                "error_rate, drop_rate and lose_rate must lie in [0, 1] and sum to at most 1"
            )
        self.target = (target_host, int(target_port))
        self.delay = delay
        self.error_rate = error_rate
        self.drop_rate = drop_rate
        self.lose_rate = lose_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(ProxyStats.__dataclass_fields__, 0)
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._open: set[socket.socket] = set()
        self._in_flight = 0
        self._port = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the proxy listens on."""
        if self._listener is None:
            raise RuntimeError("the proxy is not running; call start() first")
        return (_LOCALHOST, self._port)

    @property
    def endpoint(self) -> str:
        """The proxy's URL, `http://127.0.0.1:<port>`."""
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        """Listen on a free port and start accepting connections."""
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((_LOCALHOST, 0))
        listener.listen(128)
        self._listener = listener
        self._port = int(listener.getsockname()[1])
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"FaultProxy:{self._port}", daemon=True
        )
        self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close every open connection."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        with self._lock:
            open_socks = list(self._open)
        for sock in open_socks:
            _close(sock)
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ counters

    def stats(self) -> ProxyStats:
        """The counters so far."""
        with self._lock:
            return ProxyStats(**self._counts)

    def reset_stats(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _fate(self) -> str:
        with self._lock:
            self._counts["requests"] += 1
            r = self._rng.random()
        if r < self.error_rate:
            return "error"
        if r < self.error_rate + self.drop_rate:
            return "drop"
        if r < self.error_rate + self.drop_rate + self.lose_rate:
            return "lose"
        return "forward"

    # ------------------------------------------------------------------ relaying

    def _accept_loop(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._counts["connections"] += 1
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client_sock: socket.socket) -> None:
        client = _Conn(client_sock)
        upstream: _Conn | None = None
        try:
            while True:
                head = client.read_head()
                if head is None:
                    return
                start_line, headers = _parse_head(head)
                method = start_line.split(" ", 1)[0].upper()
                chunked, length = _body_framing(headers)
                fate = self._fate()
                if fate == "drop":
                    self._count("drops_injected")
                    return  # closes the client mid-request, without an answer
                if fate == "error":
                    # Read the request body so that the connection stays usable.
                    if chunked:
                        client.relay_chunked(None)
                    elif length:
                        client.relay(length, None)
                    client_sock.sendall(_ERROR_RESPONSE)
                    self._count("errors_injected")
                    continue
                with self._lock:
                    self._in_flight += 1
                    peak = self._counts["peak_in_flight"]
                    self._counts["peak_in_flight"] = max(peak, self._in_flight)
                ended = [False]  # the request left the in-flight count (idempotent end)
                try:
                    if self.delay:
                        time.sleep(self.delay)
                    if upstream is None:
                        upstream = self._connect()
                    upstream.sock.sendall(head)
                    if chunked:
                        client.relay_chunked(upstream.sock)
                    elif length:
                        client.relay(length, upstream.sock)
                    if fate == "lose":
                        upstream.read_head()  # the target acted on the request
                        self._count("answers_lost")
                        return
                    keep_alive = self._relay_response(upstream, client_sock, method, ended)
                finally:
                    self._end_request(ended)
                if not keep_alive or "close" in headers.get("connection", "").lower():
                    return
        except (_ClosedError, OSError, ValueError):
            return
        finally:
            with self._lock:
                self._open.discard(client_sock)
            _close(client_sock)
            if upstream is not None:
                with self._lock:
                    self._open.discard(upstream.sock)
                _close(upstream.sock)

    def _connect(self) -> _Conn:
        sock = socket.create_connection(self.target, timeout=60)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.add(sock)
        return _Conn(sock)

    def _end_request(self, ended: list[bool]) -> None:
        with self._lock:
            if not ended[0]:
                ended[0] = True
                self._in_flight -= 1

    def _relay_response(
        self, upstream: _Conn, client: socket.socket, method: str, ended: list[bool]
    ) -> bool:
        """Relay one response; True when the connection may carry another request.

        The counters are updated, and the request leaves the in-flight count, before the
        response's last byte reaches the client: a client which got its answer sees it
        counted, and its next request never overlaps this one in `peak_in_flight`.
        """
        while True:
            head = upstream.read_head()
            if head is None:
                raise _ClosedError
            status_line, headers = _parse_head(head)
            parts = status_line.split(" ", 2)
            status = int(parts[1])
            if 100 <= status < 200 and status != 101:
                client.sendall(head)
                continue  # an interim answer; the real one follows
            break
        version = parts[0].upper()
        conn = headers.get("connection", "").lower()
        keep_alive = "close" not in conn and (version != "HTTP/1.0" or "keep-alive" in conn)
        chunked, length = _body_framing(headers)
        if method == "HEAD" or status in (204, 304):
            chunked, length = False, 0
        if not chunked and length is not None:
            self._count_response(length)
            self._end_request(ended)
            client.sendall(head)
            upstream.relay(length, client)
            return keep_alive
        client.sendall(head)
        if chunked:
            n = upstream.relay_chunked(client)
        else:
            n = upstream.relay_to_eof(client)
            keep_alive = False
        self._count_response(n)
        self._end_request(ended)
        return keep_alive

    def _count_response(self, nbytes: int) -> None:
        with self._lock:
            self._counts["forwarded"] += 1
            self._counts["bytes"] += nbytes

    def __repr__(self) -> str:
        where = self.endpoint if self._listener is not None else "stopped"
        return (
            f"FaultProxy({where} -> {self.target[0]}:{self.target[1]}, delay={self.delay}, "
            f"error_rate={self.error_rate}, drop_rate={self.drop_rate}, "
            f"lose_rate={self.lose_rate})"
        )


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
