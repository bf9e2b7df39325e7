from __future__ import annotations

import io
import logging
import mmap
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferroload_codec import _audio
from ferroload_codec._audio import AudioDecoder, Crop, DecodedAudioBatch, decode_audio
from ferroload_codec._errors import AudioTooLongError, DecodeError, UnsupportedFormatError
from ferroload_codec._reader import READAHEAD, WHOLE_READ_MIN_BYTES, ByteReader, read_ahead
from ferroload_core import FerroloadError

sf = pytest.importorskip("soundfile")
pytest.importorskip("soxr")

HAS_MP3 = "MP3" in sf.available_formats()
needs_mp3 = pytest.mark.skipif(not HAS_MP3, reason="this libsndfile has no MP3 (needs >= 1.1)")


# --------------------------------------------------------------------------- helpers


def tone(freqs: tuple[float, ...], seconds: float, rate: int, amp: float = 0.5) -> npt.NDArray[Any]:
    """(frames, channels) float32 sines, one frequency per channel."""
    t = np.arange(round(seconds * rate)) / rate
    return np.stack([amp * np.sin(2 * np.pi * f * t) for f in freqs], 1).astype(np.float32)


def pcm16(x: npt.NDArray[Any]) -> npt.NDArray[np.int16]:
    out: npt.NDArray[np.int16] = np.clip(np.rint(x * 32767), -32768, 32767).astype(np.int16)
    return out


def ramp(frames: int, channels: int = 1) -> npt.NDArray[np.int16]:
    """int16 samples whose value tells their frame: frame k of channel c is k - 32768 + c."""
    assert frames + channels <= 65536
    k = np.arange(frames)[:, None] + np.arange(channels)[None, :]
    return (k - 32768).astype(np.int16)


