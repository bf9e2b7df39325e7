"""One side of a proxied HTTP/1.1 connection: a socket and its h11 state machine.

h11 does the framing: message heads, `Content-Length`, chunked and close-delimited
bodies, `Connection: close`, HTTP/1.0 peers and the bodiless answers to `HEAD`, 204 and
304. The proxy moves h11 events from one side to the other.
"""

from __future__ import annotations

import contextlib
import socket

import h11

#: Bytes per recv. h11 copies what it receives into its buffer and out again; at 64 KiB
#: those copies stay below the allocator's mmap threshold and the proxy relays hundreds
#: of MB/s, at 256 KiB each copy maps fresh pages and h11 alone tops out near 300 MB/s.
RECV_SIZE = 1 << 16
#: The longest message head accepted (h11's default is 16 KiB).
MAX_HEAD = 1 << 20


class PeerClosedError(Exception):
    """A peer closed its connection, broke it, or broke the protocol."""


class Peer:
    """A socket and the h11 connection that frames what goes over it.

    Args:
        sock: the connected socket.
        role: `h11.SERVER` for the side facing a client, `h11.CLIENT` for the side
            facing the target server.
    """

    __slots__ = ("conn", "sock")

    def __init__(self, sock: socket.socket, role: type[h11.CLIENT] | type[h11.SERVER]) -> None:
        self.sock = sock
        self.conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD)

    def receive(self) -> h11.Event:
        """The next event from the peer, reading from the socket as needed.

        Returns `h11.ConnectionClosed` at a clean end of the connection (between
        messages).

        Raises:
            PeerClosedError: if the peer closed or broke the connection mid-message or
                sent something that is not HTTP/1.1.
        """
        try:
            while True:
                event = self.conn.next_event()
                if event is h11.NEED_DATA:
                    self.conn.receive_data(self.sock.recv(RECV_SIZE))
                elif event is h11.PAUSED:
                    raise PeerClosedError("the peer sent a request out of turn")
                else:
                    assert isinstance(event, h11.Event)
                    return event
        except (h11.ProtocolError, OSError) as exc:
            raise PeerClosedError(str(exc)) from exc

    def receive_request(self) -> h11.Request | None:
        """The next request head from a client; None at a clean end of the connection."""
        event = self.receive()
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            raise PeerClosedError(f"expected a request, got {event!r}")
        return event

    def receive_response(self, interim_to: Peer | None) -> h11.Response:
        """The next final response head from a server.

        Interim responses (`100 Continue`, ...) before it are sent on to `interim_to`, or
        dropped when it is None.
        """
        while True:
            event = self.receive()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise PeerClosedError(f"expected a response, got {event!r}")
            if interim_to is not None:
                interim_to.send(event)

    def relay_body(self, dst: Peer | None) -> int:
        """Move the body of the current message to `dst` (or drop it when `dst` is None).

        Returns:
            the body's length in bytes (without chunked framing).
        """
        total = 0
        while True:
            event = self.receive()
            if isinstance(event, h11.Data):
                total += len(event.data)
            elif not isinstance(event, h11.EndOfMessage):
                raise PeerClosedError(f"the body ended early: {event!r}")
            if dst is not None:
                dst.send(event)
            if isinstance(event, h11.EndOfMessage):
                return total

    def send(self, event: h11.Event) -> None:
        """Frame `event` and send it."""
        try:
            data = self.conn.send(event)
        except h11.ProtocolError as exc:
            raise PeerClosedError(str(exc)) from exc
        if data:
            self.sock.sendall(data)

    def next_cycle(self) -> bool:
        """Get ready for the next message; False when the connection cannot carry one."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False


def close_socket(sock: socket.socket) -> None:
    """Shut `sock` down and close it, ignoring a peer that is gone already."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
