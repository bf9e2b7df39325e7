"""`FerroLoader` and `make_loader`: batches built ahead on a background thread."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ferroload_codec import DecodeError
from ferroload_loader._augment import BatchTransform, Layout, Normalize
from ferroload_loader._batch import IndexWindow, finish_batch, prepare_batch, window_options
from ferroload_loader._fields import BatchState, ColumnSpec, Crop, Field, OnError, build_fields
from ferroload_loader._order import DEFAULT_SHUFFLE_BUFFER
from ferroload_loader._readahead import ReadAhead
from ferroload_loader._sampler import RankItems, Sampler
from ferroload_loader._source import ResolvedSource, resolve_source
from ferroload_store import BlockCache

logger = logging.getLogger(__name__)

DEFAULT_PREFETCH_BYTES = 512 << 20
DEFAULT_READAHEAD_BYTES = 256 << 20
Out = Literal["torch", "numpy"]
_END = object()


@dataclass
class LoaderStats:
    """Counters of a loader since it was created.

    Attributes:
        batches: batches delivered.
        samples: samples delivered.
        skipped: samples left out by `on_error="skip"`/`"warn"`.
        skipped_ids: their sample ids (the most recent 1000).
        build_seconds: time spent building batches (reading and decoding).
        wait_seconds: time the consumer waited for a batch (0 when the loader keeps up).
        peak_prefetch_bytes: the most bytes of built batches held at once.
    """

    batches: int = 0
    samples: int = 0
    skipped: int = 0
    skipped_ids: deque[str] = field(default_factory=lambda: deque(maxlen=1000))
    build_seconds: float = 0.0
    wait_seconds: float = 0.0
    peak_prefetch_bytes: int = 0


class BatchItems:
    """Batch `k`'s item ids of a rank's view, each computed once, several batches at a
    time: an order costs a few numpy calls per computation whatever its size (about
    200 us for one batch of 256, 40 us of it per round of cycle walking, against
    0.1-0.2 us an item in large runs), and the index window, the prefetcher and the
    read-ahead all ask for the same batches. Batches are kept until the prefetcher has
    prepared them (`forget`): at most what the index window and the read-ahead plan
    ahead."""

    #: Items computed together (rounded to whole batches).
    CHUNK = 8192

    def __init__(self, view: RankItems, batch_size: int) -> None:
        self._view = view
        self._batch_size = batch_size
        self._per = max(1, self.CHUNK // batch_size)
        self._memo: dict[int, npt.NDArray[np.int64]] = {}
        self._lock = threading.Lock()
        self._done = 0  # batches below this are forgotten and not kept again

    def __call__(self, k: int) -> npt.NDArray[np.int64]:
        with self._lock:
            got = self._memo.get(k)
        if got is not None:
            return got
        b = self._batch_size
        items = self._view.items(k * b, (k + self._per) * b)
        batches = [items[j : j + b] for j in range(0, len(items), b)] or [items]
        with self._lock:
            for j, arr in enumerate(batches):
                if k + j >= self._done:
                    self._memo[k + j] = arr
        return batches[0]

    def forget(self, k: int) -> None:
        """Batches up to `k` are prepared: drop them."""
        with self._lock:
            for j in range(self._done, k + 1):
                self._memo.pop(j, None)
            self._done = max(self._done, k + 1)


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
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if out not in ("torch", "numpy"):
            raise ValueError(f"out must be 'torch' or 'numpy', got {out!r}")
        if on_error not in ("raise", "skip", "warn"):
            raise ValueError(f"on_error must be raise, skip or warn, got {on_error!r}")
        if not isinstance(prefetch_bytes, int) or prefetch_bytes < 0:
            raise ValueError(f"prefetch_bytes must be a non-negative int, got {prefetch_bytes!r}")
        if not isinstance(readahead_bytes, int) or readahead_bytes < 0:
            raise ValueError(f"readahead_bytes must be a non-negative int, got {readahead_bytes!r}")
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
        self._worker: _Prefetcher | None = None

    # ------------------------------------------------------------------ size and state

    def _rank_batches(self) -> tuple[int, BatchItems]:
        """This rank's batches for the rest of the epoch, from the current position:
        their count and a function computing batch `k`'s item ids (nothing is
        materialised ahead)."""
        view = self.sampler.view()
        b = self.batch_size
        count = len(view) // b if self.drop_last else -(-len(view) // b)
        return count, BatchItems(view, b)

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

        The batch size and the world size may differ from the run that saved it.

        Raises:
            ValueError: for a state of another dataset or order, or the state of one
                `DataLoader` worker (restore that one through `StatefulDataLoader`).
        """
        check_state(state, worker_states=False)
        self.sampler.load_state_dict(dict(state["sampler"]))

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass: the current epoch from its start, batch by batch (see `Sampler` for
        the rules: the restored position after `load_state_dict`, the next epoch after a
        finished pass, `set_epoch` wins).

        The pass starts at the first `next()`, not at `iter()`: Lightning creates a
        resumed run's iterator before it calls `set_epoch`.
        """
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
        worker = _Prefetcher(
            self, count, batch_of, self.sampler.seed, self.sampler.epoch, readahead, window
        )
        self._worker = worker
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                batch, errors, n_items = worker.take()
                self.stats.wait_seconds += time.perf_counter() - t0
                self.sampler.advance(n_items)
                self.stats.batches += 1
                self.stats.samples += len(batch["sample_id"])
                if errors:
                    self.stats.skipped += len(errors)
                    self.stats.skipped_ids.extend(e.sample_id for e in errors if e.sample_id)
                yield batch
            self.sampler.end_pass()
        finally:
            worker.stop()

    def _begin_pass(self) -> None:
        self.sampler.begin_pass()

    def close(self) -> None:
        """Stop the prefetch thread of an unfinished iteration."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

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
        return prepare_batch(
            self.source, self.fields, items, seed=seed, epoch=epoch, window=window, index=index
        )

    def _finish(
        self, state: BatchState, meanwhile: Callable[[], None] | None = None
    ) -> tuple[dict[str, Any], list[DecodeError]]:
        t0 = time.perf_counter()
        batch, errors = finish_batch(
            state, self.fields, on_error=self.on_error, meanwhile=meanwhile
        )
        if self.out == "torch":
            batch = to_torch(batch, pin=self.pin_memory)
        if self.transform is not None:
            batch = self.transform(batch, state.seeds)
        self.stats.build_seconds += time.perf_counter() - t0
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


