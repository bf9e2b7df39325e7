"""ferroload-rs 0.1.1's commands (`inspect`, `list`, `add`, `import-hf`, `import-files`,
`subset --out`), deprecated: each runs the 0.2 command of the same meaning and says it.

0.1.1's `ferroload` command took the name this one has. Its commands keep working until
0.4 (`ferroload.compat.REMOVED_IN`), hidden from `ferroload --help` (`ferroload inspect
--help` still answers): each prints, on stderr, which 0.2 command it runs, then runs it.
Options of that command may follow 0.1.1's (`ferroload inspect ROOT --json`). 0.1.1's
`subset ROOT --where W [--out NAME]` shares its name with 0.2's `subset SRC DST`: `main`
passes the arguments through `rewrite_argv` (registered in `ARGV_HOOKS`), which turns
0.1.1's form into the 0.2 one. `verify ROOT` is the same command in both.

The same hook imports ferroload-rs 0.1.1's catalog (`$FERROLOAD_HOME/catalog.json`)
into the 0.2 catalog, once, the first time a command uses the catalog
(`ferroload.compat._catalog`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from ferroload_cli._app import ARGV_HOOKS, app, examples, usage_error
from ferroload_cli._render import printable

#: 0.1.1's commands, hidden; options of the 0.2 command they run may follow theirs.
_PASS_ON = {"allow_extra_args": True, "ignore_unknown_options": True}
#: Commands that use the catalog (a `catalog:` argument does too).
_USE_CATALOG = ("catalog", "list", "add", "import-hf", "import-files")
#: Options of the root command (`ferroload -v …`): none takes a value.
_ROOT_FLAGS = ("-v", "--verbose", "-q", "--quiet", "--debug")


def say(old: str, new: Sequence[str], *notes: str) -> None:
    """Tell, on stderr, that 0.1.1's command `old` is deprecated and which 0.2 command
    (`new`, its arguments after `ferroload`) runs instead; `notes` follow, one a line."""
    from ferroload.compat import REMOVED_IN

    lines = [
        f"ferroload {old} is ferroload-rs 0.1.1's command, deprecated (removed in "
        f"{REMOVED_IN}): use `{shlex.join(['ferroload', *new])}`",
        *(f"  ({n})" for n in notes),
    ]
    sys.stderr.write(printable("\n".join(lines)) + "\n")
    sys.stderr.flush()


def dispatch(ctx: typer.Context, args: Sequence[str]) -> Any:
    """Run the 0.2 command `args` (after `ferroload`) in this process, under the root
    command's context: its `-v`/`-q` stay as given, its errors and exit code are the
    command's own."""
    root = ctx.find_root()
    group: Any = root.command
    name, cmd, rest = group.resolve_command(root, list(args))
    with cmd.make_context(name, rest, parent=root) as sub:
        return cmd.invoke(sub)


# --------------------------------------------------------------------------- the catalog


def import_rs011_catalog() -> None:
    """Import ferroload-rs 0.1.1's catalog into the 0.2 one if not done yet, and say so
    (once; `ferroload.compat._catalog.import_rs011_catalog`)."""
    from ferroload.compat._catalog import import_rs011_catalog as run_import
    from ferroload_catalog import Catalog

    report = run_import(Catalog())
    if report is not None:
        sys.stderr.write(printable(f"ferroload: {report.message()}") + "\n")
        sys.stderr.flush()


def _is_remote(uri: str) -> bool:
    """0.1.1's rule: a URI with `://` other than `file://` is remote."""
    return "://" in uri and not uri.startswith("file://")


