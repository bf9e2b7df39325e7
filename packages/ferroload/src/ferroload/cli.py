"""ferroload-rs 0.1.1's module `ferroload.cli`, deprecated: the `ferroload` command is
the `ferroload-cli` app from 0.2 on (docs/migrating.md).

`main(argv)` runs that command in a child process (the facade never imports the CLI app,
which sits above it: docs/architecture.md) with 0.1.1's arguments: 0.1.1's commands
(`inspect`, `verify`, `subset`, `import-hf`, `import-files`, `list`, `add`) still run
there, each saying on stderr which 0.2 command it runs. The `cmd_*` functions of 0.1.1
take its `argparse.Namespace` and run the same way. `CATALOG` and `catalog_register`
are refused: 0.2's catalog is a DuckDB file (`ferroload_catalog`), into which the
`ferroload` command imports 0.1.1's `catalog.json` once.
"""

from __future__ import annotations

import subprocess
import sys
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

from ferroload.compat import deprecated, removed

deprecated(
    "the module ferroload.cli",
    "the `ferroload` command (ferroload_cli.main(argv) from Python)",
    stacklevel=2,
)

__all__ = [
    "cmd_add",
    "cmd_import_files",
    "cmd_import_hf",
    "cmd_inspect",
    "cmd_list",
    "cmd_subset",
    "cmd_verify",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `ferroload` command with `argv` (default `sys.argv[1:]`), deprecated.

    0.1.1 parsed them with argparse in this process; 0.2 runs `python -m ferroload_cli`
    with them, its output on this process's stdout and stderr.

    Returns:
        0 when the command succeeded (0.1.1 returned None).

    Raises:
        SystemExit: with the command's exit code when it failed (0.1.1 raised its error,
            or SystemExit(2) for a usage error).
    """
    deprecated("ferroload.cli.main(argv)", "ferroload_cli.main(argv), or the `ferroload` command")
    return _main(sys.argv[1:] if argv is None else argv)


def _main(argv: Sequence[str]) -> int:
    """`main` without its warning."""
    args = [str(a) for a in argv]
    sys.stdout.flush()
    sys.stderr.flush()
    code = subprocess.run([sys.executable, "-m", "ferroload_cli", *args], check=False).returncode
    if code:
        raise SystemExit(code)
    return 0


def _option(args: Namespace, name: str, flag: str, default: Any = None) -> list[str]:
    """`[flag, value]` for the attribute `name` of `args` when set and not `default`."""
    value = getattr(args, name, None)
    return [] if value is None or value == default else [flag, str(value)]


def _run(old: str, argv: list[str]) -> int:
    deprecated(f"ferroload.cli.{old}(args)", f"the command `ferroload {argv[0]} ...`", stacklevel=4)
    return _main(argv)


def cmd_inspect(args: Namespace) -> int:
    """0.1.1's `inspect` (`args.root`), deprecated: runs `ferroload inspect ROOT` (0.2's
    `ferroload info ROOT`)."""
    return _run("cmd_inspect", ["inspect", str(args.root)])


def cmd_verify(args: Namespace) -> int:
    """0.1.1's `verify` (`args.root`), deprecated: runs `ferroload verify ROOT`."""
    return _run("cmd_verify", ["verify", str(args.root)])


def cmd_subset(args: Namespace) -> int:
    """0.1.1's `subset` (`args.root`, `args.where`, `args.out`), deprecated: runs
    `ferroload subset ROOT --where W [--out NAME]` (0.2: `ferroload sql`, or with
    `--out` a new dataset at ROOT/subsets/NAME)."""
    argv = ["subset", str(args.root), "--where", str(args.where), *_option(args, "out", "--out")]
    return _run("cmd_subset", argv)


def cmd_import_hf(args: Namespace) -> int:
    """0.1.1's `import-hf` (`dataset`, `out`, `split`, `name`, `limit`, `image_col`),
    deprecated: runs `ferroload import-hf …` (0.2: `ferroload import hf`)."""
    argv = [
        "import-hf",
        str(args.dataset),
        str(args.out),
        *_option(args, "split", "--split"),
        *_option(args, "name", "--name"),
        *_option(args, "limit", "--limit"),
        *_option(args, "image_col", "--image-col"),
    ]
    return _run("cmd_import_hf", argv)


def cmd_import_files(args: Namespace) -> int:
    """0.1.1's `import-files` (`dataset`, `out`, `jsonl`, `media_field`, `modality`,
    `ext`, `codec`, `limit`), deprecated: runs `ferroload import-files …` (0.2:
    `ferroload import hf`)."""
    argv = [
        "import-files",
        str(args.dataset),
        str(args.out),
        *_option(args, "jsonl", "--jsonl"),
        *_option(args, "media_field", "--media-field"),
        *_option(args, "modality", "--modality"),
        *_option(args, "ext", "--ext"),
        *_option(args, "codec", "--codec"),
        *_option(args, "limit", "--limit"),
    ]
    return _run("cmd_import_files", argv)


def cmd_list(args: Namespace | None = None) -> int:
    """0.1.1's `list`, deprecated: runs `ferroload list` (0.2's `ferroload catalog ls`)."""
    return _run("cmd_list", ["list"])


def cmd_add(args: Namespace) -> int:
    """0.1.1's `add` (`args.uri`, `args.name`), deprecated: runs `ferroload add URI
    [--name NAME]` (0.2's `ferroload catalog add NAME URI`)."""
    return _run("cmd_add", ["add", str(args.uri), *_option(args, "name", "--name")])


def __getattr__(name: str) -> Any:
    if name == "CATALOG":
        raise removed(
            "ferroload.cli.CATALOG (the path of 0.1.1's catalog.json)",
            "ferroload_catalog.default_catalog_path() (a DuckDB file; `ferroload catalog ls "
            "--json` lists it)",
            "0.2 no longer writes catalog.json; the `ferroload` command imports it once "
            "into its own catalog",
        )
    if name == "catalog_register":
        raise removed(
            "ferroload.cli.catalog_register(uri, name=None)",
            "ferroload_catalog.Catalog().add(name, uri) (or `ferroload catalog add NAME URI`)",
            "0.2 no longer writes catalog.json",
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
