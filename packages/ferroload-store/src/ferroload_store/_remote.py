"""The remote request engine: bounded, parallel, retried requests against an object store.

One `RemoteEngine` serves one `Store` whose root is an object store (S3, GCS, Azure,
HTTP). Every request it makes runs under a slot of a semaphore sized
`IOOptions.max_concurrency`, so that no more requests are in flight per store whatever the
number of threads asking. Reads longer than `IOOptions.part_size` are split
(`split_reads`) into parts fetched on a thread pool (obstore's blocking calls release the
GIL) and stitched back into one buffer per read.

obstore's own retries are turned off (unless the caller configures them): this engine is
the only retry layer of reads and simple writes, so `StoreStats.retries` counts every
retry that happened. A failure is *transient* (HTTP 5xx but 501/505, 408, 429, a refused,
reset or dropped connection, a timeout) and retried with exponential backoff and full
jitter, or *permanent* (a missing object, denied access, a range past the end, anything
else) and raised at once.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import numpy as np
import obstore
import obstore.exceptions as obx

from ferroload_store._errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    StoreError,
    StoreTimeoutError,
    UnsupportedOperationError,
)
from ferroload_store._options import IOOptions
from ferroload_store._ranges import split_reads

logger = logging.getLogger(__name__)

T = TypeVar("T")

Failure = Literal[
    "not_found",
    "exists",
    "unsupported",
    "permission",
    "range",
    "timeout",
    "transient",
    "permanent",
]

#: HTTP statuses worth another try: the server or something on the way was overloaded.
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504, 507, 509, 520, 521, 522, 523, 524})
#: reqwest error kinds (obstore's `HttpError { kind: … }`) that a retry can cure.
_RETRY_HTTP_KINDS = frozenset({"Connect", "Request", "Interrupted", "Decode"})
_HTTP_KIND = re.compile(r"HttpError\s*\{\s*kind:\s*(\w+)")
#: A request for an object in a bucket (container) that does not exist: S3's, GCS's and
#: Azure's words for it.
_NO_BUCKET = re.compile(
    r"NoSuchBucket|The specified bucket does not exist|ContainerNotFound|"
    r"The specified container does not exist"
)
#: A request that reached no server (refused, unreachable, no such host), as opposed
#: to a connection that broke (which a retry may mend).
_NO_CONNECTION = re.compile(
    r"connection refused|tcp connect error|dns error|failed to lookup address|"
    r"no route to host|network is unreachable",
    re.IGNORECASE,
)
_STATUS = re.compile(r"(?:status code:|status:)\s*(\d{3})\b")
_TRANSIENT_TEXT = re.compile(
    r"connection (?:reset|closed|refused|aborted)|broken pipe|incompletemessage|"
    r"error sending request|error decoding response body|error reading a body|"
    r"unexpected eof|end of file before message",
    re.IGNORECASE,
)
_TIMEOUT_TEXT = re.compile(r"timed ?out|deadline has elapsed", re.IGNORECASE)


#: The process in which obstore's I/O runtime started (None: not yet). obstore runs every
#: request on one tokio runtime per process, which does not survive `fork()`: a forked
#: child's network requests hang forever once the parent has used obstore (even for a
#: memory store). Checked before every request, to fail clearly instead.
_runtime_pid: int | None = None


def mark_runtime_used() -> None:
    """Note that obstore ran an operation in this process (its runtime now exists)."""
    global _runtime_pid
    if _runtime_pid is None:
        _runtime_pid = os.getpid()


def check_not_forked(uri: str) -> None:
    """Fail clearly where obstore would hang: in a child forked after it started.

    Raises:
        StoreError: in a process forked from one that had used obstore already.
    """
    if _runtime_pid is not None and _runtime_pid != os.getpid():
        raise StoreError(
            f"cannot reach {uri} from process {os.getpid()}: it was forked from process "
            f"{_runtime_pid} after obstore had started its I/O runtime there, and obstore's "
            "runtime does not survive fork(); start worker processes with the 'spawn' or "
            "'forkserver' method (e.g. torch DataLoader(multiprocessing_context='spawn'))",
            uri=uri,
        )


def classify(exc: BaseException) -> Failure:
    """What kind of failure a backend error is (decides whether it is retried).

    obstore raises `GenericError` for HTTP statuses and transport failures alike; the
    message carries the status (`status code: 503`) or the transport error's kind
    (`HttpError { kind: Timeout … }`), which is what this reads.
    """
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, obx.NotFoundError)):
        return "not_found"
    if isinstance(exc, (FileExistsError, obx.AlreadyExistsError)):
        return "exists"
    if isinstance(exc, (NotImplementedError, obx.NotSupportedError)):
        return "unsupported"
    if isinstance(exc, (PermissionError, obx.PermissionDeniedError, obx.UnauthenticatedError)):
        return "permission"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "transient"
    if isinstance(exc, (obx.InvalidPathError, obx.UnknownConfigurationKeyError, ValueError)):
        return "permanent"
    text = str(exc)
    kind = _HTTP_KIND.search(text)
    if kind is not None:
        if kind.group(1) == "Timeout":
            return "timeout"
        return "transient" if kind.group(1) in _RETRY_HTTP_KINDS else "permanent"
    status = _STATUS.search(text)
    if status is not None:
        code = int(status.group(1))
        if code == 416:
            return "range"
        if code in (401, 403):
            return "permission"
        if code == 404:
            return "not_found"
        return "transient" if code in _RETRY_STATUS else "permanent"
    if _TIMEOUT_TEXT.search(text):
        return "timeout"
    if _TRANSIENT_TEXT.search(text):
        return "transient"
    return "permanent"


def is_panic(exc: BaseException) -> bool:
    """True for pyo3's `PanicException`: obstore (Rust) panicked. It derives from
    `BaseException` only, so `except Exception` lets it through; obstore panics when it
    builds a request from a configuration it accepted at open (an endpoint without a
    scheme, a region with a blank, a header value with a newline, read from the
    environment or given)."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)