def register_args(uri: str, name: str | None) -> list[str]:
    """The `catalog add …` that registers `uri` as 0.1.1's `add` (and its importers) did.

    0.1.1 kept one entry per URI, named `--name`, else its manifest's name (a local
    dataset), else the last part of the URI, with any characters; adding a URI again
    replaced its entry. So: without `name`, an entry the catalog has for that URI is
    replaced under its name (`--replace`); else the name is made valid
    (`catalog_name`), and an entry of that name for that URI is replaced. 0.2 names are
    unique: a name taken by another dataset is refused, naming the command to run.

    Raises:
        CatalogEntryExistsError: if the name is taken by another dataset.
    """
    from ferroload.compat._catalog import catalog_name, dataset_key
    from ferroload_catalog import Catalog, CatalogEntryExistsError

    entries = Catalog().list()
    key = dataset_key(uri)
    if name is None:
        for entry in entries:
            if dataset_key(entry.uri) == key:
                return ["catalog", "add", entry.name, uri, "--replace"]
        if not _is_remote(uri):
            import ferroload

            try:
                name = ferroload.Dataset.open(uri).name
            except ferroload.FerroloadError:
                name = None  # the catalog's own open says what is wrong
    wanted = catalog_name(name or os.path.basename(uri.rstrip("/")) or "dataset")
    for entry in entries:
        if entry.name != wanted:
            continue
        if dataset_key(entry.uri) == key:
            return ["catalog", "add", wanted, uri, "--replace"]
        raise CatalogEntryExistsError(
            f"the catalog already has an entry {wanted!r} for another dataset ({entry.uri}); "
            f"0.2 catalog names are unique: ferroload catalog add OTHER-NAME {uri}",
            name=wanted,
        )
    return ["catalog", "add", wanted, uri]


# --------------------------------------------------------------------------- commands

Root = Annotated[str, typer.Argument(metavar="ROOT", help="the dataset root", show_default=False)]


@app.command(
    "inspect",
    hidden=True,
    context_settings=_PASS_ON,
    epilog=examples("ferroload inspect ./pets", "ferroload info ./pets"),
)
def inspect_cmd(ctx: typer.Context, root: Root) -> Any:
    """ferroload-rs 0.1.1's `inspect`, deprecated: runs `ferroload info ROOT` (whose
    report is 0.2's; --json for machines)."""
    new = ["info", root, *ctx.args]
    say("inspect", new)
    return dispatch(ctx, new)


@app.command(
    "list",
    hidden=True,
    context_settings=_PASS_ON,
    epilog=examples("ferroload list", "ferroload catalog ls"),
)
def list_cmd(ctx: typer.Context) -> Any:
    """ferroload-rs 0.1.1's `list`, deprecated: runs `ferroload catalog ls` (0.1.1's
    catalog is imported into 0.2's the first time it is used)."""
    new = ["catalog", "ls", *ctx.args]
    say("list", new)
    return dispatch(ctx, new)


@app.command(
    "add",
    hidden=True,
    context_settings=_PASS_ON,
    epilog=examples("ferroload add ./pets --name pets", "ferroload catalog add pets ./pets"),
)
def add_cmd(
    ctx: typer.Context,
    uri: Annotated[str, typer.Argument(metavar="URI", help="the dataset root", show_default=False)],
    name: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="the entry's name (default: the dataset's)"),
    ] = None,
) -> Any:
    """ferroload-rs 0.1.1's `add`, deprecated: runs `ferroload catalog add NAME URI`
    (NAME made a valid 0.2 name; an entry of that name and URI is replaced, as 0.1.1
    replaced it)."""
    new = [*register_args(uri, name), *ctx.args]
    say("add", new)
    return dispatch(ctx, new)


# --------------------------------------------------------------------------- importers


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        from ferroload_convert import MissingDependencyError

        raise MissingDependencyError(
            "0.1.1's import-hf and import-files need the `datasets` package: "
            "pip install 'ferroload-convert[hf]'"
        ) from exc
    return datasets


def _image_bytes(cell: dict[str, Any]) -> bytes:
    """The bytes of an image cell of a streamed dataset: stored, or read from its path
    (a local file or a file of the Hub repository, as `datasets` opens it)."""
    if cell.get("bytes") is not None:
        return bytes(cell["bytes"])
    from datasets.utils.file_utils import xopen

    with xopen(str(cell["path"]), "rb") as f:
        return bytes(f.read())


def _refuse_empty(rows: Sequence[object], why: str) -> None:
    """Refuse an import of no row (0.1.1 wrote an empty dataset; `datasets` cannot save
    one, so 0.2 writes none).

    Raises:
        ConvertOptionError: naming `why`.
    """
    if not rows:
        from ferroload_convert import ConvertOptionError

        raise ConvertOptionError(f"{why}: nothing imported, no dataset written")


