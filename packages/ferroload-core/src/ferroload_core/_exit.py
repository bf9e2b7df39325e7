"""Leaving a process once its work is done, without the interpreter's teardown."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_process(code: int = 0) -> NoReturn:
    """Leave the process with `code`: the exit handlers run, the output is flushed, and
    the interpreter's teardown is skipped.

    pyarrow's C++ thread pools now and then abort a process while the interpreter tears
    down, after its work is done and its output written ("terminate called without an
    active exception", exit -6; apache/arrow#34314, #39862): once in 650 `ferroload
    verify` runs on a busy machine. The `ferroload` command and the benchmarks' child
    processes leave through this; a script that read a dataset may too. The `atexit`
    handlers run first, in their usual order (logging, temporary files, child
    processes). While a thread the interpreter would wait for still runs (one that is not
    a daemon), the process exits the usual way (`sys.exit(code)`) instead. Call it from
    the main thread, as the last thing the process does.

    Examples:
        >>> import subprocess, sys
        >>> code = "from ferroload_core import exit_process; print('done'); exit_process(3)"
        >>> res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        >>> res.returncode, res.stdout
        (3, 'done\\n')
    """
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter would run at exit, in the same order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to write
            stream.flush()
    os._exit(code)