def panic_error(exc: BaseException, *, uri: str, path: str, action: str) -> StoreError:
    """The ferroload error for an obstore panic during `action` on `path`."""
    return StoreError(
        f"{action} {uri}/{path} failed: obstore panicked ({short_message(exc)}); a value it "
        "accepted is invalid: check storage_options and the AWS_* / GOOGLE_* / AZURE_* "
        "environment variables (endpoint, region, credentials)",
        uri=uri,
        path=path,
    )


def is_transient(kind: Failure) -> bool:
    """True for the failures that a retry may cure."""
    return kind in ("transient", "timeout")


def short_message(exc: BaseException, limit: int = 300) -> str:
    """The first part of an obstore message, without its debug dump, on one line."""
    text = str(exc).split("Debug source:", 1)[0]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def translate(
    exc: BaseException,
    *,
    uri: str,
    path: str,
    action: str,
    attempts: int = 1,
    timeouts: str = "",
) -> StoreError:
    """The ferroload error for a backend or OS error raised while doing `action` on `path`."""
    if isinstance(exc, StoreError):
        return exc
    where = f"{uri}/{path}"
    kind = classify(exc)
    cause = short_message(exc)
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if kind == "not_found":
        bucket = _NO_BUCKET.search(str(exc))
        if bucket is not None:  # the whole bucket, not the object: say which
            return ObjectNotFoundError(
                f"the bucket (or container) of {uri} does not exist ({bucket.group(0)}): "
                "check the bucket name in the URI, and the endpoint and region in "
                "storage_options or the environment",
                uri=uri,
                path=path,
            )
        return ObjectNotFoundError(f"{where} does not exist", uri=uri, path=path)
    if kind == "exists":
        return ObjectExistsError(f"{where} already exists", uri=uri, path=path)
    if kind == "unsupported":
        return UnsupportedOperationError(
            f"{action} is not supported by the backend of {uri}: {cause}", uri=uri, path=path
        )
    if kind == "range":
        return ObjectTruncatedError(
            f"{where} is truncated: {action} asked for bytes past its end ({cause})",
            uri=uri,
            path=path,
            size=-1,
            end=-1,
        )
    if kind == "permission" and not isinstance(exc, PermissionError):
        return StoreError(
            f"{action} {where} was denied: {cause}; check the credentials in "
            "storage_options or the environment",
            uri=uri,
            path=path,
        )
    if kind == "timeout":
        return StoreTimeoutError(
            f"{action} {where} timed out{tries} ({timeouts or 'the request timeout'}): {cause}; "
            "raise IOOptions(timeout=…) for slow links",
            uri=uri,
            path=path,
        )
    if kind == "transient" and _NO_CONNECTION.search(str(exc)):
        return StoreError(
            f"{action} {where} failed{tries}: {cause}; the server did not answer: check "
            "the endpoint storage option (or the environment) and that it is reachable",
            uri=uri,
            path=path,
        )
    if kind == "transient":
        return StoreError(
            f"{action} {where} failed{tries}: {cause}"
            + ("; raise IOOptions(retries=…) to retry more" if attempts > 1 else ""),
            uri=uri,
            path=path,
        )
    if "builder error" in str(exc) and "http://" in str(exc):
        return StoreError(
            f"{action} {where} failed: {cause}; the endpoint is plain http://, which needs "
            "the storage option allow_http=true (or an https:// endpoint)",
            uri=uri,
            path=path,
        )
    return StoreError(f"{action} {where} failed: {cause}", uri=uri, path=path)


