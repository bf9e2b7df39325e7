"""Audio through `make_loader`: 1 s random crops, resampled to 16 kHz, as one batch tensor.

The script writes a small audio dataset with soundfile: sine tones and noise bursts of 1
to 3 seconds, mono and stereo, recorded at 16 kHz or 44.1 kHz, half of them as WAV and half
as FLAC. A modality has one file extension, so the WAV clips and the FLAC clips go into
two datasets, and `ferroload.mix` reads them as one source. `make_loader` then decodes
each clip in its decode threads: it reads only the frames of a seeded random 1 s window
(WAV and FLAC seek exactly), resamples them to 16 kHz with soxr, mixes stereo down to mono
and writes the result straight into a `(batch, 1, 16000)` float32 array. A clip gets the
same crop on every run with the same seed, whatever the thread count.

Run it (`--help` lists the options):

    uv run python examples/audio_loader.py
    uv run python examples/audio_loader.py --clips 40 --batch-size 16 --seconds 0.5
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile

import numpy as np
import soundfile

import ferroload

RATES = (16_000, 44_100)
KINDS = ("sine", "noise")


def clip(i: int) -> tuple[bytes, bytes, dict[str, object]]:
    """Clip `i`, encoded as WAV and as FLAC, and its metadata: the same on every run."""
    rng = np.random.default_rng(i)
    # clip i goes to the WAV dataset when i is even: every combination of format, rate,
    # kind and channel count appears in 16 clips
    rate = RATES[i // 2 % 2]
    kind = KINDS[i // 4 % 2]
    channels = 1 + i // 8 % 2
    seconds = round(float(rng.uniform(1.0, 3.0)), 2)
    t = np.arange(int(seconds * rate)) / rate
    if kind == "sine":
        freq = float(rng.choice([220.0, 440.0, 880.0]))
        wave = 0.5 * np.sin(2 * np.pi * freq * t)
    else:
        wave = np.clip(0.2 * rng.standard_normal(len(t)), -1, 1)
    frames = np.stack([wave] * channels, axis=1).astype(np.float32)
    encoded = []
    for fmt in ("WAV", "FLAC"):
        buf = io.BytesIO()
        soundfile.write(buf, frames, rate, format=fmt, subtype="PCM_16")
        encoded.append(buf.getvalue())
    meta: dict[str, object] = {
        "label": KINDS.index(kind),
        "source_rate": rate,
        "channels": channels,
        "seconds": seconds,
    }
    return encoded[0], encoded[1], meta


def write_datasets(folder: str, clips: int) -> tuple[str, str]:
    """Half the clips as a WAV dataset, half as a FLAC one; returns their roots."""
    roots = os.path.join(folder, "clips-wav"), os.path.join(folder, "clips-flac")
    for which, (root, ext) in enumerate(zip(roots, ("wav", "flac"), strict=True)):
        with ferroload.Writer(root, f"clips-{ext}") as w:
            w.declare("audio", ext, kind="tensor", codec_hint="audio")
            for i in range(which, clips, 2):
                wav, flac, meta = clip(i)
                w.add(f"clip-{i:04d}", {"audio": wav if ext == "wav" else flac}, meta)
    return roots


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=int, default=16, help="clips to write (default 16)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rate", type=int, default=16_000, help="output sample rate (Hz)")
    parser.add_argument("--seconds", type=float, default=1.0, help="crop length (s)")
    parser.add_argument("--threads", type=int, default=2, help="decode threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ferroload-audio-") as folder:
        wav_root, flac_root = write_datasets(folder, args.clips)
        source = ferroload.mix([wav_root, flac_root], weights=[0.5, 0.5])
        print(source)

        length = round(args.seconds * args.rate)  # frames at the output rate
        options = {
            "batch_size": args.batch_size,
            "audio": {
                "audio": {
                    "sample_rate": args.rate,
                    "length": length,
                    "mono": True,
                    "crop": "random",
                }
            },
            "meta": ["label", "source_rate", "channels", "seconds"],
            "seed": args.seed,
            "threads": args.threads,
        }
        loader = ferroload.make_loader(source, **options)  # torch tensors (out="torch")
        batches = list(loader)
        for k, batch in enumerate(batches):
            audio = batch["audio"]
            print(
                f"batch {k}: audio {tuple(audio.shape)} {audio.dtype}, "
                f"label {batch['label'].tolist()}, source rate {batch['source_rate'].tolist()}"
            )
        first = batches[0]
        print("sample ids:", list(first["sample_id"]))
        print("peak per clip:", [round(float(x), 3) for x in first["audio"].abs().amax(dim=(1, 2))])
        assert first["audio"].shape == (min(args.batch_size, args.clips), 1, length)

        # The same seed gives the same crops, on one thread as on several.
        again = ferroload.make_loader(source, **{**options, "threads": 1})
        assert all(
            bool((a["audio"] == b["audio"]).all()) for a, b in zip(batches, again, strict=True)
        )
        print("same seed, one thread: identical crops")


if __name__ == "__main__":
    main()
