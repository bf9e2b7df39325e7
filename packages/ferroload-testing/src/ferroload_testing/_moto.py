"""moto's S3 server in a child process on 127.0.0.1, and the storage options that reach it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Self

from ferroload_testing._loopback import LOCALHOST, LoopbackService, free_port

logger = logging.getLogger(__name__)

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


class MotoServer(LoopbackService):
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
        return (LOCALHOST, self._port)

    @property
    def endpoint(self) -> str:
        """The server's URL, `http://127.0.0.1:<port>`."""
        self._check_running()
        return f"http://{LOCALHOST}:{self._port}"

    def _check_running(self) -> None:
        if self._proc is None:
            raise RuntimeError("the moto server is not running; call start() first")

    def start(self) -> Self:
        """Start the server and wait until it answers (a no-op when it runs already).

        Raises:
            RuntimeError: if moto is not installed or the server does not come up in time.
        """
        if self._proc is not None:
            return self
        last: BaseException | None = None
        for _ in range(3):  # the free port can be taken between choosing and binding it
            port = free_port()
            log = tempfile.TemporaryFile()  # noqa: SIM115  (closed on every path below)
            proc = subprocess.Popen(
                [sys.executable, "-c", _MOTO_MAIN, LOCALHOST, str(port)],
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
                    url = f"http://{LOCALHOST}:{port}/moto-api/"
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
                [`FaultProxy`][ferroload_testing.FaultProxy] in front of it).

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