class _Prefetcher:
    """Builds the batches of one iteration, in order, ahead of the consumer.

    One thread: while the decode pool's other threads start on batch i, this thread reads
    batch i+1 (ids, metadata, payload views: `prepare`), then joins the decoding. Reading
    thus overlaps decoding without an extra runnable thread (which would slow decoding
    by about 10% on a machine whose cores the decoders already fill). The first batch is
    handed over before batch 1 is read, so that it waits for its own reads only. Built
    batches wait within a byte budget (one is always allowed when none is waiting).
    """

    def __init__(
        self,
        loader: FerroLoader,
        count: int,
        batch_of: Callable[[int], npt.NDArray[np.int64]],
        seed: int,
        epoch: int,
        readahead: ReadAhead | None = None,
        window: IndexWindow | None = None,
    ) -> None:
        self._loader = loader
        self._readahead = readahead
        self._window = window
        self._batch_of = batch_of
        self._prepared = 0
        self._queue: deque[tuple[Any, int, int]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, args=(count, batch_of, seed, epoch), name="ferroload-prefetch",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def _prepare(self, items: npt.NDArray[np.int64], seed: int, epoch: int) -> Any:
        try:
            return self._loader._prepare(items, seed, epoch, self._window, self._prepared)
        except BaseException as exc:  # handed on, raised in the consumer in its turn
            return exc
        finally:
            if self._readahead is not None:
                self._readahead.done(self._prepared)
            if isinstance(self._batch_of, BatchItems):
                self._batch_of.forget(self._prepared)
            self._prepared += 1

    def _run(
        self, count: int, batch_of: Callable[[int], npt.NDArray[np.int64]], seed: int, epoch: int
    ) -> None:
        budget = self._loader.prefetch_bytes
        items: npt.NDArray[np.int64] | None
        state: Any
        try:
            items = batch_of(0) if count else None
        except BaseException as exc:  # handed on, raised in the consumer
            items, state = None, exc
        else:
            state = self._prepare(items, seed, epoch) if items is not None else None
        for i in range(count):
            n_items = len(items) if items is not None else 0
            cost = self._loader.estimate_bytes(n_items)
            with self._cond:
                while not self._stopped and self._queue and self._bytes + cost > budget:
                    self._cond.wait()
                if self._stopped:
                    return
            upcoming: list[Any] = []
            following: list[Any] = []

            def read_next(
                i: int = i, upcoming: list[Any] = upcoming, following: list[Any] = following
            ) -> None:
                if i + 1 < count:
                    try:
                        nxt = batch_of(i + 1)
                    except BaseException as exc:  # handed on, raised in the consumer
                        following.append(None)
                        upcoming.append(exc)
                        return
                    following.append(nxt)
                    upcoming.append(self._prepare(nxt, seed, epoch))

            # the first batch is handed over before the second is read (the consumer's
            # first batch waits for its own reads only); later ones overlap the next read
            meanwhile = read_next if i else None
            if isinstance(state, BaseException):
                result: Any = state
            else:
                try:
                    result = self._loader._finish(state, meanwhile)
                except BaseException as exc:  # handed on, raised in the consumer
                    result = exc
            with self._cond:
                self._queue.append((result, cost, n_items))
                self._bytes += cost
                stats = self._loader.stats
                stats.peak_prefetch_bytes = max(stats.peak_prefetch_bytes, self._bytes)
                self._cond.notify_all()
            if isinstance(result, BaseException):
                return
            if meanwhile is None:
                read_next()
            # finish_batch always runs its meanwhile
            state = upcoming[0] if upcoming else None
            items = following[0] if following else None

    def take(self) -> tuple[dict[str, Any], list[DecodeError], int]:
        """The next batch, its decode errors and the number of items it was built from."""
        with self._cond:
            while not self._queue:
                if not self._thread.is_alive():
                    raise RuntimeError("the prefetch thread stopped without a batch")
                self._cond.wait(timeout=0.5)
            result, cost, n_items = self._queue.popleft()
            self._bytes -= cost
            self._cond.notify_all()
        if isinstance(result, BaseException):
            raise result
        batch, errors = result
        return batch, errors, n_items

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._bytes = 0
            self._cond.notify_all()
        if self._readahead is not None:
            self._readahead.stop()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)


