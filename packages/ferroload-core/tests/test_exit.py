from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ferroload_core._exit as exit_module

#: An interpreter teardown that aborts, as pyarrow's C++ thread pools now and then do
#: after a process has done its work (exit -6: apache/arrow#34314).
TEARDOWN_ABORTS = """
import os

class _AbortAtTeardown:
    def __del__(self):
        os.abort()

_abort_at_teardown = _AbortAtTeardown()
"""

SCRIPT = """
import atexit, sys
from ferroload_core import exit_process
atexit.register(lambda: print("exit handler ran"))
sys.stdout.write("result")  # no newline: only a flush writes it out
exit_process(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 5])
def test_leaves_with_its_code_and_output_whatever_the_teardown_does(
    tmp_path: Path, code: int
) -> None:
    (tmp_path / "sitecustomize.py").write_text(TEARDOWN_ABORTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    plain = subprocess.run([sys.executable, "-c", "print(1)"], env=env, capture_output=True)
    assert plain.returncode == -signal.SIGABRT  # the simulation works on a plain interpreter
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(code)], env=env, capture_output=True, text=True
    )
    assert res.returncode == code, res.stderr
    assert res.stdout == "resultexit handler ran\n"


@pytest.mark.parametrize("daemon", [True, False])
def test_skips_the_teardown_unless_a_thread_would_be_waited_for(
    monkeypatch: pytest.MonkeyPatch, daemon: bool
) -> None:
    done: list[object] = []
    monkeypatch.setattr(exit_module.atexit, "_run_exitfuncs", lambda: done.append("handlers"))
    monkeypatch.setattr(exit_module.os, "_exit", done.append)
    # the process's threads: the main one and a daemon (a tqdm monitor) or not (a worker);
    # a test process has threads of its own, so it is shown these two only
    other = threading.Thread(target=lambda: None, daemon=daemon)
    threads = [threading.main_thread(), other]
    monkeypatch.setattr(exit_module.threading, "enumerate", lambda: threads)
    if daemon:  # abandoned at exit anyway: the teardown is skipped
        exit_module.exit_process(3)
        assert done == ["handlers", 3]
    else:  # the interpreter would wait for it: the usual exit, with the code
        with pytest.raises(SystemExit) as info:
            exit_module.exit_process(3)
        assert info.value.code == 3 and done == []