def _save(ds: Any, where: str) -> str:
    """Save the `datasets.Dataset` `ds` to disk under the folder `where` (no progress
    bar of `datasets`: the import draws its own)."""
    datasets = _datasets()
    folder = os.path.join(where, "hf")
    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        ds.save_to_disk(folder)
    finally:
        if shown:
            datasets.enable_progress_bars()
    return folder


def _import_and_register(
    ctx: typer.Context, old: str, folder: str, out: str, own: list[str], notes: Sequence[str]
) -> Any:
    """Run `ferroload import hf FOLDER OUT …` then `ferroload catalog add …` (0.1.1's
    importers registered what they wrote), saying so first."""
    imp = ["import", "hf", folder, out, *own, *ctx.args]
    shown = ["import", "hf", "SAVED_FOLDER", out, *own, *ctx.args]
    say(old, shown, *notes, f"then `ferroload catalog add NAME {out}`, as 0.1.1 registered it")
    code = dispatch(ctx, imp)
    if code:
        return code
    register = register_args(out, None)
    if "--json" not in ctx.args:
        return dispatch(ctx, register)
    from ferroload_catalog import Catalog  # quietly: stdout holds one JSON document

    Catalog().add(register[2], register[3], replace="--replace" in register)
    return None


@app.command(
    "import-hf",
    hidden=True,
    context_settings=_PASS_ON,
    epilog=examples(
        "ferroload import-hf cifar10 ./cifar --limit 1000",
        "ferroload import hf ./saved ./cifar",
    ),
)
def import_hf_cmd(
    ctx: typer.Context,
    dataset: Annotated[
        str,
        typer.Argument(
            metavar="DATASET", help="a dataset of the Hugging Face Hub (or a local one)"
        ),
    ],
    out: Annotated[str, typer.Argument(metavar="OUT", help="the dataset to write")],
    split: Annotated[str, typer.Option(metavar="SPLIT", help="the split to read")] = "train",
    name: Annotated[
        str | None, typer.Option(metavar="CONFIG", help="the dataset's configuration")
    ] = None,
    limit: Annotated[int, typer.Option(min=0, metavar="N", help="rows to import")] = 100,
    image_col: Annotated[
        str | None,
        typer.Option(metavar="COLUMN", help="the image column (default: the image feature)"),
    ] = None,
) -> Any:
    """ferroload-rs 0.1.1's `import-hf`, deprecated: streams the first --limit rows of
    DATASET from the Hub and runs `ferroload import hf` on them, then registers OUT in
    the catalog.

    As 0.1.1: the rows read, the modality `image` (the image column, renamed). Unlike
    0.1.1: images are stored as the Hub holds them (not re-encoded to PNG), metadata
    keeps its types, sample ids are row numbers (00000000, not sample000000).
    """
    datasets = _datasets()
    stream = datasets.load_dataset(dataset, name=name, split=split, streaming=True)
    features = stream.features
    images = [k for k, f in (features or {}).items() if isinstance(f, datasets.Image)]
    for col in images:
        stream = stream.cast_column(col, datasets.Image(decode=False))
    rows = list(stream.take(limit))
    _refuse_empty(rows, f"{dataset} has no row to import (--limit {limit})")
    for row in rows:
        for col in images:
            cell = row.get(col)
            if isinstance(cell, dict) and (cell.get("bytes") is not None or cell.get("path")):
                # 0.1.1 read every image and kept no path (0.2 would keep it as metadata)
                row[col] = {"bytes": _image_bytes(cell), "path": None}
    ds = datasets.Dataset.from_list(rows, features=stream.features)
    if image_col is not None:
        if image_col not in ds.column_names:
            raise usage_error(
                f"--image-col {image_col!r} is not a column of {dataset}; its columns: "
                f"{', '.join(ds.column_names)}"
            )
        chosen: str | None = image_col
    else:
        chosen = images[-1] if images else None  # 0.1.1: the last image of a row won
    if chosen is not None and chosen != "image" and "image" not in ds.column_names:
        ds = ds.rename_column(chosen, "image")
    notes = [
        f"SAVED_FOLDER: datasets.load_dataset({dataset!r}, name={name!r}, split={split!r}, "
        f"streaming=True), its first {limit} rows, saved with save_to_disk"
        + (f", column {chosen!r} renamed 'image'" if chosen not in (None, "image") else ""),
        "unlike 0.1.1: images kept as stored, not re-encoded to PNG; metadata keeps its "
        "types; sample ids are row numbers (00000000, not sample000000)",
    ]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ferroload-import-hf-") as tmp:
        return _import_and_register(ctx, "import-hf", _save(ds, tmp), out, [], notes)