def check_state(state: Mapping[str, Any], *, worker_states: bool) -> int:
    """The number of DataLoader workers whose positions `state` is one of (1: a whole
    loader's state).

    Raises:
        ValueError: for anything but a loader's `state_dict()`, or (unless
            `worker_states`) the state of one of several DataLoader workers.
    """
    if not isinstance(state, Mapping) or "sampler" not in state:
        keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"not a loader state ({keys}); pass what state_dict() returned")
    workers = int(state.get("num_workers", 1))
    if workers > 1 and not worker_states:
        raise ValueError(
            f"this state is DataLoader worker {state.get('worker')} of {workers}'s position; "
            "restore it with StatefulDataLoader.load_state_dict, which hands every worker its own"
        )
    return workers


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
    source: Any,
    *,
    batch_size: int,
    images: ColumnSpec = (),
    audio: ColumnSpec = (),
    video: ColumnSpec = (),
    meta: Sequence[str] = (),
    resize: int | tuple[int, int] | None = None,
    crop: Crop = None,
    hflip: float = 0.0,
    layout: Layout = "NHWC",
    dtype: Any = None,
    normalize: Normalize | None = None,
    transform: Callable[..., Any] | None = None,
    out: Out = "torch",
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    where: str | None = None,
    threads: int | None = None,
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    readahead_bytes: int = DEFAULT_READAHEAD_BYTES,
    streaming: bool = False,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    lanes: int | None = None,
    pin_memory: bool = False,
    on_error: OnError = "raise",
    rank: int | None = None,
    world_size: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache: BlockCache | Literal["default"] | None = "default",
) -> FerroLoader:
    """A loader of decoded batches: deterministic, elastic, resumable, no worker processes.

    Images can be augmented and made model-ready in the decode threads (`crop="random"`,
    `hflip`, `layout`, `dtype`, `normalize`): every random choice (crop box, flip) is
    drawn from the sample's seed, a function of `seed`, the epoch and the sample, so
    batches are the same whatever `threads`, worker processes, ranks or a resume.

    Args:
        source: a dataset URI, a `Dataset` (or a subset view), or `mix(...)`.
        batch_size: samples per batch on this rank.
        images: image modalities to decode (names, or name -> `ImageDecoder` options).
        audio: audio modalities (name -> `AudioDecoder` options; `length` is required).
        video: video modalities (name -> `decode_video` options; `num_frames`, `size`).
        meta: metadata columns: numbers as arrays/tensors, the rest as lists.
        resize: output `(height, width)` (or an int) of images and video frames.
        crop: `None` stretches to `resize`; `"center"` scales the shorter side and crops
            the centre; `"pad"` scales the longer side and pads; `"random"` (or a
            `RandomResizedCrop(scale=, ratio=)`) cuts a box of random area and aspect
            ratio out of each image and resizes it, as torchvision's `RandomResizedCrop`
            (images only).
        hflip: probability of flipping each image left-right (default 0: never).
        layout: of image batches: `"NHWC"` (default) or `"NCHW"`.
        dtype: of image batches: `uint8` (default), `float32`, `float16` or `bfloat16`
            (needs `out="torch"`), as a name, a numpy or a torch dtype; floats are scaled
            to [0, 1].
        normalize: `(mean, std)`, per channel on the [0, 1] scale: images become
            `(x / 255 - mean) / std`, as torchvision's `Normalize` computes it (float32
            unless `dtype` says otherwise; refused with uint8).
        transform: `fn(batch) -> batch`, run on each finished batch in the prefetch
            thread (after the conversion to tensors with `out="torch"`); given a
            parameter named `rng`, it gets a `numpy.random.Generator` seeded from the
            seed, the epoch and the batch's items. It must return the batch (a dict that
            keeps `sample_id`); its exceptions reach the loop with a note naming it.
        out: `"torch"` (tensors; needs the torch extra) or `"numpy"`.
        shuffle: a new permutation every epoch (else dataset order).
        seed: with the epoch, fixes the order.
        drop_last: drop the last, incomplete batch (on every rank); else ranks are padded
            to the same length by wrapping around.
        where: a SQL WHERE clause over the index (see `Dataset.subset`).
        threads: decode threads (default: the CPUs available).
        prefetch_bytes: bytes of built batches held ahead of the consumer.
        readahead_bytes: for remote datasets, bytes of cache blocks fetched ahead of the
            batch builder in the epoch's known order (0 turns read-ahead off).
        streaming: read shard by shard: shards in a shuffled order, then a seeded shuffle
            within windows of `shuffle_buffer` items of that stream.
        shuffle_buffer: items per streaming shuffle window (default 65,536; the first
            windows are smaller: 128 items, doubling).
        lanes: streaming: the order is dealt out in this many pieces of disjoint shards
            (default: the world size, so that each rank reads shards of its own; 1: the
            same order whatever the world size). A resumed state keeps its own.
        pin_memory: page-lock tensors for faster copies to a GPU (when CUDA is present).
        on_error: per-sample decode failures: `raise`, or leave the sample out of its
            batch (`skip`), also logging it (`warn`); counted in `loader.stats`.
        rank: this process's rank (default: torch.distributed, else `RANK`, else 0).
        world_size: the number of ranks (default: torch.distributed, else
            `WORLD_SIZE`, else 1).
        storage_options: for URIs, as in `Dataset.open`.
        cache: for URIs of object stores, the block cache of payload reads, as in
            `Dataset.open` (`"default"`, a `ferroload_store.BlockCache`, or None).

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
        ValueError: for invalid options (a `dtype`, `layout`, `crop` or `normalize` the
            loader does not know, `normalize` with uint8, bfloat16 with numpy output, …).
        ColumnNotFoundError: for a field the dataset lacks.
    """
    resolved = resolve_source(source, where=where, storage_options=storage_options, cache=cache)
    fields = build_fields(
        resolved, images=images, audio=audio, video=video, meta=meta, resize=resize, crop=crop,
        threads=threads, hflip=hflip, layout=layout, dtype=dtype, normalize=normalize,
    )  # fmt: skip
    sampler = make_sampler(
        resolved, shuffle=shuffle, seed=seed, streaming=streaming, shuffle_buffer=shuffle_buffer,
        drop_last=drop_last, rank=rank, world_size=world_size, lanes=lanes,
    )  # fmt: skip
    return FerroLoader(
        resolved, fields, sampler, batch_size=batch_size, drop_last=drop_last, out=out,
        pin_memory=pin_memory, prefetch_bytes=prefetch_bytes,
        readahead_bytes=readahead_bytes, on_error=on_error, transform=transform,
    )  # fmt: skip


