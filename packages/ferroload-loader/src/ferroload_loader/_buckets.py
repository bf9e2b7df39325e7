"""Size-bucketed batches: `bucket_by=` expressions over index columns, bucket boundaries,
and `BucketOrder`, the epoch's order regrouped into batches of one bucket each.

An expression is parsed by a small recursive-descent parser (column names, numbers,
`+ - * /` and parentheses; never `eval`) and evaluated with numpy over whole columns.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format import numpy_column
from ferroload_loader._order import EpochOrder, Order, rng

#: A parsed expression: ("num", value), ("col", name), ("neg", e) or (op, left, right).
Expr = tuple[Any, ...]
Buckets = int | Sequence[float]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[-+*/()])|(?P<bad>\S))"
)
_HELP = "an expression of column names, numbers, + - * / and parentheses"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            if kind is None:  # trailing blanks
                continue
            if kind == "bad":
                raise self.error(f"unexpected {m.group(kind)!r} at position {m.start(kind)}")
            self.tokens.append((kind, m.group(kind), m.start(kind)))
        self.i = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"bucket_by {self.text!r}: {what}; bucket_by takes {_HELP}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def parse(self) -> Expr:
        if not self.tokens:
            raise self.error("empty expression")
        e = self.sum()
        tok = self.peek()
        if tok is not None:
            raise self.error(f"unexpected {tok[1]!r} at position {tok[2]}")
        return e

    def sum(self) -> Expr:
        e = self.product()
        while (tok := self.peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            e = (tok[1], e, self.product())
        return e

    def product(self) -> Expr:
        e = self.unary()
        while (tok := self.peek()) is not None and tok[1] in ("*", "/"):
            self.i += 1
            e = (tok[1], e, self.unary())
        return e

    def unary(self) -> Expr:
        tok = self.peek()
        if tok is None:
            raise self.error("the expression ends too soon")
        self.i += 1
        kind, value, at = tok
        if value == "-":
            return ("neg", self.unary())
        if value == "+":
            return self.unary()
        if kind == "num":
            return ("num", float(value))
        if kind == "name":
            return ("col", value)
        if value == "(":
            e = self.sum()
            close = self.peek()
            if close is None or close[1] != ")":
                raise self.error(f"the parenthesis at position {at} is not closed")
            self.i += 1
            return e
        raise self.error(f"unexpected {value!r} at position {at}")


def parse_expression(text: str) -> Expr:
    """The parsed `bucket_by` expression.

    Raises:
        ValueError: naming the expression, for anything but column names, numbers,
            `+ - * /` and parentheses, or a malformed expression.
    """
    if not isinstance(text, str):
        raise ValueError(f"bucket_by takes {_HELP} (a str), got {text!r}")
    return _Parser(text).parse()


def columns_of(e: Expr) -> list[str]:
    """The column names an expression reads, in order of first use."""
    if e[0] == "col":
        return [str(e[1])]
    out: list[str] = []
    for part in e[1:]:
        if isinstance(part, tuple):
            out += [c for c in columns_of(part) if c not in out]
    return out


def evaluate(e: Expr, columns: dict[str, npt.NDArray[np.float64]]) -> Any:
    """The expression's values over `columns` (float64; a number for a constant)."""
    kind = e[0]
    if kind == "num":
        return e[1]
    if kind == "col":
        return columns[str(e[1])]
    if kind == "neg":
        return -evaluate(e[1], columns)
    a, b = evaluate(e[1], columns), evaluate(e[2], columns)
    if kind == "+":
        return a + b
    if kind == "-":
        return a - b
    if kind == "*":
        return a * b
    return a / b


#: The most buckets a count may ask for (its quantiles are computed in one array).
MAX_BUCKETS = 1 << 16


