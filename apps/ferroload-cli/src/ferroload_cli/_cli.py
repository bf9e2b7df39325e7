"""The `ferroload` command: a thin layer over the public API (`import ferroload`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import ferroload

#: Distributions `doctor` reports the versions of.
PACKAGES = (
    "ferroload",
    "ferroload-core",
    "ferroload-store",
    "ferroload-format",
    "ferroload-codec",
    "ferroload-loader",
    "ferroload-map",
    "ferroload-cli",
    "ferroload-catalog",
)

#: The table a `sql` query reads: the dataset's index, as `Dataset.subset` names it.
SQL_TABLE = "samples"

#: Longest cell a human table shows (longer values are cut with `…`).
_CELL = 60


class UsageError(Exception):
    """A command line that parses but makes no sense (exit code 2)."""


# --------------------------------------------------------------------------- output


def _jsonable(value: Any) -> Any:
    """`value` with everything JSON cannot hold turned into something it can."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return _jsonable(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return _jsonable(tolist())
    return str(value)


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), indent=2, ensure_ascii=False))


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table: a header, a rule, one line per row."""
    cells = [[_cell(h) for h in headers], *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _pairs(items: Sequence[tuple[str, Any]]) -> str:
    """`key: value` lines, keys aligned."""
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {'' if v is None else v}" for k, v in items)


def _size(n: int | None) -> str:
    """Bytes for people: `512 B`, `1.5 KiB`, …"""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- helpers


def _storage_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _storage_options(args: argparse.Namespace) -> dict[str, str] | None:
    pairs: list[tuple[str, str]] = getattr(args, "storage_option", None) or []
    return dict(pairs) or None


def _open(args: argparse.Namespace) -> ferroload.Dataset:
    return ferroload.Dataset.open(args.uri, storage_options=_storage_options(args))


def _payload_size(value: Any) -> int | None:
    """The size of a payload given as its index struct (present, length, …) or bytes."""
    if isinstance(value, Mapping):
        return int(value["length"]) if value.get("present") else None
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return None


def _check_columns(ds: ferroload.Dataset, columns: Sequence[str]) -> None:
    for c in columns:
        if c not in ds.columns:
            raise ferroload.ColumnNotFoundError(
                f"{ds.uri} has no column {c!r}; columns are {', '.join(ds.columns)}",
                uri=ds.uri,
                column=c,
            )


def _split_columns(text: str | None) -> list[str] | None:
    if text is None:
        return None
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise UsageError(f"--columns needs at least one column name, got {text!r}")
    return columns


# --------------------------------------------------------------------------- commands


def _cmd_info(args: argparse.Namespace) -> int:
    ds = _open(args)
    m = ds.manifest
    shard_bytes = sum(s.size for s in m.shards) + sum(
        s.size for layer in m.layers for s in layer.shards
    )
    index_bytes = sum(p.size for p in m.index_parts)
    meta = [f for f in ds.schema if f.name in ds.metadata_columns]
    layers: list[dict[str, Any]] = [
        {
            "name": layer.name,
            "base_version": layer.base_version,
            "rows": layer.num_rows,
            "columns": [f.name for f in layer.columns],
            "modalities": [x.name for x in layer.modalities],
            "created_at": layer.created_at,
        }
        for layer in ds.layers
    ]
    info = {
        "uri": ds.uri,
        "name": ds.name,
        "version": ds.version,
        "created_at": m.created_at,
        "samples": ds.num_samples,
        "shards": ds.num_shards,
        "bytes": shard_bytes,
        "index_bytes": index_bytes,
        "modalities": [
            {"name": x.name, "ext": x.ext, "kind": x.kind, "codec_hint": x.codec_hint}
            for x in ds.modalities
        ],
        "metadata_columns": [{"name": f.name, "type": str(f.type)} for f in meta],
        "layers": layers,
    }
    if args.json:
        _print_json(info)
        return 0
    print(
        _pairs(
            [
                ("uri", ds.uri),
                ("name", ds.name),
                ("version", f"{ds.version} ({m.created_at})"),
                ("samples", ds.num_samples),
                ("shards", ds.num_shards),
                ("bytes", f"{_size(shard_bytes)} in shards, {_size(index_bytes)} of index"),
            ]
        )
    )
    print()
    if ds.modalities:
        print(
            _table(
                ["modality", "ext", "kind", "codec"],
                [[x.name, x.ext, x.kind, x.codec_hint] for x in ds.modalities],
            )
        )
    else:
        print("no modalities")
    print()
    if meta:
        print(_table(["metadata column", "type"], [[f.name, str(f.type)] for f in meta]))
    else:
        print("no metadata columns")
    print()
    if ds.layers:
        print(
            _table(
                ["layer", "base version", "columns", "modalities"],
                [
                    [
                        layer["name"],
                        layer["base_version"],
                        ", ".join(layer["columns"]),
                        ", ".join(layer["modalities"]),
                    ]
                    for layer in layers
                ],
            )
        )
    else:
        print("no layers")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    ds = _open(args)
    modalities = {x.name for x in ds.modalities}
    fields = [
        {
            "name": f.name,
            "type": str(f.type),
            "nullable": bool(f.nullable),
            "role": (
                "modality"
                if f.name in modalities
                else "metadata"
                if f.name in ds.metadata_columns
                else "index"
            ),
        }
        for f in ds.schema
    ]
    if args.json:
        _print_json(fields)
    else:
        print(
            _table(
                ["column", "role", "type", "nullable"],
                [[f["name"], f["role"], f["type"], f["nullable"]] for f in fields],
            )
        )
    return 0


def _cmd_head(args: argparse.Namespace) -> int:
    ds = _open(args)
    columns = _split_columns(args.columns) or list(ds.columns)
    _check_columns(ds, columns)
    modalities = {x.name for x in ds.modalities}
    n = min(args.n, len(ds))
    view = ds.take(list(range(n)))
    rows = view.to_table(columns).to_pylist() if n else []
    for row in rows:
        for c in columns:
            if c in modalities:
                row[c] = _payload_size(row[c])
    if args.json:
        _print_json(rows)
    else:
        print(
            _table(
                columns,
                [[_size(r[c]) if c in modalities else r[c] for c in columns] for r in rows],
            )
        )
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    if args.out is not None and args.column is None:
        raise UsageError("--out needs --column (which column to write)")
    ds = _open(args)
    modalities = {x.name for x in ds.modalities}
    sample = ds.get(args.index, None if args.column is None else [args.column])
    if args.out is not None:
        value = sample[args.column]
        if value is None:
            raise ferroload.SampleIndexError(
                f"sample {args.index} of {ds.uri} has no {args.column!r}",
                uri=ds.uri,
                column=args.column,
            )
        data = (
            bytes(value)
            if isinstance(value, bytes | bytearray | memoryview)
            else str(value).encode()
        )
        if args.out == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return 0
        with open(args.out, "wb") as f:
            f.write(data)
        if args.json:
            _print_json({"column": args.column, "out": args.out, "bytes": len(data)})
        else:
            print(f"wrote {len(data)} bytes of {args.column!r} to {args.out}")
        return 0
    shown = {k: (_payload_size(v) if k in modalities else v) for k, v in sample.items()}
    if args.json:
        _print_json(shown)
    else:
        print(_pairs([(k, _size(v) if k in modalities else v) for k, v in shown.items()]))
    return 0


def _cmd_sql(args: argparse.Namespace) -> int:
    from ferroload_format._query import sandboxed_connection

    ds = _open(args)
    query: str = args.query
    con = sandboxed_connection()
    try:
        try:
            statements = con.extract_statements(query)
        except Exception as exc:
            raise ferroload.QueryError(f"invalid query: {_first_line(exc)}", uri=ds.uri) from exc
        if len(statements) != 1 or statements[0].type.name != "SELECT":
            raise ferroload.UnsafeQueryError(
                f"only a single SELECT over the table {SQL_TABLE!r} is allowed; "
                f"the query makes {len(statements)} statement(s)"
                + (f" of type {statements[0].type.name}" if len(statements) == 1 else ""),
                uri=ds.uri,
            )
        con.register(SQL_TABLE, ds.to_table())
        try:
            cursor = con.execute(query)
            names = [d[0] for d in cursor.description or []]
            rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
        except Exception as exc:
            if type(exc).__name__ == "PermissionException":
                raise ferroload.UnsafeQueryError(
                    f"the query tries to reach outside the dataset's index: {_first_line(exc)}",
                    uri=ds.uri,
                ) from exc
            raise ferroload.QueryError(
                f"DuckDB cannot run the query: {_first_line(exc)}", uri=ds.uri
            ) from exc
    finally:
        con.close()
    if args.json:
        _print_json(rows)
    else:
        print(_table(names, [[r[c] for c in names] for r in rows]))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    ds = _open(args)
    report = ds.verify()
    if args.json:
        _print_json(
            {
                "uri": report.uri,
                "version": report.version,
                "ok": report.ok,
                "shards_checked": report.shards_checked,
                "payloads_checked": report.payloads_checked,
                "bytes_checked": report.bytes_checked,
                "problems": [dataclasses.asdict(p) for p in report.problems],
            }
        )
    else:
        checked = (
            f"{report.shards_checked} shards, {report.payloads_checked} payloads, "
            f"{_size(report.bytes_checked)}"
        )
        if report.ok:
            print(f"ok: {report.uri} version {report.version} ({checked} checked)")
        else:
            print(
                f"damaged: {report.uri} version {report.version}: "
                f"{len(report.problems)} problem(s) ({checked} checked)"
            )
            print(
                _table(
                    ["problem", "shard", "sample", "column", "message"],
                    [[p.kind, p.shard, p.sample_id, p.column, p.message] for p in report.problems],
                )
            )
    return 0 if report.ok else 1


def _cmd_log(args: argparse.Namespace) -> int:
    ds = _open(args)
    versions = [dataclasses.asdict(v) for v in ds.versions()]
    if args.json:
        _print_json(versions)
    else:
        keys = ["version", "created_at", "operation", "num_samples", "num_shards", "txn"]
        print(
            _table(
                ["version", "created", "operation", "samples", "shards", "txn"],
                [[v[k] for k in keys] for v in versions],
            )
        )
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {}
    if args.grace is not None:
        kwargs["grace"] = timedelta(seconds=args.grace)
    report = ferroload.gc(
        args.uri, dry_run=args.dry_run, storage_options=_storage_options(args), **kwargs
    )
    if args.json:
        _print_json(dataclasses.asdict(report))
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    for path in report.published:
        print(f"published {path}")
    for path in report.deleted:
        print(f"{verb} {path}")
    print(
        f"{verb} {len(report.deleted)} object(s), {_size(report.bytes_freed)}; "
        f"kept {report.kept_young} younger than the grace period"
    )
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    import ferroload.codec

    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": packages,
        "codec_backends": ferroload.codec.backends(),
    }
    code = 0
    if args.uri is not None:
        try:
            ds = _open(args)
        except ferroload.FerroloadError as exc:
            report["uri"] = {"uri": args.uri, "reachable": False, "error": _first_line(exc)}
            code = 1
        else:
            report["uri"] = {
                "uri": ds.uri,
                "reachable": True,
                "name": ds.name,
                "version": ds.version,
                "samples": ds.num_samples,
            }
    if args.json:
        _print_json(report)
        return code
    print(_pairs([("python", report["python"]), ("platform", report["platform"])]))
    print()
    print(_table(["package", "version"], [[k, v or "not installed"] for k, v in packages.items()]))
    print()
    backends = report["codec_backends"]
    print(_table(["codec", "backend"], [[k, v or "-"] for k, v in backends.items()]))
    if "uri" in report:
        u = report["uri"]
        print()
        if u["reachable"]:
            print(
                f"{u['uri']}: reachable ({u['name']} version {u['version']}, {u['samples']} samples)"
            )
        else:
            print(f"{u['uri']}: NOT reachable: {u['error']}")
    return code


# --------------------------------------------------------------------------- parser


def _common(*, json_flag: bool, uri: bool) -> argparse.ArgumentParser:
    """Options every command takes (defaults suppressed so they may also come first)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback of an error",
    )
    if json_flag:
        p.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="machine-readable JSON on stdout",
        )
    if uri:
        p.add_argument(
            "--storage-option",
            metavar="KEY=VALUE",
            type=_storage_option,
            action="append",
            default=argparse.SUPPRESS,
            help="object-store option (credentials, endpoint, …); repeatable",
        )
    return p


