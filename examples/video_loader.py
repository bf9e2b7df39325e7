"""Video through `make_loader`: 8 frames per clip, sampled uniformly and resized, as one batch.

The script writes a few tiny H.264 clips with PyAV (64x48 pixels, 2 s at 10 fps: 20
frames each; a coloured square moves across a background whose brightness encodes the
frame number), stores them in a dataset, and loads them with `make_loader`. For each clip
the loader locates the frames it wants by demuxing packets, seeks to the keyframe before
each one and decodes forward, resizes the frames and writes them into a
`(batch, frames, height, width, 3)` uint8 array. The background's brightness tells which
frames it picked: with `--sampling uniform` the centres of 8 equal segments of the clip,
with `--sampling random` 8 consecutive frames (`stride` 1) from a seeded start.

Needs PyAV (`ferroload-codec[video]`; the workspace has it). Run it (`--help` lists the
options):

    uv run python examples/video_loader.py
    uv run python examples/video_loader.py --sampling random --frames 4 --size 24
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile

import av
import numpy as np

import ferroload

WIDTH, HEIGHT, FPS, SECONDS = 64, 48, 10, 2
STEP = 12  # background brightness per frame: frame k is 12 * k (+ 8) grey


def encode_clip(i: int) -> bytes:
    """Clip `i` as H.264 in MP4: the same pixels on every run."""
    rng = np.random.default_rng(i)
    colour = rng.integers(100, 256, size=3).astype(np.uint8)
    speed = int(rng.integers(1, 4))
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"g": "5", "bf": "2"}  # a keyframe every 5 frames, B-frames
        for k in range(FPS * SECONDS):
            frame = np.full((HEIGHT, WIDTH, 3), 8 + STEP * k, np.uint8)
            x = (speed * 3 * k) % (WIDTH - 12)
            frame[18:30, x : x + 12] = colour  # a 12x12 square moving right
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():  # flush
            container.mux(packet)
    return buf.getvalue()


def frame_numbers(frames: np.ndarray) -> list[int]:
    """Which frames a clip's `(T, H, W, 3)` array holds, read from the background."""
    background = frames[:, :8, :8].reshape(len(frames), -1).mean(axis=1)  # a corner
    return [round((float(v) - 8) / STEP) for v in background]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=int, default=6, help="clips to write (default 6)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--frames", type=int, default=8, help="frames per clip")
    parser.add_argument("--sampling", choices=["uniform", "random"], default="uniform")
    parser.add_argument("--size", type=int, default=32, help="output frames are size x size")
    parser.add_argument("--threads", type=int, default=2, help="videos decoded in parallel")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ferroload-video-") as folder:
        root = os.path.join(folder, "clips")
        with ferroload.Writer(root, "clips") as w:
            w.declare("video", "mp4", kind="tensor", codec_hint="video")
            for i in range(args.clips):
                w.add(f"clip-{i:03d}", {"video": encode_clip(i)}, {"label": i % 3})

        loader = ferroload.make_loader(
            root,
            batch_size=args.batch_size,
            video={
                "video": {
                    "num_frames": args.frames,
                    "sampling": args.sampling,
                    "size": args.size,
                    "resize": "shorter",  # scale the shorter side, crop the centre
                }
            },
            meta=["label"],
            seed=args.seed,
            threads=args.threads,
        )
        for k, batch in enumerate(loader):  # torch tensors (out="torch")
            video = batch["video"]
            print(
                f"batch {k}: video {tuple(video.shape)} {video.dtype}, label {batch['label'].tolist()}"
            )
            for sample_id, clip in zip(batch["sample_id"], video.numpy(), strict=True):
                print(f"  {sample_id}: frames {frame_numbers(clip)}")
            assert video.shape[1:] == (args.frames, args.size, args.size, 3)


if __name__ == "__main__":
    main()
