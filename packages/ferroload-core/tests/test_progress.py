"""`progress=True | False | callable`, resolved in one place."""

from __future__ import annotations

import io
import sys
import time

import pytest

from ferroload_core import progress_reporter, progress_wanted


def test_a_callable_gets_done_and_total() -> None:
    calls: list[tuple[int, int | None]] = []
    with progress_reporter(lambda done, total: calls.append((done, total)), desc="x") as report:
        report(1, 3)
        report(3, 3)
    assert calls == [(1, 3), (3, 3)]


def test_false_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_reporter(False, desc="quiet") as report:
        report(5, 10)
    assert err.getvalue() == ""


def test_true_draws_a_bar_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_reporter(True, desc="import imagefolder", unit="file") as report:
        report(2, None)  # the total is not known yet
        report(10, 10)
    text = err.getvalue()
    assert "import imagefolder" in text and "10/10" in text and "file" in text


@pytest.mark.parametrize(("env", "tty", "want"), [("", False, False), ("", True, True),
                                                  ("1", False, True), ("0", True, False)])  # fmt: skip
def test_the_default_follows_the_terminal_and_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str, tty: bool, want: bool
) -> None:
    monkeypatch.setenv("FERROLOAD_PROGRESS", env)
    fake = io.StringIO()
    monkeypatch.setattr(fake, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stderr", fake)
    assert progress_wanted(None) is want
    assert progress_wanted(True) and not progress_wanted(False)


def test_anything_else_is_refused() -> None:
    with pytest.raises(TypeError, match="progress must be"), progress_reporter("yes", desc="x"):  # type: ignore[arg-type]
        pass


def test_no_time_left_is_guessed_from_the_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first tick comes after start-up (imports, opening the input): a rate drawn from
    it gave `1/1200 [00:01<19:50, 1.01file/s]` for a one-second import."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_reporter(True, desc="import", unit="file", total=1200) as report:
        time.sleep(0.3)  # start-up before any file is done
        report(1)
        first = err.getvalue()
        time.sleep(0.6)
        report(600)
    ticks = [t for t in err.getvalue().split("\r") if t.strip()]
    assert "1/1200 [00:00<?, ?file/s]" in first
    assert any("600/1200" in t and "<?" not in t and "file/s]" in t for t in ticks), ticks
