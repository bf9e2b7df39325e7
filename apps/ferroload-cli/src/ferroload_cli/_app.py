"""The `ferroload` Typer app, the options commands share, and `main` (exit codes).

Importing this module, or any command module, imports Typer and rich and nothing of the
library: a command imports what it needs when it runs, so `ferroload --help` and shell
completion answer at once (a test keeps pyarrow, DuckDB, numpy and the format out).
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
import typer.core
from rich.markup import escape

from ferroload_cli._render import printable

if TYPE_CHECKING:
    import ferroload

#: The loggers `-v` / `-q` configure: every ferroload package's.
_LOGGERS = ("ferroload", *(f"ferroload_{p}" for p in (
    "core", "store", "format", "codec", "loader", "map", "convert", "catalog", "cli"
)))  # fmt: skip

#: How a write treats a dataset already at its destination (`--append` / `--overwrite`).
WriteMode = Literal["create", "append", "overwrite"]


def examples(*lines: str) -> str:
    """The "Examples" epilog of a command's help: one command line per argument."""
    body = "\n".join(f"  [dim]$[/dim] {escape(x)}" for x in lines)
    return f"[bold]Examples[/bold]\n{body}"


app = typer.Typer(
    name="ferroload",
    help="Inspect, query, check, convert and benchmark ferroload datasets.",
    epilog=examples(
        "ferroload import imagefolder ~/photos ./photos",
        "ferroload info ./photos",
        'ferroload subset ./photos ./cats --where "label = 3"',
        "ferroload COMMAND --help",
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def command_group(name: str, help: str) -> typer.Typer:
    """A `ferroload <name> …` group of commands, registered on `app`."""
    group = typer.Typer(help=help, no_args_is_help=True, rich_markup_mode="rich")
    app.add_typer(group, name=name)
    return group


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
Append = Annotated[
    bool,
    typer.Option(
        "--append", help="add to the dataset already at DST (default: refuse to write there)"
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="replace the content of the dataset at DST in a new version (history kept; "
        "ferroload gc reclaims the old shards)",
    ),
]


def write_mode(append: bool, overwrite: bool) -> WriteMode:
    """`--append` / `--overwrite` as the `mode=` of the Python API (default `"create"`)."""
    if append and overwrite:
        raise usage_error("--append and --overwrite exclude each other")
    return "append" if append else "overwrite" if overwrite else "create"


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


def open_dataset(
    uri: str, options: Sequence[str] | None, *, version: int | None = None
) -> ferroload.Dataset:
    """Open a dataset for a command (`catalog:NAME` resolves through the catalog), at
    `version` (None: the latest)."""
    import ferroload

    return ferroload.Dataset.open(uri, storage_options=storage_options(options), version=version)


def shown_uri(uri: str) -> str:
    """A URI as every report shows it (`uri` in --json): a local dataset as its absolute
    path, an object-store or catalog URI as given."""
    if uri.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(uri).path)
    if "://" in uri or uri.startswith("catalog:"):
        return uri
    return os.path.abspath(os.path.expanduser(uri))


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


#: The `progress=` every long call gets: None (a bar when stderr is a terminal,
#: FERROLOAD_PROGRESS=1/0 forces it) or, under `-q`, False.
_progress: bool | None = None


def progress_arg() -> bool | None:
    """What a command passes as `progress=` to the library: None (its own choice: a bar on
    a terminal, `FERROLOAD_PROGRESS=1`/`0` forces it) or False under `-q`."""
    return _progress


# --------------------------------------------------------------------------- messages

#: Python arguments that error messages of the library name, and the flag each is here.
_FLAGS = {
    "binary_columns": "--binary",
    "id_column": "--id-column",
    "max_file_bytes": "--max-file-size",
    "max_inflate_ratio": "--max-inflate-ratio",
    "metadata": "--metadata",
    "metadata_columns": "--metadata-columns",
    "modality": "--modality",
    "name": "--name",
    "on_error": "--on-error",
    "overwrite": "--overwrite",
    "replace": "--replace",
    "samples_per_shard": "--samples-per-shard",
    "shard_size": "--shard-size",
    "split": "--split",
    "storage_options": "--storage-option",
    "timeout": "--timeout",
    "where": "--where",
    "workers": "--workers",
}
_VALUE = r"('[^']*'|\"[^\"]*\"|[\w.+-]+(?:,\d{3})*)"  # 'a', "a", 1,073,741,824
_CLI_ASIDE = re.compile(r" ?\(CLI: [^)]*\)")  # "(CLI: --append / --overwrite)": said below
_ARG_OR_FLAG = re.compile(rf"\b\w+={_VALUE} / (--[\w-]+)")  # "overwrite=True / --overwrite"
_FILE_URI = re.compile(r"file://(/[^\s'\"),;]*[^\s'\"),;.])")
_NAME_OR = re.compile(rf"\b(pass )?name=None or {_VALUE}")  # the writer's name clash
_WITHOUT = re.compile(rf"\bwith ({'|'.join(_FLAGS)})=None\b")
_ARG = re.compile(rf"\b(mode|{'|'.join(_FLAGS)})=(?:{_VALUE})?")
#: An argument named without a value ("raise max_file_bytes if …"): only the snake_case
#: ones, which prose never uses as words ("name", "split" and "where" it does).
_BARE = re.compile(rf"\b({'|'.join(k for k in _FLAGS if '_' in k)})\b(?!=)")


def _flag(m: re.Match[str]) -> str:
    key, value = m.group(1), m.group(2)
    if value is not None:
        value = value.strip("'\"")
    if key == "mode":
        return {"append": "--append", "overwrite": "--overwrite"}.get(
            value or "", "--append or --overwrite"
        )
    flag = _FLAGS[key]
    if value is None or value == "True":
        return flag
    return f"no {flag}" if value == "None" else f"{flag} {value}"


def cli_message(exc: BaseException) -> str:
    """The line `ferroload: error:` shows for `exc`: its first line, with the Python
    arguments it names (`mode="append"`, `name=None`, `on_error='skip'`, …) said as this
    command's flags (`--append`, `--name`, `--on-error skip`), local `file://` URIs as
    paths, controls escaped. The one place messages are translated."""
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    text = _CLI_ASIDE.sub("", text)
    text = _ARG_OR_FLAG.sub(lambda m: m.group(2), text)
    text = _NAME_OR.sub(
        lambda m: (
            f"leave out --name (or pass --name {m.group(2)})"
            if m.group(1)
            else f"no --name or --name {m.group(2)}"
        ),
        text,
    )
    text = _WITHOUT.sub(lambda m: f"without {_FLAGS[m.group(1)]}", text)
    text = _ARG.sub(_flag, text)
    text = _BARE.sub(lambda m: _FLAGS[m.group(1)], text)
    text = _FILE_URI.sub(lambda m: shown_uri(m.group()), text)
    if type(exc).__name__ == "DatasetExistsError" and "--append" not in text:
        uri = shown_uri(str(getattr(exc, "uri", None) or "the destination"))
        text = (
            f"{uri} already holds a dataset: pass --append to add to it or --overwrite to "
            "replace it"
        )
    if type(exc).__name__ == "NotADatasetError":
        text += _import_hint(str(getattr(exc, "uri", None) or ""))
    return printable(text)


#: Entries `_import_hint` looks at, at most.
_HINT_ENTRIES = 5000


def _import_hint(uri: str) -> str:
    """For a local folder that is not a dataset: the import command its files call for
    (`; it looks like an image folder: ferroload import imagefolder SRC DST`), else ""."""
    from ferroload_convert import kind_of

    path = shown_uri(uri)
    if "://" in path or not os.path.isdir(path):
        return ""
    names: list[str] = []  # "<depth>/<file name>", depth 0 to 2
    folders, budget = [(path, 0)], _HINT_ENTRIES  # entries (files and folders) left to read
    while folders and budget > 0:
        folder, depth = folders.pop(0)
        try:
            with os.scandir(folder) as it:  # read lazily: a huge folder is not listed whole
                for e in itertools.islice(it, budget):
                    budget -= 1
                    if e.is_dir(follow_symlinks=False):
                        if depth < 2:
                            folders.append((e.path, depth + 1))
                    else:
                        names.append(f"{depth}/{e.name.lower()}")
        except OSError:
            continue
    shown = path if " " not in path else f"'{path}'"
    hf = {"0/dataset_info.json", "0/dataset_dict.json", "0/state.json"}
    looks = (
        ("a Hugging Face save_to_disk folder", "hf") if hf & set(names)
        else ("WebDataset tars", "wds") if any(n.endswith((".tar", ".tar.gz", ".tgz")) for n in names)
        else ("Parquet files", "parquet") if any(n.endswith(".parquet") for n in names)
        else ("an image folder", "imagefolder")
        if any(n[0] == "1" and kind_of(n.rsplit(".", 1)[-1])[1] == "image" for n in names)
        else None
    )  # fmt: skip
    if looks is not None:
        return f"; it looks like {looks[0]}: ferroload import {looks[1]} {shown} DST"
    return ""


# --------------------------------------------------------------------------- the root


class _Argument(typer.core.TyperArgument):
    """An argument shown by its metavar alone: `SRC DST` in the usage line (not `{SRC}`),
    no `<str>` after it in the table."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return name if self.required else f"[{name}]"


class _Option(typer.core.TyperOption):
    """An option shown by its metavar (`--limit N`), a flag by its name alone (no `<bool>`),
    choices as `raise|skip|warn`."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        shown = super().display_type_rich(ctx)
        return shown.strip("<>") if shown else shown


_ONE_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


def _tidy_param(param: Any) -> Any:
    if type(param) is typer.core.TyperArgument:
        param.__class__ = _Argument
    elif type(param) is typer.core.TyperOption:
        param.__class__ = _Option
    return param


def _tidy(command: Any) -> None:
    """Give every parameter of `command` and its subcommands the placeholders above (the
    help option too, which click makes when help is asked for), and its help text flowing
    paragraphs (a docstring's line breaks are not kept; blank lines are)."""
    if command.help:
        command.help = _ONE_BREAK.sub(" ", inspect.cleandoc(command.help))
    for param in command.params:
        _tidy_param(param)
    make_help_option = command.get_help_option
    command.get_help_option = lambda ctx: _tidy_param(make_help_option(ctx))
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


def command() -> Any:
    """The click command `main` runs: the app with every command, placeholders tidied."""
    cmd = typer.main.get_command(app)
    _tidy(cmd)
    return cmd


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ferroload {version('ferroload')}")
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
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="log errors only; no progress bars")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the full traceback of an error (any position)")
    ] = False,
) -> None:
    global _progress
    _progress = False if quiet else None
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