Command = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The `ferroload` argument parser (one subcommand per operation)."""
    parser = argparse.ArgumentParser(
        prog="ferroload",
        description="Inspect, query, check and clean ferroload datasets.",
        parents=[_common(json_flag=True, uri=True)],
    )
    parser.add_argument("--version", action="version", version=f"ferroload {ferroload.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    reading = _common(json_flag=True, uri=True)

    def add(name: str, fn: Command, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[reading])
        p.set_defaults(func=fn)
        return p

    p = add("info", _cmd_info, "summary of a dataset: samples, shards, bytes, columns, layers")
    p.add_argument("uri", help="dataset root (path, memory://, s3://, gs://, az://)")
    p = add("schema", _cmd_schema, "the columns of a dataset's index and their types")
    p.add_argument("uri", help="dataset root")
    p = add("head", _cmd_head, "the first rows of the index (payloads shown as sizes)")
    p.add_argument("uri", help="dataset root")
    p.add_argument("-n", type=_non_negative, default=5, help="rows to show (default 5)")
    p.add_argument("--columns", metavar="A,B", help="comma-separated columns (default all)")
    p = add("get", _cmd_get, "one sample (payloads shown as sizes), or one column to a file")
    p.add_argument("uri", help="dataset root")
    p.add_argument("index", type=int, help="sample position (negative counts from the end)")
    p.add_argument("--column", help="only this column")
    p.add_argument("--out", metavar="FILE", help="write the column's bytes to FILE ('-': stdout)")
    p = add("sql", _cmd_sql, f"run one SELECT over the index (table {SQL_TABLE!r}) in DuckDB")
    p.add_argument("uri", help="dataset root")
    p.add_argument("query", help=f'e.g. "SELECT label, count(*) FROM {SQL_TABLE} GROUP BY 1"')
    p = add("verify", _cmd_verify, "check every shard and payload; exit code 1 on damage")
    p.add_argument("uri", help="dataset root")
    p = add("log", _cmd_log, "the committed versions of a dataset")
    p.add_argument("uri", help="dataset root")
    p = add("gc", _cmd_gc, "delete what crashed or aborted writers left behind")
    p.add_argument("uri", help="dataset root")
    p.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    p.add_argument(
        "--grace",
        type=_non_negative_float,
        metavar="SECONDS",
        help="leave leftovers younger than this alone (default: 1 hour, as ferroload.gc)",
    )
    p = add("doctor", _cmd_doctor, "versions, codec backends and (with --uri) reachability")
    p.add_argument("--uri", help="also check that this dataset opens")
    return parser


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


def _non_negative_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not x >= 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return x


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `ferroload` command line; returns the exit code.

    Exit codes: 0 success; 1 a ferroload error (one line on stderr; `--debug` shows the
    traceback) or, for `verify`, a damaged dataset; 2 a usage error.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    args.debug = getattr(args, "debug", False)
    func: Command = args.func
    try:
        return func(args)
    except UsageError as exc:
        parser.error(str(exc))  # exits 2
    except (ferroload.FerroloadError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"ferroload: error: {_first_line(exc)}", file=sys.stderr)
        return 1
