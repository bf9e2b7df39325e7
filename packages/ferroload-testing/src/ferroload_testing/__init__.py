"""ferroload-testing: a real S3 server and a proxy that injects latency and faults.

A development dependency, for ferroload's own tests and benchmarks and for users who
test their pipelines against a slow, flaky S3 (see the "Testing your pipeline" page of
the docs); no runtime package needs it.

* [`MotoServer`][ferroload_testing.MotoServer] runs moto's S3 server in a child process
  on 127.0.0.1 and a free port, and gives the `storage_options` that point a store at it.
* [`FaultProxy`][ferroload_testing.FaultProxy] sits between a client and an HTTP/1.1
  server: it adds a fixed delay to each request, answers some requests with a 503 itself,
  drops some connections mid-request, and loses some answers after the server acted,
  deterministically given a seed. It relays keep-alive connections (several requests
  each), framed by h11, fast enough for benchmarks (hundreds of MB/s);
  [`ProxyStats`][ferroload_testing.ProxyStats] counts what it did.

Importing this package starts nothing; moto runs when a `MotoServer` starts. Neither
helper reaches anything but 127.0.0.1.

A typical test setup (a store reading moto's S3 through a slow, flaky network):

```python
from ferroload_store import IOOptions, open_store
from ferroload_testing import FaultProxy, MotoServer

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

from importlib.metadata import PackageNotFoundError, version

from ferroload_testing._moto import MotoServer
from ferroload_testing._proxy import FaultProxy
from ferroload_testing._rs011 import RS011_FIXTURES, RS011_NAMES, rs011_dataset
from ferroload_testing._stats import ProxyStats

try:
    __version__ = version("ferroload-testing")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "RS011_FIXTURES",
    "RS011_NAMES",
    "FaultProxy",
    "MotoServer",
    "ProxyStats",
    "__version__",
    "rs011_dataset",
]
