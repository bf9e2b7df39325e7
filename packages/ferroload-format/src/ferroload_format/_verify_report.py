"""What `verify` found: `Problem` and `VerifyReport`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferroload_format._errors import DatasetDamagedError


@dataclass(frozen=True)
class Problem:
    """One thing `verify` found wrong.

    Attributes:
        kind: `missing-shard`, `shard-size`, `truncated`, `checksum`, `side-index`,
            `layer-index` (a layer's index part unreadable or not matching the rows),
            `payload-range` (a range outside its shard or off the tar block grid),
            `tar-header` (a range over the tar header of its member), `overlap` (two
            ranges of one shard overlapping), `num-rows` (an index part holding another
            number of rows than the manifest says), `index-part` (an index part missing,
            unreadable, or of another size than the manifest says), `index-schema` (an
            index part, of the base or a layer, that lacks a column of the schema, holds
            one twice or stores it as another type, or holds a column the schema does not
            name: `column` names it), `id-run` (a sample-id run unreadable or not holding exactly
            the ids of the parts it covers), `shard-list` (a shard list missing, of
            another size or checksum, or not holding its shards: nothing else is
            checked then), `statistics` (a row group's Parquet
            statistics that do not bound its values: `subset` prunes by them), or
            `unsafe-path` (a shard reached through a symlink out of the root, or a side
            index member name that could leave it when the tar is extracted; a manifest
            path that could is refused when the dataset is opened).
        shard: the shard involved (the index part, for index problems).
        sample_id: the sample involved, when one is.
        column: the modality (or index column) involved, when one is.
        message: a sentence for people.
    """

    kind: str
    shard: str
    message: str
    sample_id: str | None = None
    column: str | None = None


@dataclass
class VerifyReport:
    """What `Dataset.verify()` checked and found."""

    uri: str
    version: int
    problems: list[Problem] = field(default_factory=list)
    shards_checked: int = 0
    payloads_checked: int = 0
    bytes_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is damaged."""
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raise `DatasetDamagedError` listing the problems, if there are any."""
        if self.problems:
            first = self.problems[0]
            lines = "\n".join(f"  {p.kind}: {p.message}" for p in self.problems[:20])
            more = f"\n  … and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
            raise DatasetDamagedError(
                f"{self.uri} version {self.version} is damaged ({len(self.problems)} "
                f"problem(s)):\n{lines}{more}",
                uri=self.uri,
                shard=first.shard,
                sample_id=first.sample_id,
                column=first.column,
                problems=list(self.problems),
            )