def encode(x: npt.NDArray[Any], rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def peak_hz(signal: npt.NDArray[Any], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.fft.rfftfreq(len(signal), 1 / rate)[np.argmax(spectrum)])


def offset_of(cropped: npt.NDArray[Any]) -> int:
    """The frame a crop of a `ramp` starts at (from its first int16 sample)."""
    return int(cropped[0, 0]) + 32768


LOSSLESS = [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("AIFF", "PCM_16")]
LOSSY = [("OGG", "VORBIS"), pytest.param("MP3", "MPEG_LAYER_III", marks=needs_mp3)]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(("fmt", "subtype"), LOSSLESS)
def test_lossless_pcm16_round_trip_is_exact(fmt: str, subtype: str) -> None:
    src = pcm16(tone((440, 660), 0.5, 22050))
    data = encode(src, 22050, fmt, subtype)
    audio, rate = decode_audio(data)
    assert rate == 22050
    assert audio.shape == (2, len(src)) and audio.dtype == np.float32
    np.testing.assert_array_equal(audio, src.T.astype(np.float32) / 32768)
    as_int, _ = decode_audio(data, dtype="int16")
    assert as_int.dtype == np.int16
    np.testing.assert_array_equal(as_int, src.T)


def test_float_wav_round_trip_is_exact() -> None:
    src = tone((300, 500, 700), 0.3, 16000, amp=0.9)
    audio, rate = decode_audio(encode(src, 16000, "WAV", "FLOAT"))
    assert rate == 16000 and audio.shape == (3, len(src))
    np.testing.assert_array_equal(audio, src.T)


@pytest.mark.parametrize(("fmt", "subtype"), LOSSY)
def test_lossy_round_trip_keeps_frequency_and_level(fmt: str, subtype: str) -> None:
    src = tone((440, 1000), 1.0, 44100)
    audio, rate = decode_audio(encode(src, 44100, fmt, subtype))
    assert rate == 44100 and audio.dtype == np.float32
    assert audio.shape == (2, len(src))  # Vorbis granules and the MP3 Xing tag are exact
    for channel, freq in enumerate((440, 1000)):
        assert abs(peak_hz(audio[channel], rate) - freq) < 2
        rms = np.sqrt(np.mean(audio[channel, 4410:-4410] ** 2))
        assert 0.9 < rms / (0.5 / np.sqrt(2)) < 1.1
    assert np.abs(audio).max() < 1.0


def test_int16_output_is_the_rounded_float_output() -> None:
    data = encode(tone((440, 880), 0.5, 44100), 44100, "OGG", "VORBIS")
    f32, _ = decode_audio(data)
    i16, _ = decode_audio(data, dtype="int16")
    assert i16.dtype == np.int16 and i16.shape == f32.shape
    np.testing.assert_array_equal(i16, np.clip(np.rint(f32 * 32768), -32768, 32767))


def test_int16_output_clips_float_sources() -> None:
    src = np.array([[-2.0], [-1.0], [0.5], [1.0], [3.0]], dtype=np.float32)
    audio, _ = decode_audio(encode(src, 8000, "WAV", "FLOAT"), dtype="int16")
    assert audio.tolist() == [[-32768, -32768, 16384, 32767, 32767]]


def test_bytes_like_inputs_decode_alike() -> None:
    data = encode(pcm16(tone((440,), 0.1, 8000)), 8000, "WAV")
    want, _ = decode_audio(data)
    for form in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        got, _ = decode_audio(form)
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- channels


@pytest.mark.parametrize(("fmt", "subtype"), [("FLAC", "PCM_16"), ("OGG", "VORBIS")])
def test_mono_is_the_mean_of_the_channels(fmt: str, subtype: str) -> None:
    data = encode(tone((440, 550, 660), 0.5, 16000), 16000, fmt, subtype)
    full, _ = decode_audio(data)
    mono, _ = decode_audio(data, mono=True)
    assert mono.shape == (1, full.shape[1])
    np.testing.assert_allclose(mono[0], full.mean(axis=0), atol=1e-6)


def test_channels_repeats_mono_and_rejects_other_counts() -> None:
    mono_src = pcm16(tone((440,), 0.2, 8000))
    stereo = encode(pcm16(tone((440, 880), 0.2, 8000)), 8000, "WAV")
    audio, _ = decode_audio(encode(mono_src, 8000, "WAV"), channels=2)
    assert audio.shape == (2, len(mono_src))
    np.testing.assert_array_equal(audio[0], audio[1])
    with pytest.raises(DecodeError, match="2 channels, the decoder wants 3"):
        decode_audio(stereo, channels=3, sample_id="s1")
    with pytest.raises(DecodeError, match="2 channels, the decoder wants 1"):
        decode_audio(stereo, channels=1)
    mixed, _ = decode_audio(stereo, mono=True, channels=2)
    plain, _ = decode_audio(stereo)
    np.testing.assert_allclose(mixed, np.repeat(plain.mean(0, keepdims=True), 2, 0), atol=1e-6)


# --------------------------------------------------------------------------- crops and padding


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_crops_are_exact_slices_of_the_full_decode(fmt: str) -> None:
    n, length = 20000, 3000
    data = encode(ramp(n, 2), 16000, fmt, "PCM_16")
    full, _ = decode_audio(data, dtype="int16")
    start, _ = decode_audio(data, dtype="int16", length=length, crop="start")
    center, _ = decode_audio(data, dtype="int16", length=length, crop="center")
    np.testing.assert_array_equal(start, full[:, :length])
    np.testing.assert_array_equal(center, full[:, (n - length) // 2 :][:, :length])
    offsets = set()
    for seed in range(40):
        crop, _ = decode_audio(data, dtype="int16", length=length, crop="random", seed=seed)
        offset = offset_of(crop)
        assert 0 <= offset <= n - length
        assert offset == np.random.default_rng(seed).integers(0, n - length + 1)
        np.testing.assert_array_equal(crop, full[:, offset : offset + length])
        offsets.add(offset)
    assert len(offsets) == 40  # different seeds, different offsets
    assert min(offsets) < (n - length) / 4 and max(offsets) > 3 * (n - length) / 4


def test_random_crop_is_deterministic_per_seed() -> None:
    data = encode(ramp(30000), 16000, "FLAC")
    a, _ = decode_audio(data, dtype="int16", length=1000, seed=7)
    b, _ = decode_audio(data, dtype="int16", length=1000, seed=7)
    c, _ = decode_audio(data, dtype="int16", length=1000, seed=8)
    np.testing.assert_array_equal(a, b)
    assert offset_of(a) != offset_of(c)


def test_crop_can_reach_the_last_frame() -> None:
    n = 1000
    data = encode(ramp(n), 8000, "WAV")
    offsets = {
        offset_of(decode_audio(data, dtype="int16", length=n - 2, seed=s)[0]) for s in range(64)
    }
    assert offsets == {0, 1, 2}


@pytest.mark.parametrize(("fmt", "subtype"), LOSSY)
def test_lossy_crops_equal_slices_of_the_full_decode(fmt: str, subtype: str) -> None:
    # libsndfile's Vorbis and MP3 seeks land off target, so these are decoded forward.
    data = encode(tone((440, 700), 2.0, 22050), 22050, fmt, subtype)
    full, _ = decode_audio(data)
    for seed in (0, 1, 2):
        crop, _ = decode_audio(data, length=5000, seed=seed)
        offset = int(np.random.default_rng(seed).integers(0, full.shape[1] - 5000 + 1))
        np.testing.assert_array_equal(crop, full[:, offset : offset + 5000])


def test_unseekable_encodings_are_cropped_by_decoding_forward() -> None:
    # libsndfile cannot seek in GSM 6.10 WAVs at all
    data = encode(tone((440,), 1.0, 8000), 8000, "WAV", "GSM610")
    full, _ = decode_audio(data)
    for seed in (0, 1):
        crop, _ = decode_audio(data, length=2000, seed=seed)
        offset = int(np.random.default_rng(seed).integers(0, full.shape[1] - 2000 + 1))
        np.testing.assert_array_equal(crop, full[:, offset : offset + 2000])


@pytest.mark.parametrize("crop", ["start", "center", "random"])
def test_short_clips_are_padded_with_zeros(crop: Crop) -> None:
    src = ramp(500, 2)
    audio, rate = decode_audio(
        encode(src, 8000, "FLAC"), dtype="int16", length=800, crop=crop, seed=3
    )
    assert rate == 8000 and audio.shape == (2, 800)
    np.testing.assert_array_equal(audio[:, :500], src.T)
    assert not audio[:, 500:].any()


def test_exact_length_is_not_cropped() -> None:
    src = ramp(640)
    audio, _ = decode_audio(encode(src, 8000, "WAV"), dtype="int16", length=640, seed=1)
    np.testing.assert_array_equal(audio[0], src[:, 0])


# --------------------------------------------------------------------------- resampling


@pytest.mark.parametrize(("rate_in", "rate_out"), [(48000, 16000), (22050, 16000), (8000, 22050)])
def test_resampling_keeps_duration_and_frequency(rate_in: int, rate_out: int) -> None:
    src = tone((1000, 3000), 1.37, rate_in)
    audio, rate = decode_audio(encode(src, rate_in, "FLAC", "PCM_24"), sample_rate=rate_out)
    assert rate == rate_out
    # round half up, as soxr does: floor(n * out / in + 1/2)
    assert audio.shape == (2, (2 * len(src) * rate_out + rate_in) // (2 * rate_in))
    assert abs(peak_hz(audio[0], rate_out) - 1000) < 2
    assert abs(peak_hz(audio[1], rate_out) - 3000) < 2
    middle = audio[:, rate_out // 10 : -rate_out // 10]
    assert np.allclose(np.sqrt(np.mean(middle**2, axis=1)), 0.5 / np.sqrt(2), rtol=0.02)


@pytest.mark.parametrize(("rate_in", "rate_out"), [(48000, 16000), (22050, 16000), (16000, 44100)])
@pytest.mark.parametrize("crop", ["center", "random"])
def test_resampled_crop_is_a_slice_of_the_resampled_whole(
    rate_in: int, rate_out: int, crop: Crop
) -> None:
    rng = np.random.default_rng(0)
    src = (rng.standard_normal((3 * rate_in, 2)) * 0.1).astype(np.float32)
    data = encode(src, rate_in, "WAV", "FLOAT")
    whole, _ = decode_audio(data, sample_rate=rate_out)
    length = rate_out // 2
    for seed in (0, 1):
        crop_, rate = decode_audio(data, sample_rate=rate_out, length=length, crop=crop, seed=seed)
        span = whole.shape[1] - length
        offset = (
            span // 2
            if crop == "center"
            else int(np.random.default_rng(seed).integers(0, span + 1))
        )
        assert rate == rate_out and crop_.shape == (2, length)
        np.testing.assert_allclose(crop_, whole[:, offset : offset + length], atol=1e-5)


def test_same_rate_does_not_resample() -> None:
    src = ramp(4000)
    data = encode(src, 16000, "WAV")
    audio, rate = decode_audio(data, sample_rate=16000, dtype="int16")
    assert rate == 16000
    np.testing.assert_array_equal(audio[0], src[:, 0])


def test_resampled_short_clip_is_padded_and_int16() -> None:
    data = encode(tone((440,), 0.1, 48000), 48000, "WAV", "PCM_16")
    audio, rate = decode_audio(data, sample_rate=16000, length=4000, dtype="int16")
    assert rate == 16000 and audio.shape == (1, 4000) and audio.dtype == np.int16
    assert np.abs(audio[0, :1500]).max() > 10000
    assert not audio[0, 1601:].any()


# --------------------------------------------------------------------------- partial reads


class CountingReader(ByteReader):
    """The decoder's reader, counting the bytes libsndfile pulls through it."""

    total = 0

    def readinto(self, out: Any) -> int:
        n = super().readinto(out)
        CountingReader.total += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        CountingReader.total += len(data)
        return data


def bytes_read(monkeypatch: pytest.MonkeyPatch, data: Any, **options: Any) -> int:
    monkeypatch.setattr(_audio, "ByteReader", CountingReader)
    CountingReader.total = 0
    decode_audio(data, **options)
    return CountingReader.total


@pytest.mark.parametrize(
    ("fmt", "rate", "seconds", "limit"),
    # (libsndfile 1.2.2 crashes writing much longer Ogg/Vorbis files; opening one reads about
    # 70 kB from its end to find the length, hence the looser limit there)
    [("WAV", 8000, 600, 0.002), ("FLAC", 8000, 120, 0.05), ("OGG", 8000, 120, 0.3)],
)
def test_a_crop_reads_only_part_of_a_long_file(
    monkeypatch: pytest.MonkeyPatch, fmt: str, rate: int, seconds: int, limit: float
) -> None:
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal((rate * seconds, 1)) * 0.1).astype(np.float32)
    data = encode(noise, rate, fmt)
    whole = bytes_read(monkeypatch, data)
    assert whole >= 0.95 * len(data)  # the counter sees a full decode
    # WAV and FLAC seek anywhere; Ogg/Vorbis decodes forward, so only the start is cheap there.
    crop = "start" if fmt == "OGG" else "random"
    part = bytes_read(monkeypatch, data, length=rate, crop=crop, seed=5)
    assert part < limit * len(data)
    if fmt != "OGG":
        resampled = bytes_read(monkeypatch, data, length=16000, sample_rate=16000, seed=9)
        assert resampled < limit * len(data)
    # a memoryview (what the loader hands over: a view of a mapped shard) is not copied
    # whole either: the crop reads as little through a view as from bytes
    assert bytes_read(monkeypatch, memoryview(data), length=rate, crop=crop, seed=5) == part


def test_byte_reader_seeks_and_reads_like_bytesio() -> None:
    data = bytes(range(256)) * 4
    ours, ref = ByteReader(memoryview(data)), io.BytesIO(data)
    assert ours.seekable()
    steps: list[tuple[str, int, int]] = [
        ("read", 10, 0), ("seek", 5, 1), ("into", 7, 0), ("seek", -3, 2), ("read", 10, 0),
        ("seek", 5000, 0), ("read", 4, 0), ("into", 4, 0), ("seek", -9000, 1), ("read", -1, 0),
        ("seek", -2000, 2), ("into", 2000, 0), ("seek", 100, 0), ("read", 0, 0),
    ]  # fmt: skip
    for op, arg, whence in steps:
        if op == "seek":
            assert ours.seek(arg, whence) == ref.seek(arg, whence)
        elif op == "read":
            assert ours.read(arg) == ref.read(arg)
        else:
            a, b = bytearray(arg), bytearray(arg)
            assert ours.readinto(a) == ref.readinto(b)
            assert a == b
        assert ours.tell() == ref.tell()
    for bad, message in (((-1, 0), "negative seek value -1"), ((0, 3), "invalid whence")):
        with pytest.raises(ValueError, match=message):
            ours.seek(*bad)
        with pytest.raises(ValueError, match=message):
            ref.seek(*bad)


class SpyMap(mmap.mmap):
    """A file mapping that records the advice it gets."""

    advice: list[tuple[int, int, int]]

    def madvise(self, option: int, start: int = 0, length: int = 0) -> None:
        self.advice.append((option, start, length))
        super().madvise(option, start, length)


def test_a_reader_over_a_mapped_file_asks_the_kernel_to_read_ahead(tmp_path: Path) -> None:
    """Over a view of a mapped shard, each read first advises the kernel to read ahead
    (once per window): the store maps shards for random access, so a cold page cache
    would otherwise make each 4 KiB page a disk read of its own."""
    data = np.random.default_rng(0).integers(0, 256, 3 * READAHEAD, dtype=np.uint8).tobytes()
    path = tmp_path / "shard.tar"
    path.write_bytes(b"\0" * 5000 + data)
    with open(path, "rb") as f:
        mapped = SpyMap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.advice = []
    reader = ByteReader(memoryview(mapped)[5000:])  # a payload 5,000 bytes into the shard
    out = bytearray(32 << 10)
    got = bytearray()
    while n := reader.readinto(out):
        got += out[:n]
    assert got == data  # the same bytes
    page = mmap.PAGESIZE
    # one advice per window, each from the page holding the read's first byte
    assert [a[0] for a in mapped.advice] == [mmap.MADV_WILLNEED] * 3
    for k, (_, start, length) in enumerate(mapped.advice):
        assert start == (5000 + k * READAHEAD) // page * page
        assert start + length == 5000 + (k + 1) * READAHEAD
    reader.seek(10)
    assert reader.read(20) == data[10:30]
    assert mapped.advice[-1][1:] == (5000 // page * page, 5010 + READAHEAD - 5000 // page * page)
    # bytes and views of other objects are read as before, without advice
    assert ByteReader(data).read(7) == data[:7]
    assert ByteReader(memoryview(bytearray(data))[3:]).read(5) == data[3:8]


def test_read_ahead_advises_large_mapped_payloads_whole(tmp_path: Path) -> None:
    """What a loader asks of the payloads its decoders read whole (images, video)."""
    path = tmp_path / "shard.tar"
    path.write_bytes(bytes(4 * WHOLE_READ_MIN_BYTES))
    with open(path, "rb") as f:
        mapped = SpyMap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.advice = []
    view = memoryview(mapped)
    big = view[5000 : 5000 + WHOLE_READ_MIN_BYTES]
    small = view[100 : 100 + WHOLE_READ_MIN_BYTES - 1]
    other = memoryview(bytearray(2 * WHOLE_READ_MIN_BYTES))
    read_ahead([None, small, b"x" * WHOLE_READ_MIN_BYTES, other, big])
    page = mmap.PAGESIZE
    start = 5000 // page * page
    assert mapped.advice == [(mmap.MADV_WILLNEED, start, 5000 + WHOLE_READ_MIN_BYTES - start)]
    mapped.advice.clear()  # told the largest size (a loader knows it from the index)
    read_ahead([small, big], largest=WHOLE_READ_MIN_BYTES - 1)
    assert mapped.advice == []
    read_ahead([small, big], largest=WHOLE_READ_MIN_BYTES)
    assert len(mapped.advice) == 1


def _major_faults_reading(path: Path, advice: bool) -> int:
    """Major page faults of reading a cold file through a ByteReader over its mapping
    (advised random access, as the store maps shards)."""
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.madvise(mmap.MADV_RANDOM)
    reader = ByteReader(memoryview(mapped))
    if not advice:
        reader._map = None  # the reader as it was: no read-ahead
    before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    out = bytearray(32 << 10)
    while reader.readinto(out):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before


def test_read_ahead_turns_page_by_page_disk_reads_into_few(tmp_path: Path) -> None:
    path = tmp_path / "cold.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4 << 20, dtype=np.uint8))
    os.sync()  # written back: the pages can leave the page cache
    without = _major_faults_reading(path, advice=False)
    with_advice = _major_faults_reading(path, advice=True)
    # where the page cache could be dropped (a disk-backed folder), 1,024 pages were
    # 1,024 disk reads; with read-ahead, a few per 256 KiB window at most
    if without >= 512:
        assert with_advice <= without // 8, (without, with_advice)
    else:  # a memory-backed folder (tmpfs): no page is ever read from disk
        assert with_advice <= without


# --------------------------------------------------------------------------- batches


def clips() -> list[bytes]:
    return [encode(ramp(3000 + 500 * i, 2), 16000, "FLAC" if i % 2 else "WAV") for i in range(6)]


def test_batch_shape_dtype_and_rate() -> None:
    dec = AudioDecoder(mono=True, length=2000, dtype="int16")
    batch = dec.decode_batch(clips(), seeds=range(6))
    assert isinstance(batch, DecodedAudioBatch)
    assert batch.audio.shape == (6, 1, 2000) and batch.audio.dtype == np.int16
    assert batch.sample_rate == 16000
    assert batch.ok.all() and batch.errors == ()


def test_batch_items_equal_single_decodes() -> None:
    dec = AudioDecoder(channels=2, length=3200, sample_rate=8000)
    batch = dec.decode_batch(clips(), seeds=[10, 11, 12, 13, 14, 15])
    for i, data in enumerate(clips()):
        one, rate = dec.decode(data, seed=10 + i)
        assert rate == 8000
        np.testing.assert_array_equal(batch.audio[i], one)


def test_batch_is_deterministic_and_independent_of_threads() -> None:
    items = clips() * 3
    seeds = list(range(100, 118))
    runs = [
        AudioDecoder(mono=True, length=2500, threads=t).decode_batch(items, seeds=seeds).audio
        for t in (1, 2, 2)
    ]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    other = AudioDecoder(mono=True, length=2500).decode_batch(items, seeds=[s + 1 for s in seeds])
    assert not np.array_equal(runs[0], other.audio)


def test_batch_writes_into_out() -> None:
    out = np.full((6, 2, 1000), 99, dtype=np.float32)
    batch = AudioDecoder(channels=2, length=1000, crop="start").decode_batch(clips(), out=out)
    assert batch.audio is out
    np.testing.assert_array_equal(out[0], ramp(1000, 2).T / 32768)


def test_batch_errors_skip_warn_raise(caplog: pytest.LogCaptureFixture) -> None:
    good = clips()
    items = [good[0], b"not audio at all, just text", good[1], good[2][:30], good[3]]
    ids = ["a", "b", "c", "d", "e"]
    dec = AudioDecoder(mono=True, length=1000, threads=2)
    skipped = dec.decode_batch(items, seeds=range(5), sample_ids=ids, on_error="skip")
    assert skipped.ok.tolist() == [True, False, True, False, True]
    assert [e.sample_id for e in skipped.errors] == ["b", "d"]
    assert isinstance(skipped.errors[0], UnsupportedFormatError)
    assert not skipped.audio[1].any() and not skipped.audio[3].any()
    assert skipped.audio[0].any()
    with caplog.at_level(logging.WARNING, logger="ferroload_codec._audio"):
        warned = dec.decode_batch(items, seeds=range(5), sample_ids=ids, on_error="warn")
    np.testing.assert_array_equal(warned.audio, skipped.audio)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "'b'" in messages[0] and "'d'" in messages[1]
    with pytest.raises(DecodeError, match="sample 'b'"):
        dec.decode_batch(items, sample_ids=ids)


def test_batch_rejects_mixed_rates_unless_resampling() -> None:
    items = [encode(ramp(2000), rate, "WAV") for rate in (16000, 8000, 16000)]
    native = AudioDecoder(mono=True, length=1000).decode_batch(items, on_error="skip")
    assert native.sample_rate == 16000 and native.ok.tolist() == [True, False, True]
    assert "8000 Hz differs" in str(native.errors[0])
    resampled = AudioDecoder(mono=True, length=1000, sample_rate=16000).decode_batch(items)
    assert resampled.sample_rate == 16000 and resampled.ok.all()


def test_batch_wrong_types_are_item_errors() -> None:
    items: list[Any] = [clips()[0], "a string", None]
    batch = AudioDecoder(mono=True, length=100).decode_batch(
        items, sample_ids=["x", "y", "z"], on_error="skip"
    )
    assert batch.ok.tolist() == [True, False, False]
    assert all(isinstance(e, DecodeError) for e in batch.errors)


def test_batch_needs_a_fixed_shape() -> None:
    with pytest.raises(ValueError, match="length"):
        AudioDecoder(mono=True).decode_batch(clips())
    with pytest.raises(ValueError, match="mono=True or channels"):
        AudioDecoder(length=100).decode_batch(clips())
    dec = AudioDecoder(mono=True, length=100)
    with pytest.raises(ValueError, match="out must be float32"):
        dec.decode_batch(clips(), out=np.zeros((6, 1, 100), np.int16))
    with pytest.raises(ValueError, match="3 seeds for 6 items"):
        dec.decode_batch(clips(), seeds=[1, 2, 3])
    with pytest.raises(ValueError, match="on_error"):
        dec.decode_batch(clips(), on_error="ignore")  # type: ignore[arg-type]
    assert dec.decode_batch([]).audio.shape == (0, 1, 100)


# --------------------------------------------------------------------------- errors


def test_errors_are_ferroload_and_value_errors() -> None:
    with pytest.raises(DecodeError, match="empty input") as info:
        decode_audio(b"", sample_id="s0")
    assert isinstance(info.value, FerroloadError) and isinstance(info.value, ValueError)
    assert info.value.sample_id == "s0"


@pytest.mark.parametrize("value", ["a string", 42, None, [1, 2], np.zeros(4, np.float32)])
def test_non_bytes_input_is_a_decode_error(value: Any) -> None:
    with pytest.raises(DecodeError, match="expected encoded bytes"):
        decode_audio(value)


def test_unknown_bytes_are_unsupported() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(100)
    for data in (b"plain text, not audio" * 10, png):
        with pytest.raises(UnsupportedFormatError, match="not an audio format"):
            decode_audio(data, sample_id="u")


def test_damaged_headers_of_known_formats_are_decode_errors() -> None:
    for data, fmt in [
        (b"RIFF\x00\x00\x00\x00WAVE" + bytes(64), "wav"),
        (b"fLaC" + bytes(64), "flac"),
        (b"OggS" + bytes(64), "ogg"),
    ]:
        with pytest.raises(DecodeError) as info:
            decode_audio(data)
        assert not isinstance(info.value, UnsupportedFormatError)
        assert info.value.format == fmt


@pytest.mark.parametrize(
    ("fmt", "subtype", "name"),
    [
        ("WAV", "PCM_16", "wav"),
        ("WAV", "FLOAT", "wav"),
        ("FLAC", "PCM_16", "flac"),
        ("OGG", "VORBIS", "ogg"),
        pytest.param("MP3", "MPEG_LAYER_III", "mp3", marks=needs_mp3),
    ],
)
@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_files_are_decode_errors(fmt: str, subtype: str, name: str, keep: float) -> None:
    data = encode(tone((440, 880), 1.0, 16000), 16000, fmt, subtype)
    cut = data[: int(len(data) * keep)]
    with pytest.raises(DecodeError) as info:
        decode_audio(cut, sample_id="t")
    assert info.value.format == name and info.value.sample_id == "t"
    assert (
        "truncated" in str(info.value)
        or "damaged" in str(info.value)
        or "no audio" in str(info.value)
    )


def test_truncated_wav_fails_even_for_a_crop_of_its_start() -> None:
    data = encode(ramp(8000), 8000, "WAV")
    with pytest.raises(DecodeError, match="truncated WAV"):
        decode_audio(data[:-1000], length=100, crop="start")


def test_streamed_wav_with_unknown_size_decodes() -> None:
    # Streaming writers leave the RIFF and data sizes at 0xFFFFFFFF: not a truncation.
    src = ramp(1000)
    data = bytearray(encode(src, 8000, "WAV"))
    at = data.find(b"data")
    data[4:8] = data[at + 4 : at + 8] = b"\xff\xff\xff\xff"
    audio, _ = decode_audio(bytes(data), dtype="int16")
    np.testing.assert_array_equal(audio[0], src[:, 0])


def test_audio_without_frames_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="no audio frames"):
        decode_audio(encode(np.zeros((0, 1), np.float32), 8000, "WAV"), length=100)


def test_resampling_a_low_rate_up_is_bounded_by_max_samples() -> None:
    """Issue 31: a 2 MB WAV at 63 Hz decoded with sample_rate=16000 and no length gave
    a 968 MiB array (the 256x rate cap was the only bound). The output's samples are
    judged from the header before anything is read or resampled."""
    data = encode(np.zeros((1_000_000, 1), np.int16), 63, "WAV")
    assert len(data) < 2_100_000
    with pytest.raises(AudioTooLongError, match=r"63 Hz to 16000 Hz .* max_samples=") as info:
        decode_audio(data, sample_rate=16000, sample_id="bomb")
    assert isinstance(info.value, DecodeError) and info.value.sample_id == "bomb"
    assert _audio.DEFAULT_MAX_SAMPLES < 1_000_000 * 16000 // 63
    # a crop of it is fine, and so is a limit raised for genuine long audio
    audio, rate = decode_audio(data, sample_rate=16000, length=16000, crop="start")
    assert audio.shape == (1, 16000) and rate == 16000
    small = encode(np.zeros((630, 1), np.int16), 63, "WAV")  # 10 s: 160,000 frames out
    assert decode_audio(small, sample_rate=16000, max_samples=160_000)[0].shape == (1, 160_000)
    with pytest.raises(AudioTooLongError):
        decode_audio(small, sample_rate=16000, max_samples=159_999)


@pytest.mark.parametrize(("fmt", "subtype"), [("WAV", "PCM_16"), ("FLAC", "PCM_16")])
def test_max_samples_bounds_what_a_file_decodes_to(fmt: str, subtype: str) -> None:
    """A compressed file decodes to far more than its bytes (FLAC of silence: 4 KB for
    the 2 x 100,000 samples here): `max_samples` counts the decoded frames x channels,
    the resampled ones and the output's, before reading."""
    data = encode(np.zeros((100_000, 2), np.int16), 8000, fmt, subtype)
    assert decode_audio(data, max_samples=200_000)[0].shape == (2, 100_000)
    with pytest.raises(AudioTooLongError, match="100,000 frames of 2 channels"):
        decode_audio(data, max_samples=199_999)
    # mixed down to mono the output is half, but the read is not
    with pytest.raises(AudioTooLongError):
        decode_audio(data, mono=True, max_samples=199_999)
    # resampled down, the read still counts; a crop reads only its part
    with pytest.raises(AudioTooLongError):
        decode_audio(data, sample_rate=4000, max_samples=199_999)
    assert decode_audio(data, length=1000, max_samples=2000)[0].shape == (2, 1000)
    dec = AudioDecoder(mono=True, length=1000, max_samples=2000)
    assert dec.decode_batch([data] * 2, seeds=[0, 1]).audio.shape == (2, 1, 1000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dtype": "float64"}, "dtype"),
        ({"dtype": "nonsense"}, "dtype"),
        ({"crop": "end"}, "crop"),
        ({"length": -1}, "length"),
        ({"length": 0}, "length"),
        ({"length": 2.5}, "length"),
        ({"sample_rate": 0}, "sample_rate"),
        ({"sample_rate": -16000}, "sample_rate"),
        ({"sample_rate": True}, "sample_rate"),
        ({"channels": 0}, "channels"),
        ({"threads": 0}, "threads"),
        ({"max_samples": 0}, "max_samples"),
        ({"max_samples": True}, "max_samples"),
        ({"max_samples": 1.5}, "max_samples"),
    ],
)
def test_bad_options_are_value_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AudioDecoder(**options)


def test_numpy_dtypes_and_ints_are_accepted() -> None:
    dec = AudioDecoder(dtype=np.int16, length=np.int64(100), sample_rate=np.int32(8000))  # type: ignore[arg-type]
    assert dec.dtype == "int16"
    audio, rate = dec.decode(encode(ramp(300), 8000, "WAV"), seed=0)
    assert audio.dtype == np.int16 and audio.shape == (1, 100) and rate == 8000
    assert "AudioDecoder(" in repr(dec)


# --------------------------------------------------------------------------- imports


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_import_does_not_load_soundfile_or_soxr() -> None:
    proc = run_python(
        "import sys, ferroload_codec._audio\n"
        "print(sorted(m for m in ('soundfile', 'soxr') if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_missing_soundfile_is_codec_unavailable() -> None:
    proc = run_python(
        "import sys; sys.modules['soundfile'] = None\n"
        "from ferroload_codec._audio import decode_audio\n"
        "from ferroload_codec._errors import CodecUnavailableError\n"
        "try:\n"
        "    decode_audio(b'RIFF')\n"
        "except CodecUnavailableError as exc:\n"
        "    print('ok', isinstance(exc, ImportError), 'pip install soundfile' in str(exc))\n"
    )
    assert proc.stdout.strip() == "ok True True", proc.stdout + proc.stderr


# --------------------------------------------------------------------------- robustness


def _seeds() -> list[bytes]:
    src = tone((440, 660), 0.05, 8000)
    files = [
        encode(src, 8000, "WAV", "PCM_16"),
        encode(src, 8000, "WAV", "FLOAT"),
        encode(src, 8000, "FLAC", "PCM_16"),
        encode(src, 8000, "OGG", "VORBIS"),
    ]
    return [*files, encode(src, 8000, "MP3")] if HAS_MP3 else files


SEED_FILES = _seeds()
DECODERS = [
    AudioDecoder(threads=1),
    AudioDecoder(mono=True, length=300, sample_rate=16000, dtype="int16", threads=1),
    AudioDecoder(channels=2, length=200, crop="center", threads=1),
]


def _check_outcome(dec: AudioDecoder, data: bytes) -> None:
    try:
        audio, rate = dec.decode(data, seed=1, sample_id="fuzz")
    except DecodeError as exc:
        error: DecodeError | None = exc
    else:
        error = None
    if error is not None:
        assert error.sample_id == "fuzz"
        return
    assert rate > 0 and audio.ndim == 2 and audio.dtype == np.dtype(dec.dtype)
    if dec.length is not None:
        assert audio.shape[1] == dec.length


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=0, max_size=2048), which=st.sampled_from(range(len(DECODERS))))
def test_random_bytes_only_raise_decode_errors(data: bytes, which: int) -> None:
    _check_outcome(DECODERS[which], data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(range(len(SEED_FILES))),
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    which=st.sampled_from(range(len(DECODERS))),
    front=st.booleans(),
)
def test_mutated_files_only_raise_decode_errors(
    base: int, edits: list[tuple[float, int]], cut: float | None, which: int, front: bool
) -> None:
    data = bytearray(SEED_FILES[base])
    for where, value in edits:
        # half the time aim at the headers, where the damage is most interesting
        span = min(len(data), 128) if front else len(data)
        data[int(where * span)] = value
    if cut is not None:
        data = data[: int(cut * len(data))]
    _check_outcome(DECODERS[which], bytes(data))