#: The `datasets` feature of a modality, by 0.1.1's `--codec`.
_MEDIA_FEATURES = {"image": "Image", "audio": "Audio", "video": "Video"}


def _scalar_columns(rows: list[dict[str, Any]], media: str) -> list[dict[str, Any]]:
    """0.1.1's metadata of each row: every field but the media one; lists and objects
    as JSON text (as 0.1.1 stored them); a field with values of several types as text."""
    import json

    keys = list(dict.fromkeys(k for row in rows for k in row if k != media))
    meta: list[dict[str, Any]] = [{} for _ in rows]
    for key in keys:
        values = [row.get(key) for row in rows]
        values = [
            v if v is None or isinstance(v, bool | int | float | str) else json.dumps(v)
            for v in values
        ]
        if len({type(v) for v in values if v is not None}) > 1:
            values = [None if v is None else str(v) for v in values]
        for m, v in zip(meta, values, strict=True):
            m[key] = v
    return meta


@app.command(
    "import-files",
    hidden=True,
    context_settings=_PASS_ON,
    epilog=examples(
        "ferroload import-files lmms-lab/videos ./videos --jsonl meta.jsonl",
        "ferroload import hf ./saved ./videos --id-column video_id",
    ),
)
def import_files_cmd(
    ctx: typer.Context,
    dataset: Annotated[
        str, typer.Argument(metavar="DATASET", help="a dataset repository of the Hugging Face Hub")
    ],
    out: Annotated[str, typer.Argument(metavar="OUT", help="the dataset to write")],
    jsonl: Annotated[
        str, typer.Option(metavar="FILE", help="the JSON-lines file of the repository")
    ],
    media_field: Annotated[
        str, typer.Option(metavar="FIELD", help="the field naming each row's media file")
    ] = "video_path",
    modality: Annotated[str, typer.Option(metavar="NAME", help="the modality")] = "video",
    ext: Annotated[str, typer.Option(metavar="EXT", help="the media's extension")] = "mp4",
    codec: Annotated[
        str, typer.Option(metavar="CODEC", help="image, audio, video, or another (bytes)")
    ] = "video",
    limit: Annotated[int, typer.Option(min=0, metavar="N", help="rows to import")] = 50,
) -> Any:
    """ferroload-rs 0.1.1's `import-files`, deprecated: downloads --jsonl and each row's
    media file from the Hub repository DATASET, and runs `ferroload import hf` on them,
    then registers OUT in the catalog.

    As 0.1.1: the first --limit rows, rows without a media file left out, the media as
    the modality --modality, ids from question_id or video_id when every row has one,
    the other fields as metadata. Unlike 0.1.1: the extension is read from the bytes
    (--ext is not used), a --codec other than image, audio or video makes a modality of
    kind bytes, and ids are row numbers when question_id or video_id is missing.
    """
    import json

    datasets = _datasets()
    from huggingface_hub import hf_hub_download

    manifest = hf_hub_download(dataset, jsonl, repo_type="dataset")
    with open(manifest, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for row in rows[:limit]:
        rel = row.get(media_field) if isinstance(row, dict) else None
        if not rel:
            continue
        with open(hf_hub_download(dataset, str(rel), repo_type="dataset"), "rb") as f:
            blobs.append(f.read())
        kept.append(row)
    id_column = next(
        (c for c in ("question_id", "video_id") if kept and all(r.get(c) for r in kept)), None
    )
    meta = _scalar_columns(kept, media_field)
    kind = _MEDIA_FEATURES.get(codec)
    cells: list[Any]
    if kind is None:
        feature, cells = datasets.Value("binary"), blobs
    else:
        feature = getattr(datasets, kind)(decode=False)
        cells = [{"bytes": b, "path": None} for b in blobs]
    records = [{modality: c, **m} for c, m in zip(cells, meta, strict=True)]
    _refuse_empty(records, f"no row of the first {limit} of {jsonl} names a {media_field} file")
    ds = datasets.Dataset.from_list(records).cast_column(modality, feature)
    own = ["--id-column", id_column] if id_column else []
    notes = [
        f"SAVED_FOLDER: the first {limit} rows of {jsonl} of the Hub dataset {dataset}, "
        f"each row's {media_field} file as the column {modality!r}, saved with "
        "datasets' save_to_disk",
        "unlike 0.1.1: the extension is read from the bytes (not --ext)"
        + ("" if id_column else "; sample ids are row numbers (00000000, not sample000000)"),
    ]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ferroload-import-files-") as tmp:
        return _import_and_register(ctx, "import-files", _save(ds, tmp), out, own, notes)


# --------------------------------------------------------------------------- argv

#: `subset` options of 0.2 that take a value (the others are flags).
_SUBSET_VALUES = ("--where", "-w", "--name", "--limit", "--storage-option", "-o", "--timeout")


def _subset_rs011(args: list[str]) -> list[str] | None:
    """0.2 arguments for 0.1.1's `subset ROOT --where W [--out NAME]` (after `subset`),
    or None when `args` are not 0.1.1's form (one ROOT, --out or no DST)."""
    positional: list[str] = []
    rest: list[str] = []
    where: str | None = None
    out: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        key, eq, value = a.partition("=")
        if a == "--":
            positional += args[i + 1 :]
            break
        if key in ("--where", "-w", "--out") and eq:
            where, out = (value, out) if key != "--out" else (where, value)
        elif a in ("--where", "-w", "--out") and i + 1 < len(args):
            where, out = (args[i + 1], out) if a != "--out" else (where, args[i + 1])
            i += 1
        elif a in _SUBSET_VALUES and i + 1 < len(args):
            rest += args[i : i + 2]
            i += 1
        elif a.startswith("-") and a != "-":
            rest.append(a)
        else:
            positional.append(a)
        i += 1
    if where is None or (out is None and len(positional) != 1):
        return None
    if len(positional) != 1:
        raise usage_error(
            "--out is ferroload-rs 0.1.1's option of subset, which 0.2 does not take with "
            "DST: use `ferroload subset SRC DST --where CONDITION` (a new dataset at DST)"
        )
    root = positional[0]
    if out is None:
        query = f"SELECT count(*) AS matched FROM samples WHERE {where}"
        new = ["sql", root, query, *rest]
        say("subset ROOT --where …", new, "0.1.1 printed how many samples match")
        return new
    dst = f"{root.rstrip('/')}/subsets/{out}"
    new = ["subset", root, dst, "--where", where, *rest]
    say(
        "subset ROOT --where … --out NAME",
        new,
        f"0.1.1 wrote the matching samples' row numbers to {root.rstrip('/')}/subsets/"
        f"{out}.json; 0.2 writes them as a new dataset, {dst}",
    )
    return new


def rewrite_argv(args: list[str]) -> list[str]:
    """`main`'s hook: import 0.1.1's catalog once when the command uses the catalog, and
    turn 0.1.1's `subset ROOT --where W [--out NAME]` into the 0.2 command."""
    i = 0
    while i < len(args) and (args[i] in _ROOT_FLAGS or args[i].startswith("-v")):
        i += 1
    if i >= len(args) or "--help" in args[i:] or "-h" in args[i:]:
        return args
    cmd, rest = args[i], args[i + 1 :]
    uses_catalog = cmd in _USE_CATALOG and (cmd != "catalog" or bool(rest))
    if uses_catalog or any(a.startswith("catalog:") for a in rest):
        import_rs011_catalog()
    if cmd == "subset":
        new = _subset_rs011(rest)
        if new is not None:
            return [*args[:i], *new]
    return args


ARGV_HOOKS.append(rewrite_argv)
