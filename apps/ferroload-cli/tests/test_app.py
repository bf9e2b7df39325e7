"""The app itself: help with examples, shell completion, a fast start, messages in flags."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ferroload_cli._app import cli_message, shown_uri
from ferroload_format import DatasetExistsError, DatasetNameError
from ferroload_store import FerroloadError

#: Every command and subcommand of `ferroload`.
COMMANDS = [
    *[
        "info",
        "schema",
        "head",
        "get",
        "sql",
        "subset",
        "verify",
        "log",
        "gc",
        "upgrade",
        "bench",
        "doctor",
        "demo",
    ],
    *(f"import {x}" for x in ("imagefolder", "wds", "hf", "parquet")),
    *(f"export {x}" for x in ("wds", "imagefolder")),
    *(f"cache {x}" for x in ("stats", "clear")),
    *(f"catalog {x}" for x in ("add", "ls", "show", "tag", "rm")),
]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferroload_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_help_lists_shell_completion() -> None:
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--install-completion" in proc.stdout and "--show-completion" in proc.stdout
    assert "Examples" in proc.stdout


def test_show_completion_prints_a_script() -> None:
    # `--show-completion` is a flag: the shell is the one it is run from (Typer looks for it
    # among the parent processes), so run it from bash as a user would, whatever ran pytest
    # (`; exit $?` keeps bash there: it would exec a lone command and leave no shell to find)
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed: no shell to print completion for")
    command = f"{shlex.quote(sys.executable)} -m ferroload_cli --show-completion; exit $?"
    proc = subprocess.run(
        [bash, "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "_FERROLOAD_COMPLETE" in proc.stdout  # the variable the shell sets to ask


@pytest.mark.parametrize(
    ("words", "expected"),
    [("ferroload inf", "info"), ("ferroload import imagefolder --ap", "--append")],
)
def test_tab_completion_answers(words: str, expected: str) -> None:
    """What the installed completion script asks: the words typed so far, in env vars."""
    env = {
        **os.environ,
        "_FERROLOAD_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "ferroload_cli"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [expected]


@pytest.mark.slow  # one subprocess per command
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_shows_an_example_and_plain_placeholders(command: str) -> None:
    proc = run(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "Examples" in text, text
    assert f"$ ferroload {command} " in text, text
    for placeholder in ("<str>", "<bool>", "<int>", "<float", "{URI}", "{SRC}", "{DST}"):
        assert placeholder not in text, (placeholder, text)


def test_help_text_flows_and_arguments_are_upper_case() -> None:
    """Rich help keeps a docstring's line breaks; the app joins them (blank lines stay)."""
    import ferroload_cli._main  # noqa: F401  (registers every command)
    from ferroload_cli._app import command

    def walk(cmd: Any) -> Iterator[Any]:
        yield cmd
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)

    commands = list(walk(command()))
    assert len(commands) > len(COMMANDS)
    for cmd in commands:
        assert not re.search(r"(?<!\n)\n(?!\n)", cmd.help or ""), (cmd.name, cmd.help)
        for param in cmd.params:
            if param.param_type_name == "argument":
                assert param.display_name_raw.isupper(), (cmd.name, param.name)


def test_importing_the_app_loads_none_of_the_library() -> None:
    """`ferroload --help` and shell completion import the entry point and every command
    module; the library (pyarrow, DuckDB, numpy, the format) loads when a command runs."""
    code = (
        "import sys, ferroload_cli, ferroload_cli._main; "
        "heavy = ('pyarrow', 'duckdb', 'numpy', 'ferroload_format', 'ferroload', "
        "'ferroload_store', 'ferroload_catalog', 'ferroload_convert', 'torch', 'obstore'); "
        "print(__import__('json').dumps([m for m in heavy if m in sys.modules]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (
            "/d holds dataset 'demo', not 'few'; pass name=None or 'demo' to append to it",
            "/d holds dataset 'demo', not 'few'; leave out --name (or pass --name 'demo') to "
            "append to it",
        ),
        ("bad image: x; pass on_error='skip' to leave the row out", "pass --on-error skip to"),
        ('refused; pass mode="append" or mode="overwrite"', "pass --append or --overwrite"),
        ("keys repeat; export with samples_per_shard=None to keep", "export without --samples-per"),
        ("several splits: a, b; pass split= to choose one", "pass --split to choose one"),
        (
            "/p holds 3,000 bytes, more than max_file_bytes=1,024; raise max_file_bytes if it "
            "is genuine, or pass on_error='skip'",
            "/p holds 3,000 bytes, more than --max-file-size 1,024; raise --max-file-size if "
            "it is genuine, or pass --on-error skip",
        ),
        ("2 image modalities; pass modality= to choose", "pass --modality to choose"),
        ("an entry 'x'; pass replace=True to overwrite it", "pass --replace to overwrite it"),
        ("unknown key; set storage_options= to reach it", "set --storage-option to reach it"),
        (
            "label = 3 matched nothing; pass where= to filter",
            "= 3 matched nothing; pass --where to",
        ),
    ],
)
def test_messages_name_flags_not_python_arguments(message: str, said: str) -> None:
    assert said in cli_message(FerroloadError(message))


def test_an_existing_dataset_says_append_or_overwrite() -> None:
    exc = DatasetExistsError("file:///data/cats holds a dataset", uri="file:///data/cats")
    assert cli_message(exc) == (
        "/data/cats already holds a dataset: pass --append to add to it or --overwrite to "
        "replace it"
    )
    # the format's own message, its details kept, its Python arguments said as flags
    exc = DatasetExistsError(
        "file:///data/my%20cats already holds dataset 'demo' (version 1, 7 samples); pass "
        "mode='append' to add to it or mode='overwrite' to replace its content in a new "
        "version (CLI: --append / --overwrite)",
        uri="file:///data/my%20cats",
    )
    assert cli_message(exc) == (
        "/data/my cats already holds dataset 'demo' (version 1, 7 samples); pass --append to "
        "add to it or --overwrite to replace its content in a new version"
    )
    other = DatasetNameError("x holds dataset 'a', not 'b'; pass name=None or 'a' to append")
    assert cli_message(other) == (
        "x holds dataset 'a', not 'b'; leave out --name (or pass --name 'a') to append"
    )
    folder = FerroloadError(
        "/o is not an empty folder: pass overwrite=True (CLI: --overwrite) to replace it; "
        "never a dataset (even with overwrite=True / --overwrite)"
    )
    assert cli_message(folder) == (
        "/o is not an empty folder: pass --overwrite to replace it; never a dataset (even "
        "with --overwrite)"
    )


def test_shown_uri() -> None:
    assert shown_uri("file:///tmp/a%20b/ds") == "/tmp/a b/ds"
    assert shown_uri("s3://bucket/ds") == "s3://bucket/ds"
    assert shown_uri("catalog:pets") == "catalog:pets"
    assert shown_uri("memory://x") == "memory://x"
    assert shown_uri("rel/ds").startswith("/") and shown_uri("rel/ds").endswith("/rel/ds")
