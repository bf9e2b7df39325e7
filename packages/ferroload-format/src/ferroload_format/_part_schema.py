"""An index part's columns against its version's schema: what `verify` reports, and the
check a part goes through before it is cast for a merge (`compact`, an append's merge)."""

from __future__ import annotations

import pyarrow as pa

from ferroload_format._errors import ManifestError
from ferroload_format._part_files import read_part_table
from ferroload_format._records import IndexPart
from ferroload_format._types import fits_in, type_name
from ferroload_store import Store


def holds(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column stored as `have` holds the schema's `want`: the same type (its
    nullability, list item names and dictionary encoding aside), or one the schema
    widens (`null`, `int64` in a `float64` column: `fits_in`)."""
    if pa.types.is_dictionary(have):
        have = have.value_type
    return type_name(have) == type_name(want) or fits_in(have, want)


def schema_problems(have: pa.Schema, want: pa.Schema) -> list[tuple[str, str]]:
    """(column, what is wrong with it) for each column of `want` that `have` lacks, has
    twice or stores as another type, then for each column of `have` that `want` lacks;
    each a phrase that follows the part's name."""
    problems: list[tuple[str, str]] = []
    for f in want:
        found = have.get_all_field_indices(f.name)
        if not found:
            problems.append(
                (f.name, f"has no column {f.name!r}, which the manifest's schema names")
            )
        elif len(found) > 1:
            problems.append((f.name, f"has {len(found)} columns named {f.name!r}"))
        elif not holds(t := have.field(found[0]).type, f.type):
            problems.append(
                (
                    f.name,
                    f"stores column {f.name!r} as {type_name(t)}; the manifest's schema says "
                    f"{type_name(f.type)}",
                )
            )
    names = set(want.names)
    problems += [
        (name, f"has a column {name!r} that the manifest's schema does not name")
        for name in dict.fromkeys(have.names)
        if name not in names
    ]
    return problems


def read_part_as(store: Store, part: IndexPart, schema: pa.Schema) -> pa.Table:
    """Index part `part` whole, as `schema`: its columns in the schema's order, each cast
    to the schema's type.

    Raises:
        ManifestError: naming the part and the column, for a part missing one of the
            schema's columns, holding another, or storing one as a type (or values) the
            schema's type cannot take.
    """
    table = read_part_table(store, part, None)

    def altered(column: str, why: str) -> ManifestError:
        return ManifestError(
            f"index part {part.path} of {store.uri} {why}. The manifest or the part was "
            "altered; run verify()",
            uri=store.uri,
            part=part.path,
            column=column,
        )

    problems = schema_problems(table.schema, schema)
    if problems:
        raise altered(*problems[0])
    columns = []
    for f in schema:
        col = table.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise altered(
                    f.name, f"holds values of column {f.name!r} that are not {type_name(f.type)}"
                ) from exc
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)
