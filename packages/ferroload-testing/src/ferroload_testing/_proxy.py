"""`FaultProxy`: an HTTP/1.1 reverse proxy on 127.0.0.1 that adds latency and injects faults."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from typing import Literal, Self

import h11

from ferroload_testing._http import Peer, PeerClosedError, close_socket
from ferroload_testing._loopback import LOCALHOST, LoopbackService
from ferroload_testing._stats import Counters, InFlight, ProxyStats

_Fate = Literal["forward", "error", "drop", "lose"]

_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>injected by FaultProxy</Message></Error>"
)
_ERROR_HEADERS = [
    ("Content-Type", "application/xml"),
    ("Content-Length", str(len(_ERROR_BODY))),
]


class FaultProxy(LoopbackService):
    """An HTTP/1.1 reverse proxy on 127.0.0.1 that adds latency and injects faults.

    Each request gets one fate, decided by one draw `r = random.Random(seed).random()` in
    arrival order: `r < error_rate`: the proxy answers `503 Service Unavailable` itself
    (the request never reaches the target); else `r < error_rate + drop_rate`: it closes
    the client's connection without an answer; else `r < error_rate + drop_rate +
    lose_rate`: it forwards the request but closes the connection instead of relaying the
    answer (the server acted, the client cannot know); otherwise it waits `delay` seconds
    and forwards the request. Keep-alive connections carry many requests; messages are
    framed by h11 (`Content-Length`, chunked or close-delimited bodies, as HTTP/1.1
    says). The `Host` header is passed on unchanged, so signed requests (S3 SigV4) stay
    valid for servers that check them.

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
        self._lock = threading.Lock()  # the generator and the open sockets
        self._counters = Counters()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._open: set[socket.socket] = set()
        self._port = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the proxy listens on."""
        if self._listener is None:
            raise RuntimeError("the proxy is not running; call start() first")
        return (LOCALHOST, self._port)

    @property
    def endpoint(self) -> str:
        """The proxy's URL, `http://127.0.0.1:<port>`."""
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> Self:
        """Listen on a free port and start accepting connections."""
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOCALHOST, 0))
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
            close_socket(sock)
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)

    # ------------------------------------------------------------------ counters

    def stats(self) -> ProxyStats:
        """The counters so far."""
        return self._counters.snapshot()

    def reset_stats(self) -> None:
        """Set every counter back to zero."""
        self._counters.reset()

    def _fate(self) -> _Fate:
        with self._lock:
            self._counters.add("requests")
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
            self._counters.add("connections")
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client_sock: socket.socket) -> None:
        """Serve one client connection, request after request, until either side closes."""
        client = Peer(client_sock, h11.SERVER)
        upstream: Peer | None = None
        try:
            while True:
                request = client.receive_request()
                if request is None:
                    return
                fate = self._fate()
                if fate == "drop":
                    self._counters.add("drops_injected")
                    return  # closes the client mid-request, without an answer
                if fate == "error":
                    self._answer_error(client)
                else:
                    if upstream is None:
                        upstream = self._connect()
                    if not self._forward(request, client, upstream, lose=fate == "lose"):
                        return
                    if not upstream.next_cycle():  # the target closes after this answer
                        self._close(upstream.sock)
                        upstream = None
                if not client.next_cycle():
                    return
        except (PeerClosedError, OSError):
            return
        finally:
            self._close(client_sock)
            if upstream is not None:
                self._close(upstream.sock)

    def _answer_error(self, client: Peer) -> None:
        """Answer the current request with a 503, after reading its body."""
        client.relay_body(None)  # so that the connection stays usable
        self._counters.add("errors_injected")
        client.send(
            h11.Response(status_code=503, headers=_ERROR_HEADERS, reason=b"Service Unavailable")
        )
        client.send(h11.Data(data=_ERROR_BODY))
        client.send(h11.EndOfMessage())

    def _forward(self, request: h11.Request, client: Peer, upstream: Peer, *, lose: bool) -> bool:
        """Forward one request and relay its answer; False when the answer is lost."""
        flight = self._counters.enter()
        try:
            if self.delay:
                time.sleep(self.delay)
            upstream.send(request)
            client.relay_body(upstream)
            if lose:
                upstream.receive_response(None)  # the target acted on the request
                self._counters.add("answers_lost")
                return False
            self._relay_response(upstream, client, flight)
            return True
        finally:
            flight.end()

    def _relay_response(self, upstream: Peer, client: Peer, flight: InFlight) -> None:
        """Relay one response from `upstream` to `client`.

        Each event is held back until the next one arrives, so that the counters are
        updated, and the request leaves the in-flight count, before the response's last
        byte reaches the client: a client which got its answer sees it counted, and its
        next request never overlaps this one in `peak_in_flight`.
        """
        held: h11.Event = upstream.receive_response(client)
        nbytes = 0
        while True:
            event = upstream.receive()
            if isinstance(event, h11.EndOfMessage):
                break
            if not isinstance(event, h11.Data):
                raise PeerClosedError(f"the response ended early: {event!r}")
            client.send(held)
            held = event
            nbytes += len(event.data)
        self._counters.answered(nbytes)
        flight.end()
        client.send(held)
        client.send(event)

    def _connect(self) -> Peer:
        sock = socket.create_connection(self.target, timeout=60)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.add(sock)
        return Peer(sock, h11.CLIENT)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        close_socket(sock)

    def __repr__(self) -> str:
        where = self.endpoint if self._listener is not None else "stopped"
        return (
            f"FaultProxy({where} -> {self.target[0]}:{self.target[1]}, delay={self.delay}, "
            f"error_rate={self.error_rate}, drop_rate={self.drop_rate}, "
            f"lose_rate={self.lose_rate})"
        )
