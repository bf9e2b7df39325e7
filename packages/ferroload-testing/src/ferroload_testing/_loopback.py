"""The loopback address every helper listens on, and a free port on it.

Neither the moto server nor the fault proxy reaches anything but 127.0.0.1.
"""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])
