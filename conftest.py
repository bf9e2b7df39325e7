"""Settings shared by every test of the workspace, and the policy on skipped tests.

Every test must run, with one exception: a test that needs a service no Python package
provides (today only Azurite, from npm) skips with a reason that starts with
`SERVICE_NOT_AVAILABLE` followed by what is missing and how to install it, e.g.
``pytest.skip("service not available: azurite-blob is not on PATH: install it with ...")``.
Such tests are reported as not run, with that hint, and the run still passes; with
FERROLOAD_STRICT=1 (set by `.ci/run`) they fail it. Any other skip fails the run unless
FERROLOAD_ALLOW_SKIPS=1 (partial environments, e.g. a package installed alone).
tests-e2e/test_not_run.py checks this policy.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import settings

#: The reason prefix of a skip because a service that no Python package provides is missing.
SERVICE_NOT_AVAILABLE = "service not available: "

# Remote stores cache blocks under FERROLOAD_CACHE_DIR: never in the user's cache folder.
if "FERROLOAD_CACHE_DIR" not in os.environ:
    os.environ["FERROLOAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="ferroload-test-cache-")

# Under `uv run` (the README's test command) Ray packages the working directory, the
# whole checkout with its .venv (7 GB a run), for the workers of every cluster a test
# starts; they run in this environment already. Read when ray is imported: set it first.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

# The CI machine is shared and noisy: a slow example is not a failure.
settings.register_profile("ferroload", deadline=None, max_examples=100)
settings.load_profile("ferroload")

# The lines pytest_terminal_summary prints at the end, as (text, is_failure).
_summary_key = pytest.StashKey[list[tuple[str, bool]]]()


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a test was skipped, without pytest's "Skipped: " prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _tests(n: int) -> str:
    return f"{n} test" if n == 1 else f"{n} tests"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Judge the skips: service skips are reported as not run, any other skip fails."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    reasons = [_skip_reason(r) for r in skipped]
    not_run = Counter(
        r.removeprefix(SERVICE_NOT_AVAILABLE)
        for r in reasons
        if r.startswith(SERVICE_NOT_AVAILABLE)
    )
    others = len(reasons) - sum(not_run.values())
    allow_skips = os.environ.get("FERROLOAD_ALLOW_SKIPS") == "1"
    strict = os.environ.get("FERROLOAD_STRICT") == "1" and not allow_skips
    lines: list[tuple[str, bool]] = []
    for reason, n in sorted(not_run.items()):
        if strict:
            lines.append(
                (
                    f"FAILED: {_tests(n)} not run: {reason} "
                    "(FERROLOAD_STRICT=1: every service test must run)",
                    True,
                )
            )
        else:
            lines.append((f"{_tests(n)} not run: {reason}", False))
    if others and not allow_skips:
        lines.append(
            (
                f"FAILED: {_tests(others)} skipped; every test must run "
                "(set FERROLOAD_ALLOW_SKIPS=1 to allow skips in a partial environment)",
                True,
            )
        )
    session.config.stash[_summary_key] = lines
    if exitstatus == 0 and any(failure for _, failure in lines):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """Print the skip policy's verdict last, after pytest's short test summary."""
    yield
    for text, failure in terminalreporter.config.stash.get(_summary_key, []):
        terminalreporter.write_line(text, red=failure, yellow=not failure)
