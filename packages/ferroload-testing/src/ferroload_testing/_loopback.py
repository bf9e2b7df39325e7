"""What every helper shares: the loopback address it listens on, a free port, `with` blocks.

Neither the moto server nor the fault proxy reaches anything but 127.0.0.1.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


class LoopbackService(ABC):
    """A helper that listens on 127.0.0.1: `start()` and `stop()` it, or use `with`."""

    @abstractmethod
    def start(self) -> Self:
        """Start listening (a no-op when it runs already)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop (a no-op when it is not running)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