@contextmanager
def translating(uri: str, path: str, action: str) -> Iterator[None]:
    """Raise the ferroload error (`translate`) for a backend or OS error raised inside,
    from the original."""
    try:
        yield
    except (obx.BaseError, OSError, NotImplementedError) as exc:
        translated = translate(exc, uri=uri, path=path, action=action)
        if translated is exc:
            raise
        raise translated from exc
    except BaseException as exc:
        if not is_panic(exc):
            raise
        raise panic_error(exc, uri=uri, path=path, action=action) from exc


class RemoteEngine:
    """Bounded, retried, parallel requests of one store (see the module docstring).

    Args:
        factory: builds the obstore store; called again in a forked child process, whose
            copy of the parent's connections and threads must not be used.
        uri: the store's URI (for error messages).
        io: concurrency, part size, retries and backoff.
        stats: the counters to add requests, bytes and retries to.
        timeouts: how the request timeouts read in error messages.
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        uri: str,
        io: IOOptions,
        stats: Any,
        timeouts: str = "",
    ) -> None:
        self._factory = factory
        self.uri = uri
        self.io = io
        self.stats = stats
        self.timeouts = timeouts
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._pid = -1
        self._ob: Any = None
        self._slots = threading.BoundedSemaphore(io.max_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self.store  # noqa: B018  (build now: a bad configuration fails at open)

    # ------------------------------------------------------------------ plumbing

    @property
    def store(self) -> Any:
        """The obstore store of this process (rebuilt after a fork)."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._ob = self._factory()
                    self._slots = threading.BoundedSemaphore(self.io.max_concurrency)
                    self._pool = None  # the parent's threads do not exist here
                    self._pid = os.getpid()
        return self._ob

    def _executor(self) -> ThreadPoolExecutor:
        self.store  # noqa: B018  (resets the pool after a fork)
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self.io.max_concurrency, thread_name_prefix="ferroload-io"
                    )
        return self._pool

    def close(self) -> None:
        """Stop the worker threads (they start again when needed)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False, cancel_futures=True)

    def call(self, fn: Callable[[Any], T], path: str, action: str) -> T:
        """Run `fn(obstore_store)` in a concurrency slot, retrying transient failures.

        Raises:
            StoreError: (or a subclass) naming `path` when `fn` fails for good.
        """
        check_not_forked(self.uri)
        mark_runtime_used()
        attempt = 0
        while True:
            store = self.store
            try:
                with self._slots:
                    try:
                        return fn(store)
                    except BaseException as exc:
                        if is_panic(exc):  # never retried: the request cannot be built
                            raise panic_error(exc, uri=self.uri, path=path, action=action) from exc
                        raise
            except (obx.BaseError, OSError, ValueError, NotImplementedError) as exc:
                if isinstance(exc, StoreError):
                    raise
                kind = classify(exc)
                if not is_transient(kind) or attempt >= self.io.retries:
                    raise translate(
                        exc,
                        uri=self.uri,
                        path=path,
                        action=action,
                        attempts=attempt + 1,
                        timeouts=self.timeouts,
                    ) from exc
                attempt += 1
                self.stats.add(retries=1)
                delay = self.io.backoff_delay(attempt, self._rng)
                logger.debug(
                    "retry %d/%d of %s %s/%s in %.3fs: %s",
                    attempt,
                    self.io.retries,
                    action,
                    self.uri,
                    path,
                    delay,
                    short_message(exc, 160),
                )
                time.sleep(delay)

    # ------------------------------------------------------------------ range reads

    def _fetch(self, key: str, path: str, start: int, length: int) -> Any:
        """One ranged GET (an obstore `Bytes`, maybe short at the end of the object), or
        None when the range starts past the end."""
        if length == 0:
            return b""
        try:
            return self.call(
                lambda ob: obstore.get_range(ob, key, start=start, length=length),
                path,
                "range read of",
            )
        except ObjectTruncatedError:
            return None

    def read(
        self, key: str, path: str, starts: Sequence[int], lengths: Sequence[int]
    ) -> tuple[list[Any], int | None]:
        """Fetch each read (`starts[i]`, `lengths[i]`) into one buffer.

        Reads longer than `part_size` are fetched as parallel parts. A buffer is shorter
        than asked when the object ends early; the second value is then the object's size
        (None when every read was complete).

        Returns:
            One buffer (bytes-like) per read, and the object's size if a read fell short.
        """
        parts = split_reads(starts, lengths, self.io.part_size)
        n = parts.num_parts
        if n == 0:
            return [], None
        ps, pl = parts.starts.tolist(), parts.lengths.tolist()
        got: list[Any] = [None] * n
        if n == 1:
            got[0] = self._fetch(key, path, ps[0], pl[0])
        else:
            pool = self._executor()
            futures: list[Future[Any]] = [
                pool.submit(self._fetch, key, path, ps[i], pl[i]) for i in range(1, n)
            ]
            try:
                got[0] = self._fetch(key, path, ps[0], pl[0])
                for i, fut in enumerate(futures, start=1):
                    got[i] = fut.result()
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
        self.stats.add_read(
            sum(1 for want in pl if want), sum(len(g) for g in got if g is not None)
        )

        size: int | None = None
        short = [i for i in range(n) if got[i] is None or len(got[i]) < pl[i]]
        if short:
            first = short[0]
            if got[first] is not None and len(got[first]) > 0:
                size = ps[first] + len(got[first])
            else:  # the part starts at or past the end: ask how long the object is
                size = self.call(lambda ob: int(obstore.head(ob, key)["size"]), path, "head")

        if n == len(starts):  # no read was split: hand out obstore's buffers as they are
            return [g if g is not None else b"" for g in got], size
        # The parts of read r are got[bounds[r]:bounds[r + 1]], in order.
        bounds = np.searchsorted(parts.read_of, np.arange(len(starts) + 1)).tolist()
        offs = parts.offset_in_read.tolist()
        out: list[Any] = []
        for r in range(len(starts)):
            a, b = bounds[r], bounds[r + 1]
            if b - a == 1:
                out.append(got[a] if got[a] is not None else b"")
                continue
            buf = bytearray(int(lengths[r]))
            view = memoryview(buf)
            filled = 0
            for i in range(a, b):
                g = got[i]
                if g is None:
                    break
                view[offs[i] : offs[i] + len(g)] = memoryview(g)
                filled = offs[i] + len(g)
                if len(g) < pl[i]:
                    break
            view.release()
            if filled < len(buf):
                del buf[filled:]
            out.append(buf)
        return out, size
