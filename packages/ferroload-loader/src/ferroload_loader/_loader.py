"""`FerroLoader` and `make_loader`: batches built ahead on a background thread.

`make_loader` turns a source and its `LoaderOptions` into fields, a sampler and a
`FerroLoader`, whose passes run a `Prefetcher` (`_prefetch`); `to_torch` is shared with
the torch adapters (and `_state.check_loader_state`, which reads every loader state).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from ferroload_codec import DecodeError
from ferroload_loader._augment import BatchTransform
from ferroload_loader._batch import (
    IndexWindow,
    finish_batch,
    payload_bytes,
    prepare_batch,
    window_options,
)
from ferroload_loader._checks import check_bool
from ferroload_loader._fields import BatchState, Field, OnError, build_fields
from ferroload_loader._options import (
    DEFAULT_PREFETCH_BYTES,
    DEFAULT_READAHEAD_BYTES,
    LoaderKeywords,
    LoaderOptions,
    Out,
    check_batch_size,
    check_build_options,
    field_options,
    make_sampler,
    take_options,
)
from ferroload_loader._prefetch import BatchItems, Prefetcher
from ferroload_loader._readahead import ReadAhead
from ferroload_loader._sampler import Sampler
from ferroload_loader._source import ResolvedSource, resolve_source
from ferroload_loader._state import check_loader_state


@dataclass
class LoaderStats:
    """Counters of a loader since it was created, and where its time went.

    Always on: a few clock readings per batch, none per sample. The stages of a batch
    are timed where they run: `prepare_seconds` (ids, metadata, payload locations and
    views: the index window, range planning, reads), `decode_seconds` (decoding into the
    batch arrays, on the decode pool; the prepare of the next batch, which runs in the
    meanwhile on the same thread, is not counted twice) and `collate_seconds` (leaving
    failed items out, finishing columns, the torch conversion and a `transform`) on the
    prefetch thread; `wait_seconds` on the consumer's (waiting for the next batch) and
    `blocked_seconds` on the prefetch thread's (a built batch waiting for room within
    `prefetch_bytes`, or for the consumer to take the first batch). `build_seconds` is
    decode and collate together (the prefetch thread's busy time is `build_seconds +
    prepare_seconds`).

    Attributes:
        batches: batches delivered.
        samples: samples delivered.
        skipped: samples left out by `on_error="skip"`/`"warn"`.
        skipped_ids: their sample ids (the most recent 1000).
        bytes_read: encoded payload bytes of the batches prepared (decoded modalities).
        prepared: batches prepared (read ahead: may run ahead of `batches`).
        prepare_seconds: time reading batches' index entries and payloads.
        decode_seconds: time decoding batches (the decode pool's wall time).
        collate_seconds: time finishing batches after decoding (failed items left out,
            torch conversion, the transform).
        build_seconds: `decode_seconds + collate_seconds`.
        wait_seconds: time the consumer waited for a batch (0 when the loader keeps up).
        blocked_seconds: time the prefetch thread waited with a built batch (the
            consumer is slower: the loader keeps up).
        first_batch_seconds: from the latest pass's first `next()` to its first batch.
        peak_prefetch_bytes: the most bytes of built batches held at once.

    Examples:
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/stats-example", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i})
        >>> dl = make_loader("memory://docs/stats-example", batch_size=4, meta=["label"],
        ...                  out="numpy")
        >>> _ = list(dl)
        >>> st = dl.stats
        >>> st.batches, st.samples, st.prepared
        (3, 10, 3)
        >>> st.build_seconds == st.decode_seconds + st.collate_seconds
        True
    """

    batches: int = 0
    samples: int = 0
    skipped: int = 0
    skipped_ids: deque[str] = field(default_factory=lambda: deque(maxlen=1000))
    bytes_read: int = 0
    prepared: int = 0
    prepare_seconds: float = 0.0
    decode_seconds: float = 0.0
    collate_seconds: float = 0.0
    wait_seconds: float = 0.0
    blocked_seconds: float = 0.0
    first_batch_seconds: float = 0.0
    peak_prefetch_bytes: int = 0

    @property
    def build_seconds(self) -> float:
        """Decoding and collating: `decode_seconds + collate_seconds`."""
        return self.decode_seconds + self.collate_seconds

    def per_batch(self) -> dict[str, float]:
        """Each stage's seconds per batch delivered (0 before the first batch): prepare,
        decode, collate, wait and blocked."""
        n = self.batches
        stages = {
            "prepare": self.prepare_seconds,
            "decode": self.decode_seconds,
            "collate": self.collate_seconds,
            "wait": self.wait_seconds,
            "blocked": self.blocked_seconds,
        }
        return {k: (v / n if n else 0.0) for k, v in stages.items()}


class FerroLoader:
    """Deterministic, resumable batches of decoded samples; see `make_loader`.

    Each `iter()` is a pass over the current epoch from its start, as with a torch
    `DataLoader`: a pass cut short (`break`) is replayed whole by the next one; a pass
    that ran to the end moves the next one to the next epoch's order by itself;
    `set_epoch(e)` chooses the epoch explicitly and wins. After `load_state_dict()` the
    next pass delivers exactly the rest of the saved epoch. `len()` is the whole epoch
    (batches on this rank), `remaining()` what is left of it; `state_dict()` captures
    the position after the batches delivered so far.
    """

    def __init__(
        self,
        source: ResolvedSource,
        fields: Sequence[Field],
        sampler: Sampler,
        *,
        batch_size: int,
        drop_last: bool = False,
        out: Out = "torch",
        pin_memory: bool = False,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        readahead_bytes: int = DEFAULT_READAHEAD_BYTES,
        on_error: OnError = "raise",
        transform: Callable[..., Any] | None = None,
    ) -> None:
        check_batch_size(batch_size)
        check_bool("drop_last", drop_last)
        check_bool("pin_memory", pin_memory)
        check_build_options(out, on_error, prefetch_bytes, readahead_bytes)
        if out == "torch":
            _require_torch()
        bf16 = [f.name for f in fields if getattr(f, "torch_dtype", None) == "bfloat16"]
        if bf16:
            if out != "torch":
                raise ValueError(
                    f"dtype bfloat16 ({', '.join(bf16)}) is a torch dtype: pass out='torch', "
                    "or dtype='float32' / 'float16' for numpy"
                )
            _require_torch()
        self.source = source
        self.fields = list(fields)
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.out: Out = out
        self.pin_memory = pin_memory
        self.prefetch_bytes = prefetch_bytes
        self.readahead_bytes = readahead_bytes
        self.on_error: OnError = on_error
        #: the per-batch transform (None for none)
        self.transform = None if transform is None else BatchTransform(transform)
        self.stats = LoaderStats()
        self._item_bytes = sum(f.item_bytes() for f in self.fields)
        self._worker: Prefetcher | None = None

    # ------------------------------------------------------------------ size and state

    def _rank_batches(self) -> tuple[int, BatchItems]:
        """This rank's batches for the rest of the epoch, from the current position:
        their count and a function computing batch `k`'s item ids (nothing is
        materialised ahead)."""
        view = self.sampler.view()
        b = self.batch_size
        count = len(view) // b if self.drop_last else -(-len(view) // b)
        return count, BatchItems(view, b, count)

    #: Lightning looks for a batch sampler next to `sampler`; the loader batches itself.
    batch_sampler = None

    def __len__(self) -> int:
        """Batches of a whole epoch on this rank, also mid-epoch and after a resume (what
        torch and Lightning expect of a length); `remaining()` counts what is left."""
        return self._batches(len(self.sampler))

    def remaining(self) -> int:
        """Batches this rank still delivers in the current epoch."""
        return self._batches(self.sampler.remaining())

    def _batches(self, items: int) -> int:
        return items // self.batch_size if self.drop_last else -(-items // self.batch_size)

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Use the order of `epoch` from its start for the next pass (the current epoch
        again keeps a position restored by `load_state_dict`); see `Sampler.set_epoch`."""
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The position after the batches delivered so far (prefetched ones do not count)."""
        return {"sampler": self.sampler.state_dict(), "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after a `state_dict()`: the next pass delivers the rest of its epoch,
        later passes the usual order.

        The batch size and the world size may differ from the run that saved it. The
        state is checked whole before anything changes (see `Sampler.load_state_dict`).

        Raises:
            LoaderStateError: (a `ValueError`) for a key missing or unknown, a value of
                another type or out of range, a state of another dataset or order, or
                the state of one `DataLoader` worker (restore that one through
                `StatefulDataLoader`), naming the key and its value.
        """
        self.sampler.restore(check_loader_state(state, self.sampler).sampler)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass: the current epoch from its start, batch by batch (see `Sampler` for
        the rules: the restored position after `load_state_dict`, the next epoch after a
        finished pass, `set_epoch` wins).

        The pass starts at the first `next()`, not at `iter()`: Lightning creates a
        resumed run's iterator before it calls `set_epoch`.
        """
        t_pass = time.perf_counter()
        self._begin_pass()
        count, batch_of = self._rank_batches()
        self.close()
        readahead = self._readahead(count, batch_of)
        # the index entries of many upcoming batches, read together (one pass over their
        # row groups instead of a row group per item per batch)
        most, growth = window_options(self.sampler.mode)
        window = IndexWindow(
            self.source, self.fields, batch_of, count, max_items=most, growth=growth
        )
        worker = Prefetcher(
            self, count, batch_of, self.sampler.seed, self.sampler.epoch, readahead, window
        )
        self._worker = worker
        stats = self.stats
        first = True
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                batch, errors, n_items = worker.take()
                t1 = time.perf_counter()
                stats.wait_seconds += t1 - t0
                if first:
                    stats.first_batch_seconds = t1 - t_pass
                    first = False
                self.sampler.advance(n_items)
                stats.batches += 1
                stats.samples += len(batch["sample_id"])
                if errors:
                    stats.skipped += len(errors)
                    stats.skipped_ids.extend(e.sample_id for e in errors if e.sample_id)
                yield batch
            self.sampler.end_pass()
        finally:
            worker.stop()

    def _begin_pass(self) -> None:
        self.sampler.begin_pass(self.batch_size)

    def close(self) -> None:
        """Stop the prefetch thread of an unfinished iteration."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def __del__(self) -> None:
        # not contextlib.suppress: at interpreter exit this module's globals may already
        # be None, and the AttributeError would be printed as "Exception ignored in ..."
        try:  # noqa: SIM105  (see above)
            self.close()
        except Exception:  # nothing to report from a finalizer
            pass

    def _readahead(
        self, count: int, batch_of: Callable[[int], npt.NDArray[np.int64]]
    ) -> ReadAhead | None:
        """A read-ahead over the blocks the batches read, planned a window at a time, for
        datasets with a block cache (remote ones); None for local data."""
        modalities = {m.name for d in self.source.datasets for m in d.modalities}
        names = [f.name for f in self.fields if f.name in modalities]
        if not count or not names or self.readahead_bytes == 0:
            return None
        if all(d.store.block_size is None for d in self.source.datasets):
            return None
        # a lane's window spans `lanes` times its items of the global order
        per_rank = self.batch_size * self.sampler.world_size
        span = self.sampler.shuffle_buffer * self.sampler.lanes
        horizon = 2 * -(-span // per_rank) + 1 if self.sampler.mode == "shard_block" else 0
        return ReadAhead(self.source, names, batch_of, count, self.readahead_bytes, horizon=horizon)

    def _prepare(
        self,
        items: npt.NDArray[np.int64],
        seed: int,
        epoch: int,
        window: IndexWindow | None = None,
        index: int | None = None,
    ) -> BatchState:
        t0 = time.perf_counter()
        try:
            state = prepare_batch(
                self.source, self.fields, items, seed=seed, epoch=epoch, window=window,
                index=index,
            )  # fmt: skip
        finally:
            self.stats.prepare_seconds += time.perf_counter() - t0
        self.stats.prepared += 1
        self.stats.bytes_read += payload_bytes(state.shares)
        return state

    def _finish(
        self, state: BatchState, meanwhile: Callable[[], None] | None = None
    ) -> tuple[dict[str, Any], list[DecodeError]]:
        # the meanwhile (the next batch's prepare) runs inside the decoding: its time is
        # the prepare's, not the decode's
        inner: list[float] = [0.0]
        timed: Callable[[], None] | None = None
        if meanwhile is not None:
            work = meanwhile

            def timed_work() -> None:
                t = time.perf_counter()
                try:
                    work()
                finally:
                    inner[0] += time.perf_counter() - t

            timed = timed_work

        stats = self.stats
        clock: list[float] = []
        t0 = time.perf_counter()
        try:
            batch, errors = finish_batch(
                state, self.fields, on_error=self.on_error, meanwhile=timed, clock=clock
            )
            if self.out == "torch":
                batch = to_torch(batch, pin=self.pin_memory)
            if self.transform is not None:
                batch = self.transform(batch, state.seeds)
        finally:
            t2 = time.perf_counter()
            t1 = clock[0] if clock else t2
            stats.decode_seconds += max(0.0, t1 - t0 - inner[0])
            stats.collate_seconds += t2 - t1
        return batch, errors

    def estimate_bytes(self, items: int | npt.NDArray[np.int64]) -> int:
        """Bytes a built batch of `items` (ids, or their count) holds while it waits: its
        decoded arrays (the encoded payloads are released once decoded), plus a little
        per sample for ids."""
        n = items if isinstance(items, int) else len(items)
        return n * (self._item_bytes + 64)

    def __repr__(self) -> str:
        names = [f.name for f in self.fields]
        return (
            f"FerroLoader({len(self)} batches of {self.batch_size}, columns={names}, "
            f"out={self.out!r}, {self.sampler!r})"
        )


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "out='torch' needs torch: pip install 'ferroload-loader[torch]', or pass out='numpy'"
        ) from exc


def to_torch(batch: dict[str, Any], *, pin: bool) -> dict[str, Any]:
    """The batch with numpy arrays as (optionally page-locked) torch tensors (tensors
    already, such as bfloat16 images, are page-locked too)."""
    import torch

    pin = pin and torch.cuda.is_available()
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(v)
            out[k] = t.pin_memory() if pin else t
        elif pin and isinstance(v, torch.Tensor):
            out[k] = v.pin_memory()
        else:
            out[k] = v
    return out


def make_loader(
    source: Any, *, options: LoaderOptions | None = None, **keywords: Unpack[LoaderKeywords]
) -> FerroLoader:
    """A loader of decoded batches: deterministic, elastic, resumable, no worker processes.

    Images can be augmented and made model-ready in the decode threads (`crop="random"`,
    `hflip`, `layout`, `dtype`, `normalize`): every random choice (crop box, flip) is
    drawn from the sample's seed, a function of `seed`, the epoch and the sample, so
    batches are the same whatever `threads`, worker processes, ranks or a resume.

    Args:
        source: a dataset URI, a `Dataset` (or a subset view), or `mix(...)`.
        options: every option at once, as a `LoaderOptions` (then no keyword options).
        **keywords: the options of `LoaderOptions`, of which `batch_size` is required:
            `batch_size`, `images`, `audio`, `video`, `meta`, `resize`, `crop`, `hflip`,
            `layout`, `dtype`, `normalize`, `transform`, `out`, `shuffle`, `seed`,
            `drop_last`, `where`, `threads`, `prefetch_bytes`, `readahead_bytes`,
            `streaming`, `shuffle_buffer`, `lanes`, `bucket_by`, `buckets`,
            `pin_memory`, `on_error`, `rank`,
            `world_size`, `storage_options`, `cache`.

    Examples:
        >>> import numpy as np
        >>> from ferroload_format import Writer
        >>> with Writer("memory://docs/loader-example", "demo") as w:
        ...     for i in range(10):
        ...         w.add(f"s{i}", None, {"label": i % 3})
        >>> dl = make_loader("memory://docs/loader-example", batch_size=4, meta=["label"],
        ...                  out="numpy", seed=0)
        >>> [len(b["sample_id"]) for b in dl]
        [4, 4, 2]

    Raises:
        TypeError: for an unknown keyword, no `batch_size`, or both `options` and
            keyword options.
        ValueError: for invalid options (a `dtype`, `layout`, `crop` or `normalize` the
            loader does not know, `normalize` with uint8, bfloat16 with numpy output, …).
        ColumnNotFoundError: for a field the dataset lacks.
    """
    o = take_options("make_loader", options, keywords)
    assert o.batch_size is not None  # take() requires it
    resolved = resolve_source(
        source, where=o.where, storage_options=o.storage_options, cache=o.cache
    )
    fields = build_fields(resolved, threads=o.threads, **field_options(o))
    sampler = make_sampler(resolved, o)
    return FerroLoader(
        resolved, fields, sampler, batch_size=o.batch_size, drop_last=o.drop_last, out=o.out,
        pin_memory=o.pin_memory, prefetch_bytes=o.prefetch_bytes,
        readahead_bytes=o.readahead_bytes, on_error=o.on_error, transform=o.transform,
    )  # fmt: skip