def _expected(exc: BaseException) -> bool:
    """Whether `exc` is a user's error (one line, exit 1) rather than a bug (traceback)."""
    if isinstance(exc, OSError | ImportError):
        return True
    from ferroload_core import FerroloadError

    return isinstance(exc, FerroloadError)


#: The root's flags that may also come after the command (`_root` reads them).
_ROOT_FLAG = re.compile(r"-q|--quiet|--verbose|-v+")

#: What `main` passes the arguments through before parsing them, in order: each takes
#: the arguments and returns those to parse (`_compat_cmds` registers the one for
#: ferroload-rs 0.1.1's spellings). A hook may print to stderr, and raise as a command.
ARGV_HOOKS: list[Callable[[list[str]], list[str]]] = []


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
        end = args.index("--") if "--" in args else len(args)
    # so may -q / -v (`ferroload info ds -q`): the root takes them, before the command
    moved = [a for a in args[:end] if _ROOT_FLAG.fullmatch(a)]
    args = moved + [a for a in args[:end] if not _ROOT_FLAG.fullmatch(a)] + args[end:]
    try:
        for hook in ARGV_HOOKS:
            args = hook(args)
        rv: Any = command().main(args=args, prog_name="ferroload", standalone_mode=False)
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
    except Exception as exc:
        if not _expected(exc):
            raise
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"ferroload: error: {cli_message(exc)}\n")
        return 1
    return rv if isinstance(rv, int) else 0


def run() -> None:
    """The `ferroload` process: `main()`, then `ferroload_core.exit_process` with its code.

    After a command, pyarrow's C++ thread pools sometimes abort the process while the
    interpreter tears down ("terminate called without an active exception", exit -6,
    after the command had printed its result: once in 650 `ferroload verify` runs on a
    busy machine; apache/arrow#34314). `exit_process` runs the exit handlers, flushes
    the output and leaves without the teardown (the usual way while a thread that is
    not a daemon still runs).
    """
    code = main()
    from ferroload_core import exit_process

    exit_process(code)
