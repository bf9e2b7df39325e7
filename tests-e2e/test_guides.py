"""The CLI guide (docs/guides/cli-ten-commands.md) works as written.

test_docs runs the ```python blocks of every page; the CLI guide is mostly ```bash blocks,
which it does not run. This test walks the page's blocks in order, in one fresh folder:

* a ```python block runs (in one namespace, as test_docs runs it: it makes the data);
* every line of a ```bash block must be a `ferroload …` command, a comment or blank (a
  line that is anything else fails the test, so the page cannot grow a step nobody
  runs); each command runs as `python -m ferroload_cli …` and must exit 0;
* a ```text block right after a ```bash block is an excerpt of what those commands
  print: each of its lines, with `…` standing for anything and runs of spaces for one,
  must equal a line of their output, in order.

The block cache and the catalog go to the test's folder, and the output is plain text 100
columns wide, as when the excerpts were taken (`FERROLOAD_CACHE_SIZE`, `FORCE_COLOR` are
unset for the commands).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from test_docs import REPO, CodeBlock, code_blocks

GUIDE = REPO / "docs" / "guides" / "cli-ten-commands.md"
COMMAND_TIMEOUT_S = 120


def bash_commands(block: CodeBlock) -> list[list[str]]:
    """The `ferroload` commands of a bash block, as argument lists (without `ferroload`).

    Raises:
        ValueError: a line that is not a `ferroload` command, a comment or blank.
    """
    commands = []
    for number, line in enumerate(block.code.splitlines(), start=block.line):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            words = shlex.split(text, comments=True)
        except ValueError:  # an open quote, a line continued with a backslash
            words = []
        if not words or words[0] != "ferroload" or text.endswith("\\"):
            raise ValueError(
                f"{block.path.name}:{number}: a ```bash line of a guide must be "
                f"one `ferroload …` command, a comment or blank, not {text!r}"
            )
        commands.append(words[1:])
    return commands


def _normalized(line: str) -> str:
    return " ".join(line.split())


def excerpt_pattern(line: str) -> re.Pattern[str]:
    """An excerpt line as a pattern: `…` matches anything, runs of spaces match one."""
    parts = [re.escape(part) for part in _normalized(line).split("…")]
    return re.compile(".*".join(parts))


def check_excerpt(excerpt: CodeBlock, output: str) -> None:
    """Each line of `excerpt` equals a line of `output`, in order."""
    lines = [_normalized(ln) for ln in output.splitlines()]
    at = 0
    for number, want in enumerate(excerpt.code.splitlines(), start=excerpt.line):
        if not want.strip():
            continue
        pattern = excerpt_pattern(want)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            pytest.fail(
                f"{excerpt.path.name}:{number}: the excerpt line "
                f"{want.strip()!r} is not in the output of the commands above it "
                f"(after the lines matched before it):\n{output}",
                pytrace=False,
            )
        at += 1


def test_parsers(tmp_path: Path) -> None:
    """Only `ferroload` commands, comments and blanks pass; excerpts match lines in order."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n# a comment\n\nferroload info pets  # trailing\n"
        "ferroload sql pets \"SELECT 'a b'\"\n```\n\n```bash\nls pets\n```\n\n"
        "```bash\nferroload info \\\n  pets\n```\n",
        encoding="utf-8",
    )
    good, bad, continued = code_blocks(page)
    assert bash_commands(good) == [["info", "pets"], ["sql", "pets", "SELECT 'a b'"]]
    with pytest.raises(ValueError, match=r"page\.md:9: .*not 'ls pets'"):
        bash_commands(bad)
    with pytest.raises(ValueError, match=r"page\.md:13: "):
        bash_commands(continued)
    assert excerpt_pattern("size:   … of 50.0 GiB").fullmatch("size: 0 B of 50.0 GiB")
    assert not excerpt_pattern("entries: 0").fullmatch("entries: 10")
    excerpt = CodeBlock(page, 1, "text", "text", "a:   …\n\nc\n", marked_no_run=False)
    check_excerpt(excerpt, " a: 1 \nb\nc\n")
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:3: the excerpt line 'c'"):
        check_excerpt(excerpt, "c\na: 1\n")  # in order


def test_cli_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block of the CLI guide, in order, in one folder; excerpts match the output."""
    blocks = code_blocks(GUIDE)
    bash = [b for b in blocks if b.lang in ("bash", "sh", "shell", "console")]
    assert len(bash) >= 10, "the guide lost its commands"
    env = {
        **os.environ,
        "FERROLOAD_CACHE_DIR": str(tmp_path / "cache"),
        "FERROLOAD_CATALOG": str(tmp_path / "catalog.duckdb"),
        "FERROLOAD_PROGRESS": "0",
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    for name in ("FERROLOAD_CACHE_SIZE", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)  # the excerpts are plain text, cut at 100 columns
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    output: str | None = None  # of the last bash block, until a text block reads it
    for block in blocks:
        if block.runs:
            source = "\n" * (block.line - 1) + block.code
            try:
                exec(compile(source, str(block.path), "exec"), namespace)
            except Exception:
                pytest.fail(
                    f"the Python block at {block.where} failed:\n{traceback.format_exc()}",
                    pytrace=False,
                )
        elif block in bash:
            output = ""
            for args in bash_commands(block):
                line = shlex.join(["ferroload", *args])
                done = subprocess.run(
                    [sys.executable, "-m", "ferroload_cli", *args],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                    check=False,
                )
                if done.returncode != 0:
                    pytest.fail(
                        f"`{line}` ({block.where}) exited with {done.returncode}:\n"
                        f"{done.stdout}\n{done.stderr}",
                        pytrace=False,
                    )
                output += done.stdout
        elif block.lang == "text":
            assert output is not None, f"the excerpt at {block.where} follows no ```bash block"
            check_excerpt(block, output)
            output = None
