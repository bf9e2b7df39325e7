"""`ferroload.Dataset` with ferroload-rs 0.1.1's reader methods, and 0.1.1's map outputs.

`Dataset` is `ferroload_format.Dataset` plus 0.1.1's spellings, each warning with the 0.2
one: `get` samples that also answer `["meta"]`, `["<modality>_present"]` and
`["basename"]`; `modalities()`, `manifest()` and `num_shards()` as calls; `verify()`
comparing equal to the sample count; `read`/`read_many`/`read_batch`/`decode_many`/
`decode_audio`/`decode_video`/`meta_batch`/`read_array(s)`; the framework views
`torch()`/`numpy()`/`jax()`/`iterable()`; `reader`, `root`, `indices`;
`Dataset.open(root, cache_dir)`; and `map` in 0.1.1's form (per-sample `fn`,
`outputs={"x": "array"}`, `name=`), see `compat._map`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import ferroload_format
from ferroload.compat import deprecated, removed
from ferroload_format import Manifest, VerifyReport
from ferroload_format import Modality as FormatModality


class Sample(dict[str, Any]):
    """A 0.2 sample (flat: `sample_id`, modalities, metadata columns) that also answers
    0.1.1's keys, with a `FutureWarning`: `["meta"]` (the metadata columns as a dict),
    `["<modality>_present"]` and `["basename"]` (the sample id)."""

    __slots__ = ("_meta", "_mods")

    def __init__(self, flat: Mapping[str, Any], meta: Sequence[str], mods: Sequence[str]):
        super().__init__(flat)
        self._meta = tuple(meta)
        self._mods = tuple(mods)

    def __missing__(self, key: str) -> Any:
        if key == "meta":
            deprecated('sample["meta"][name]', "sample[name] (0.2 samples are flat)")
            return {k: dict.__getitem__(self, k) for k in self._meta if k in self}
        if isinstance(key, str) and key.endswith("_present") and key[:-8] in self._mods:
            deprecated(f'sample["{key}"]', f'sample["{key[:-8]}"] is not None')
            return dict.get(self, key[:-8]) is not None
        if key == "basename":
            deprecated(
                'sample["basename"]', 'sample["sample_id"] (the key the sample was added under)'
            )
            return dict.__getitem__(self, "sample_id")
        raise KeyError(key)


class _Callable:
    """Mixin: a value that 0.1.1 code calls like a method (`ds.num_shards()`)."""

    _old = ""
    _new = ""

    def __call__(self) -> Any:
        deprecated(self._old, self._new)
        return self._answer()

    def _answer(self) -> Any:
        return self


class _Count(_Callable, int):
    """`ds.num_shards`: an int, and `ds.num_shards()` for 0.1.1 code."""

    _old, _new = "ds.num_shards()", "ds.num_shards (a property)"

    def _answer(self) -> int:
        return int(self)


class _Modalities(_Callable, tuple):  # type: ignore[type-arg]
    """`ds.modalities`: the `Modality` records, and `ds.modalities()` for 0.1.1 code
    (a dict name -> {"ext", "kind", "codec"})."""

    _old, _new = (
        "ds.modalities()",
        "ds.modalities (a tuple of Modality: .name, .ext, .kind, .codec_hint)",
    )

    def _answer(self) -> dict[str, dict[str, str]]:
        return {
            m.name: {
                "ext": m.ext,
                "kind": "scalar" if m.kind == "text" else "tensor",
                "codec": m.codec_hint,
            }
            for m in self
        }


class _Report(VerifyReport):
    """`ds.verify()`'s report; equal to an int (0.1.1 returned the count verified) when
    nothing is wrong and the count is the dataset's."""

    num_samples: int = 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            deprecated("ds.verify() == count", "ds.verify().ok (a VerifyReport)")
            return self.ok and other == self.num_samples
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class _CallableManifest(_Callable, Manifest):
    """A `Manifest` that 0.1.1 code may also call (`ds.manifest()`: its JSON)."""

    _old, _new = "ds.manifest()", "ds.manifest (a Manifest; .to_json() for the JSON)"

    def _answer(self) -> dict[str, Any]:
        return self.to_json()


def _callable_manifest(m: Manifest) -> Manifest:
    """`m`, callable as 0.1.1's `ds.manifest()` (the same fields, store and cached shard
    lists: its `__dict__` is copied, nothing is read again)."""
    out = object.__new__(_CallableManifest)
    out.__dict__.update(m.__dict__)
    return out


