"""The `ferroload` Typer app, the options commands share, and `main` (exit codes)."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated, Any

import typer

import ferroload
from ferroload_cli._render import printable

#: The loggers `-v` / `-q` configure: every ferroload package's.
_LOGGERS = ("ferroload", *(f"ferroload_{p}" for p in (
    "core", "store", "format", "codec", "loader", "map", "convert", "catalog", "cli"
)))  # fmt: skip

app = typer.Typer(
    name="ferroload",
    help="Inspect, query, check, convert and benchmark ferroload datasets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

Uri = Annotated[
    str,
    typer.Argument(
        metavar="URI",
        help="dataset root: a path, memory://, s3://, gs://, az://, or catalog:NAME",
        show_default=False,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="machine-readable JSON on stdout")]
StorageOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        "-o",
        metavar="KEY=VALUE",
        help="object-store option (endpoint, region, credentials, …); repeatable",
        show_default=False,
    ),
]


def storage_options(pairs: Sequence[str] | None) -> dict[str, str] | None:
    """`--storage-option KEY=VALUE` pairs as a dict (None when there are none)."""
    out: dict[str, str] = {}
    for text in pairs or ():
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise typer.BadParameter(
                f"expected KEY=VALUE, got {text!r}", param_hint="'--storage-option'"
            )
        out[key] = value
    return out or None


def open_dataset(uri: str, options: Sequence[str] | None) -> ferroload.Dataset:
    """Open a dataset for a command (`catalog:NAME` resolves through the catalog)."""
    return ferroload.Dataset.open(uri, storage_options=storage_options(options))


def usage_error(message: str) -> typer.BadParameter:
    """An error in how the command was called (exit code 2)."""
    return typer.BadParameter(message)


def split_names(text: str | None, *, option: str) -> list[str] | None:
    """`a,b,c` as a list of names (None when the option was not given)."""
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise usage_error(f"{option} needs at least one name, got {text!r}")
    return names


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(exc).strip() or type(exc).__name__
    return printable(text.splitlines()[0])


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ferroload {ferroload.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="show the version"),
    ] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, show_default=False, help="log more (-v info, -vv debug)"
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="log errors only")] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the full traceback of an error (any position)")
    ] = False,
) -> None:
    if quiet:
        level = logging.ERROR
    else:
        level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ferroload: %(levelname)s: %(name)s: %(message)s"))
    for name in _LOGGERS:  # ours only: the library never configures logging, the CLI does
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers = [handler]
        logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `ferroload` command line; returns the exit code.

    Exit codes: 0 success; 1 a ferroload error (one line on stderr; `--debug` shows the
    traceback) or, for `verify`, a damaged dataset; 2 a usage error.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    end = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:end]
    if debug:  # `--debug` may come anywhere, as in the other options people retype
        args = [a for a in args[:end] if a != "--debug"] + args[end:]
    command = typer.main.get_command(app)
    try:
        rv: Any = command.main(args=args, prog_name="ferroload", standalone_mode=False)
    except typer.Abort:
        sys.stderr.write("ferroload: aborted\n")
        return 130
    except typer.TyperException as exc:  # usage errors (exit code 2)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            sys.stderr.write(f"ferroload: error: {exc.format_message()}\n")
        return exc.exit_code
    except (ferroload.FerroloadError, OSError, ImportError) as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"ferroload: error: {first_line(exc)}\n")
        return 1
    return rv if isinstance(rv, int) else 0