def check_buckets(bucket_by: str | None, buckets: Buckets | None) -> None:
    """Refuse a malformed `bucket_by` or `buckets` (before any data is read)."""
    if bucket_by is None:
        if buckets is not None:
            raise ValueError("buckets= needs bucket_by= (the column or expression to bucket by)")
        return
    parse_expression(bucket_by)
    if buckets is None:
        raise ValueError(
            f"bucket_by={bucket_by!r} needs buckets=: a count (quantile boundaries) or a "
            "list of increasing boundaries"
        )
    if isinstance(buckets, bool | float):
        raise ValueError(
            f"buckets must be a positive int or a list of increasing numbers, got {buckets!r}"
        )
    if isinstance(buckets, int):
        if not 1 <= buckets <= MAX_BUCKETS:
            raise ValueError(
                f"buckets must be a positive int (a count) of at most {MAX_BUCKETS}, "
                f"got {buckets!r}"
            )
        return
    if not isinstance(buckets, list | tuple) or not len(buckets):
        raise ValueError(
            f"buckets must be a positive int or a list of increasing numbers, got {buckets!r}"
        )
    values = list(buckets)
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    ):
        raise ValueError(f"bucket boundaries must be finite numbers, got {values!r}")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"bucket boundaries must increase strictly, got {values!r}")


@dataclass(frozen=True)
class BucketPlan:
    """Each item's bucket, and how it was found.

    Attributes:
        expression: the `bucket_by` expression.
        boundaries: the bucket boundaries: bucket `i` holds values `v` with
            `boundaries[i-1] <= v < boundaries[i]`.
        ids: the bucket of every item (int32, by item id).
        batch_size: the batch size per rank (a bucketed batch holds `batch_size`
            items on every rank).
    """

    expression: str
    boundaries: tuple[float, ...]
    ids: npt.NDArray[np.int32]
    batch_size: int

    @property
    def count(self) -> int:
        """The number of buckets."""
        return len(self.boundaries) + 1

    @functools.cached_property
    def sizes(self) -> npt.NDArray[np.int64]:
        """Items in each bucket (counted once: a sampler asks for every batch)."""
        return np.bincount(self.ids, minlength=self.count).astype(np.int64)

    def describe(self, group: int, span: int) -> dict[str, Any]:
        """What a sampler state records of the bucketing (checked when it is resumed)."""
        return {
            "by": self.expression, "boundaries": list(self.boundaries), "group": group,
            "span": span,
        }  # fmt: skip


def bucket_values(datasets: Sequence[Any], expression: str) -> npt.NDArray[np.float64]:
    """The value of `expression` for every item of `datasets` (in item order).

    Raises:
        ValueError: naming the expression and the known columns, for an unknown or
            non-numeric column, a missing value or a value that is not finite.
    """
    e = parse_expression(expression)
    names = columns_of(e)
    parts = []
    for ds in datasets:
        known = list(ds.metadata_columns)
        cols: dict[str, npt.NDArray[np.float64]] = {}
        for name in names:
            if name not in known:
                raise ValueError(
                    f"bucket_by {expression!r}: {ds.uri} has no column {name!r}; its index "
                    f"columns are {', '.join(known) or '(none)'}"
                )
            arr = ds.column(name)
            if arr.null_count:
                raise ValueError(
                    f"bucket_by {expression!r}: column {name!r} of {ds.uri} has "
                    f"{arr.null_count} missing values"
                )
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            try:  # straight from the buffers (pyarrow's to_numpy imports pandas: ~0.9 s)
                cols[name] = numpy_column(arr).astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"bucket_by {expression!r}: column {name!r} of {ds.uri} is not numeric "
                    f"({arr.type})"
                ) from exc
        with np.errstate(all="ignore"):
            v = np.broadcast_to(np.asarray(evaluate(e, cols), dtype=np.float64), (len(ds),)).copy()
        bad = np.flatnonzero(~np.isfinite(v))
        if len(bad):
            raise ValueError(
                f"bucket_by {expression!r} is not a finite number for {len(bad)} items of "
                f"{ds.uri} (the first at position {int(bad[0])}: {v[bad[0]]})"
            )
        parts.append(v)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)


def boundaries_of(values: npt.NDArray[np.float64], buckets: Buckets) -> tuple[float, ...]:
    """The boundaries of `buckets`: given ones as they are, or for a count `k` the
    `i/k` quantiles of `values` (numpy's linear method; equal quantiles merge, so heavy
    ties give fewer buckets): deterministic for the same data."""
    if not isinstance(buckets, int):
        return tuple(float(b) for b in buckets)
    if buckets <= 1 or not len(values):
        return ()
    # numpy's "linear" quantiles, computed here: np.quantile's first call imports a
    # module of numpy's (~0.1 s of make_loader)
    v = np.sort(values)
    at = np.arange(1, buckets) / buckets * (len(v) - 1)
    lo = np.floor(at).astype(np.int64)
    hi = np.minimum(lo + 1, len(v) - 1)
    q = v[lo] + (at - lo) * (v[hi] - v[lo])
    keep = np.concatenate([[True], np.diff(q) > 0])  # sorted: drop repeats
    return tuple(float(b) for b in q[keep])