class Dataset(ferroload_format.Dataset):
    """`ferroload_format.Dataset`, which also takes ferroload-rs 0.1.1's spellings (each
    with a `FutureWarning` naming the 0.2 one; docs/migrating.md)."""

    @classmethod
    def open(cls, uri: Any, *args: Any, **kwargs: Any) -> Dataset:
        """Open a dataset (see `ferroload_format.Dataset.open`). 0.1.1's
        `Dataset.open(root, cache_dir)` also works: the block cache goes to `cache_dir`."""
        cache_dir = kwargs.pop("cache_dir", None)
        if args:
            if len(args) > 1:
                raise removed("Dataset.open(root, cache_dir, ...)", "Dataset.open(root, cache=...)")
            cache_dir = args[0]
        if cache_dir is not None:
            deprecated(
                "Dataset.open(root, cache_dir)",
                "Dataset.open(root, cache=BlockCache(cache_dir, max_bytes=...))",
            )
            from ferroload_store import BlockCache

            kwargs["cache"] = BlockCache(os.fspath(cache_dir), max_bytes=64 << 30)
        return super().open(uri, **kwargs)  # type: ignore[return-value]

    # -- answers that are calls in 0.1.1 and values in 0.2

    @property
    def modalities(self) -> tuple[FormatModality, ...]:
        """Every modality (base, then layers); `ds.modalities()` is 0.1.1's dict form."""
        return _Modalities(super().modalities)

    @property
    def num_shards(self) -> int:
        """Base tar shards of this version (`ds.num_shards()`: 0.1.1's call)."""
        return _Count(super().num_shards)

    @property
    def manifest(self) -> Manifest:
        """The manifest of the opened version (`ds.manifest()`: 0.1.1's JSON)."""
        return _callable_manifest(super().manifest)

    @property
    def root(self) -> str:
        """0.1.1's `ds.root`: the dataset's local path, or its URI."""
        deprecated("ds.root", "ds.uri")
        local = self.store.local_path()
        return str(local) if local is not None else self.uri

    @property
    def reader(self) -> Dataset:
        """0.1.1's raw core reader: this dataset."""
        deprecated("ds.reader", "ds (0.2 has no separate core reader)")
        return self

    @property
    def indices(self) -> list[int] | None:
        """0.1.1's id map of a subset (None for a whole version)."""
        deprecated(
            "ds.indices",
            "the positions you passed to ds.take(...) / ds.subset(..., return_indices=True)",
        )
        rows = self._rows
        return None if rows is None else [int(r) for r in rows]

    # -- samples

    def get(
        self, i: Any, columns: Sequence[str] | str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """One sample (see `ferroload_format.Dataset.get`), which also answers 0.1.1's
        `["meta"]`, `["<modality>_present"]` and `["basename"]` (with a FutureWarning).
        0.1.1's `get(i, modalities=[...])` projects modalities and keeps every metadata
        column."""
        if "modalities" in kwargs:
            mods = kwargs.pop("modalities")
            deprecated(
                "ds.get(i, modalities=[...])",
                "ds.get(i, columns=[...]) (columns name modalities and metadata)",
            )
            columns = None if mods is None else [*mods, *self.metadata_columns]
        if kwargs:
            raise TypeError(f"get() got unexpected keyword arguments {sorted(kwargs)}")
        flat = super().get(i, columns)
        return Sample(flat, self.metadata_columns, [m.name for m in super().modalities])

    def subset(self, where: str, *args: Any, **kwargs: Any) -> Any:
        """A view of the samples matching `where` (see `ferroload_format.Dataset.subset`);
        0.1.1's positional `subset(where, True)` is `return_indices=True`."""
        if args:
            deprecated("ds.subset(where, True)", "ds.subset(where, return_indices=True)")
            kwargs["return_indices"] = bool(args[0])
        return super().subset(where, **kwargs)

    def verify(self, *args: Any, **kwargs: Any) -> VerifyReport:
        """Check the version (see `ferroload_format.Dataset.verify`); the report also
        compares equal to the sample count when nothing is wrong (0.1.1's answer)."""
        report = super().verify(*args, **kwargs)
        out = _Report(**{f: getattr(report, f) for f in report.__dataclass_fields__})
        out.num_samples = self.num_samples
        return out

    # -- 0.1.1's reads

    def read(self, indices: Any, modality: str = "image", **kwargs: Any) -> Any:
        """Payloads of `modality` (see `ferroload_format.Dataset.read`). 0.1.1's
        `read(i, modality)` with one position gives that sample's bytes (None when
        absent), with a FutureWarning."""
        if isinstance(indices, int | np.integer) and not kwargs:
            deprecated("ds.read(i, modality)", "ds.get(i, [modality])[modality]")
            value: bytes | None = ferroload_format.Dataset.get(self, indices, [modality])[modality]
            return value
        return super().read(indices, modality, **kwargs)

    def read_many(self, indices: Sequence[int], modality: str = "image") -> list[bytes | None]:
        """0.1.1: the stored bytes of `modality` of several samples."""
        deprecated(
            "ds.read_many(indices, modality)",
            "[s[modality] for s in ds.get_many(indices, [modality])]",
        )
        return [s[modality] for s in self.get_many(np.asarray(indices, dtype=np.int64), [modality])]

    def read_batch(
        self, indices: Sequence[int], modality: str = "image"
    ) -> tuple[bytes, list[tuple[int, int]]]:
        """0.1.1: the bytes of `modality` of several samples in one buffer, and each
        sample's (offset, length) in it (length 0 when absent)."""
        deprecated("ds.read_batch(indices, modality)", "ds.get_many(indices, [modality])")
        parts = [
            s[modality] or b""
            for s in self.get_many(np.asarray(indices, dtype=np.int64), [modality])
        ]
        spans, at = [], 0
        for p in parts:
            spans.append((at, len(p)))
            at += len(p)
        return b"".join(parts), spans

    def decode_many(
        self, indices: Sequence[int], modality: str = "image", resize: tuple[int, int] | None = None
    ) -> list[npt.NDArray[np.uint8] | None]:
        """0.1.1: images of several samples decoded to HWC uint8 (resized to `resize`)."""
        deprecated(
            "ds.decode_many(indices, modality, resize)",
            "make_loader(ds, images=[modality], resize=...) or ferroload.codec.decode_image",
        )
        from ferroload_codec import decode_image

        return [
            None if b is None else decode_image(b, size=resize)
            for b in (
                s[modality] for s in self.get_many(np.asarray(indices, dtype=np.int64), [modality])
            )
        ]

    def decode_audio(self, indices: Sequence[int], modality: str = "audio") -> list[Any]:
        """0.1.1: audio of several samples decoded to float32 [channels, samples] arrays."""
        deprecated(
            "ds.decode_audio(indices, modality)",
            "make_loader(ds, audio=[modality]) or ferroload.codec.decode_audio",
        )
        from ferroload_codec import decode_audio

        return [
            None if b is None else decode_audio(b)[0]  # [channels, samples], as 0.1.1
            for b in (
                s[modality] for s in self.get_many(np.asarray(indices, dtype=np.int64), [modality])
            )
        ]

    def decode_video(
        self,
        indices: Sequence[int],
        modality: str = "video",
        num_frames: int = 16,
        resize: tuple[int, int] | None = None,
    ) -> list[Any]:
        """0.1.1: `num_frames` frames of each sample's video, decoded (resized to `resize`)."""
        deprecated(
            "ds.decode_video(indices, modality, num_frames, resize)",
            "make_loader(ds, video=[modality], ...) or ferroload.codec.decode_video",
        )
        from ferroload_codec import decode_video

        return [
            None if b is None else decode_video(b, num_frames=num_frames, size=resize)
            for b in (
                s[modality] for s in self.get_many(np.asarray(indices, dtype=np.int64), [modality])
            )
        ]

    def meta_batch(self, indices: Sequence[int], keys: Sequence[str]) -> dict[str, list[Any]]:
        """0.1.1: metadata `keys` of several samples, as lists."""
        deprecated(
            "ds.meta_batch(indices, keys)", "ds.get_many(indices, keys) or ds.column(key, indices)"
        )
        rows = self.get_many(np.asarray(indices, dtype=np.int64), list(keys))
        return {k: [r[k] for r in rows] for k in keys}

    def read_array(self, i: int, modality: str) -> npt.NDArray[Any] | None:
        """0.1.1: an `.npy` modality of sample `i` as a numpy array."""
        deprecated(
            "ds.read_array(i, modality)", "np.load(io.BytesIO(ds.get(i, [modality])[modality]))"
        )
        data = ferroload_format.Dataset.get(self, i, [modality])[modality]
        return None if data is None else np.load(io.BytesIO(data), allow_pickle=False)

    def read_arrays(self, indices: Sequence[int], modality: str) -> list[npt.NDArray[Any] | None]:
        """0.1.1: an `.npy` modality of several samples as numpy arrays."""
        deprecated(
            "ds.read_arrays(indices, modality)",
            "np.load on each ds.get_many(indices, [modality]) payload",
        )
        rows = self.get_many(np.asarray(indices, dtype=np.int64), [modality])
        return [
            None if r[modality] is None else np.load(io.BytesIO(r[modality]), allow_pickle=False)
            for r in rows
        ]

    # -- framework views

    def _view(self, out: str, old: str, **kwargs: Any) -> Any:
        from ferroload.compat._loader import sample_dataset

        deprecated(
            old,
            "ferroload.loader.FerroTorchDataset(ds, ...) or make_loader(ds, out=...)",
            why="0.1.1's per-sample dicts, numpy by default, resize (224, 224) by default",
        )
        return sample_dataset(self, out=out, **kwargs)

    def torch(self, **kwargs: Any) -> Any:
        """0.1.1: a per-sample torch dataset over this one."""
        return self._view("torch", "ds.torch(...)", **kwargs)

    def numpy(self, **kwargs: Any) -> Any:
        """0.1.1: a per-sample numpy dataset over this one."""
        return self._view("numpy", "ds.numpy(...)", **kwargs)

    def jax(self, **kwargs: Any) -> Any:
        """0.1.1: refused (JAX arrays): use numpy and jax.numpy.asarray."""
        raise removed(
            "ds.jax(...)", "make_loader(ds, out='numpy') and jax.numpy.asarray on each batch"
        )

    def iterable(self, **kwargs: Any) -> Any:
        """0.1.1: an iterable per-sample dataset over this one."""
        from ferroload.compat._loader import FerroIterableDataset

        deprecated(
            "ds.iterable(...)", "ferroload.loader.FerroIterableDataset(ds, ...) (it yields batches)"
        )
        return FerroIterableDataset(self, **kwargs)

    # -- enrichment

    def map(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Add a layer (see `ferroload_format.Dataset.map`). A call in 0.1.1's form
        (`outputs` kinds such as "array"/"scalar"/`Modality("npy")`, `name=`, a
        per-sample `fn` taking its inputs positionally) runs as 0.1.1 ran it, with a
        FutureWarning naming the 0.2 call."""
        if "layer" in kwargs and not args:
            return super().map(fn, **kwargs)
        from ferroload.compat._map import map_011

        deprecated(
            "ds.map(fn, inputs, outputs, name=...) with a per-sample fn",
            "ds.map(batch_fn, inputs=[...], outputs={name: type}, layer=...) (fn takes and returns a batch dict)",
        )
        return map_011(self, fn, *args, **kwargs)


class Writer(ferroload_format.Writer):
    """`ferroload_format.Writer`; 0.1.1's modality kinds `scalar` and `annotation` in
    `declare` are taken as `bytes` (the payload handed out as stored), with a
    FutureWarning."""

    def declare(
        self, modality: str, ext: str, kind: str = "bytes", codec_hint: str = "raw"
    ) -> None:
        """Declare a modality (see `ferroload_format.Writer.declare`)."""
        if kind in ("scalar", "annotation"):
            deprecated(
                f"declare(..., kind={kind!r})",
                'declare(..., kind="bytes") (or "text"; metadata goes in add()\'s meta dict)',
            )
            kind = "bytes"
        super().declare(modality, ext, kind, codec_hint)


class LayerWriter(ferroload_format.LayerWriter):
    """`ferroload_format.LayerWriter`; 0.1.1's `LayerWriter(root, name, modalities,
    partition)` (a per-sample layer writer) is refused with the 0.2 spelling."""

    def __init__(self, ds: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(ds, str | os.PathLike):
            raise removed(
                "LayerWriter(root, name, modalities, partition)",
                "ds.map(fn, inputs=..., outputs=..., layer=...) or "
                "ferroload.LayerWriter(ds, name, identity=..., columns=...) with write_partition/commit",
                "0.2 writes a layer by partitions of rows, not sample by sample",
            )
        super().__init__(ds, *args, **kwargs)