def make_sampler(
    source: ResolvedSource,
    *,
    shuffle: bool,
    seed: int,
    streaming: bool,
    shuffle_buffer: int,
    drop_last: bool,
    rank: int | None,
    world_size: int | None,
    lanes: int | None = None,
) -> Sampler:
    """The sampler `make_loader` uses for `source` (shared with the torch adapters)."""
    common: dict[str, Any] = {
        "shuffle": shuffle, "seed": seed, "drop_last": drop_last, "rank": rank,
        "world_size": world_size,
    }  # fmt: skip
    if source.mixture is not None:
        if streaming:
            raise ValueError("streaming=True does not apply to mix(): mixtures draw items")
        return Sampler(
            source.num_items, mode="mixture",
            mixture_sizes=[len(d) for d in source.datasets],
            mixture_weights=source.mixture.weights, **common,
        )  # fmt: skip
    if streaming:
        base = 0
        starts, codes = [], []
        for ds, offset in zip(source.datasets, source.offsets.tolist(), strict=True):
            s, c = ds.shard_runs()  # O(runs), not a shard per item
            starts.append(np.asarray(s, dtype=np.int64) + offset)
            codes.append(np.asarray(c, dtype=np.int64) + base)
            base += ds.num_shards
        runs = (
            (np.concatenate(starts), np.concatenate(codes))
            if starts
            else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        )
        return Sampler(
            source.num_items, mode="shard_block", shard_runs=runs,
            shuffle_buffer=shuffle_buffer, lanes=lanes, **common,
        )  # fmt: skip
    return Sampler(source.num_items, mode="permutation", **common)