def make_plan(
    datasets: Sequence[Any], expression: str, buckets: Buckets, batch_size: int
) -> BucketPlan:
    """The buckets of every item of `datasets` for `bucket_by=expression, buckets=`."""
    values = bucket_values(datasets, expression)
    bounds = boundaries_of(values, buckets)
    ids = np.searchsorted(np.asarray(bounds, dtype=np.float64), values, side="right")
    return BucketPlan(expression, bounds, ids.astype(np.int32), batch_size)


class BucketOrder(EpochOrder):
    """An epoch's order regrouped into groups of `group` items of one bucket each.

    The base order (the epoch's usual order) is cut into spans of `span` items. In each
    span, the items (after the ones carried over from the spans before) are gathered by
    bucket, in base order; each bucket's items are cut into groups of `group`, and what
    does not fill a group is carried over to the next span. The span's groups are then
    shuffled by a seeded permutation of (seed, epoch, span) (kept in formation order
    without `shuffle`). After the last span, what is carried over (each bucket's count
    modulo `group`) is laid out in bucket order and cut into groups of `group` as well:
    these few last groups (at most one per bucket) may hold neighbouring buckets, and the
    very last one may be short. `length` (less than the base order's) cuts that tail
    off: `drop_last` leaves each bucket's remainder out of the epoch.

    Every item appears once, and position `p` holds the same item for every rank and
    thread count. Computed a span at a time, as positions are asked for, under a lock:
    a loader's threads ask for positions at the same time. Memory: O(items) once the
    epoch is computed.
    """

    def __init__(
        self,
        base: EpochOrder,
        ids: npt.NDArray[np.int32],
        group: int,
        span: int,
        seed: int,
        epoch: int,
        shuffle: bool = True,
        length: int | None = None,
    ) -> None:
        super().__init__(len(base) if length is None else length)
        self.base = base
        self.ids = ids
        self.group = max(1, group)
        self.span = max(self.group, span)
        self._seed, self._epoch, self._shuffle = seed, epoch, shuffle
        self._out = np.empty(len(base), dtype=np.int64)
        self._filled = 0
        self._next_span = 0
        self._carry = np.zeros(0, dtype=np.int64)
        self._lock = threading.Lock()

    def _extend(self) -> None:
        """Compute the next span's groups (and, after the last, the carried tail)."""
        g = self.group
        lo = self._next_span * self.span
        hi = min(lo + self.span, len(self.base))
        fresh = self.base.at(np.arange(lo, hi, dtype=np.int64))
        items = np.concatenate([self._carry, fresh])
        by = np.argsort(self.ids[items], kind="stable")
        items = items[by]
        buckets = self.ids[items]
        starts = np.flatnonzero(np.diff(buckets)) + 1
        bounds = np.concatenate([[0], starts, [len(items)]]).tolist()
        keep, carry = [], []
        for a, b in itertools.pairwise(bounds):
            full = a + (b - a) // g * g
            keep.append(items[a:full])
            carry.append(items[full:b])
        groups = np.concatenate(keep).reshape(-1, g)
        if self._shuffle and len(groups) > 1:
            perm = rng(self._seed, self._epoch, 6, self._next_span).permutation(len(groups))
            groups = groups[perm]
        self._emit(groups.reshape(-1))
        # what fills no group waits for the next span (in base order within a bucket);
        # after the last span it is the epoch's tail, in bucket order
        self._carry = np.concatenate(carry)
        if hi >= len(self.base):
            self._emit(self._carry)
            self._carry = np.zeros(0, dtype=np.int64)
        self._next_span += 1

    def _emit(self, items: Order) -> None:
        self._out[self._filled : self._filled + len(items)] = items
        self._filled += len(items)

    def _at(self, pos: Order) -> Order:
        need = int(pos.max()) + 1
        if self._filled < need:
            with self._lock:
                while self._filled < need:
                    self._extend()
        return self._out[pos]
