"""Bitwise-deterministic training: the same seed gives the same losses and weights, bit for bit.

The script trains a tiny CNN on a small JPEG dataset (written on the fly when `--data` is
not given or does not exist yet) with `make_loader` doing the augmentation (seeded
`RandomResizedCrop`, horizontal flip, float32 NCHW, normalisation) in its decode threads.
Whatever the number of decode threads (`--threads`), of `DataLoader` worker processes
(`--workers`, through `FerroIterableDataset` and torchdata's `StatefulDataLoader`), and
whether the run is stopped and resumed mid-epoch (`--resume-at`), it prints the same loss
curve and the same sha256 of the final weights.

Why it holds:

* the loader's order is a pure function of `(seed, epoch)`, and every random crop and flip
  is drawn from a per-sample seed (a function of the seed, the epoch and the sample's
  position), so a sample gets the same pixels on any thread, worker or after a resume;
* the model is initialised from `torch.manual_seed`, runs with
  `torch.use_deterministic_algorithms(True)` on the CPU, and its own math runs on a fixed
  number of torch threads (`--torch-threads`, default 1): CPU kernels may split a
  reduction differently on another thread count, so that number is part of the recipe,
  like the seed;
* a checkpoint holds the model, the optimizer, torch's RNG state (dropout draws from it)
  and the loader's position; `--resume-at STEP` saves one after STEP steps, throws every
  object away, builds new ones from the checkpoint and carries on.

Run it (`--help` lists the options):

    uv run python examples/train_deterministic.py --out a.json
    uv run python examples/train_deterministic.py --threads 1 --workers 2 --resume-at 11 --out b.json
    cmp a.json b.json  # the same bytes; tests-e2e/test_examples.py checks this
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

import ferroload
from ferroload_loader.torch import FerroIterableDataset

CLASSES = 4
MEAN_STD = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def write_dataset(root: str, n: int = 64) -> None:
    """A small image dataset from a fixed generator: the same bytes on every run.

    Each class has its own colour; every image has its own size (40 to 71 pixels a side)
    and noise, so the random crops differ from image to image.
    """
    colours = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]])
    with ferroload.Writer(root, "deterministic-demo") as w:
        w.declare("image", "jpg", kind="tensor", codec_hint="image")
        for i in range(n):
            rng = np.random.default_rng(i)
            label = i % CLASSES
            h, w_ = (int(x) for x in rng.integers(40, 72, size=2))
            noise = rng.normal(0, 40, size=(h, w_, 3))
            pixels = np.clip(colours[label] + noise, 0, 255).astype(np.uint8)
            pixels[: h // 2, : w_ // 3] //= 2  # a darker corner: something for a crop to miss
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, "JPEG", quality=90)
            w.add(f"img-{i:04d}", {"image": buf.getvalue()}, {"label": label})


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),  # draws from torch's RNG: the checkpoint saves its state
        nn.Linear(16, CLASSES),
    )


def weights_sha256(model: nn.Module) -> str:
    """sha256 over every parameter and buffer, by name, as raw bytes."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class Loader:
    """The batches of one run: `make_loader` in-process (`workers=0`), or
    `FerroIterableDataset` in `StatefulDataLoader` worker processes. Both give the same
    batches in the same order; both checkpoint with `state_dict()`."""

    def __init__(self, root: str, args: argparse.Namespace) -> None:
        options: dict[str, Any] = {
            "batch_size": args.batch_size,
            "images": ["image"],
            "meta": ["label"],
            "resize": (32, 32),
            "crop": ferroload.RandomResizedCrop(scale=(0.3, 1.0)),
            "hflip": 0.5,
            "layout": "NCHW",
            "dtype": torch.float32,
            "normalize": MEAN_STD,
            "seed": args.seed,
            "threads": args.threads,
        }
        self.dataset: FerroIterableDataset | None = None
        self.loader: Any
        if args.workers == 0:
            self.loader = ferroload.make_loader(root, **options)
        else:
            self.dataset = FerroIterableDataset(root, **options)
            # Its own generator: a DataLoader iterator otherwise draws its workers' base
            # seed from torch's global RNG, and dropout would see other numbers.
            self.loader = StatefulDataLoader(
                self.dataset,
                batch_size=None,
                num_workers=args.workers,
                generator=torch.Generator().manual_seed(args.seed),
            )

    def set_epoch(self, epoch: int) -> None:
        (self.dataset or self.loader).set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset or self.loader)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.loader.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)


def train(
    root: str,
    args: argparse.Namespace,
    *,
    resume_from: Path | None = None,
    save_to: Path | None = None,
    stop_at: int | None = None,
) -> dict[str, Any] | None:
    """Train from scratch, or from the checkpoint `resume_from`; with `stop_at`, save a
    checkpoint to `save_to` after that many steps and return None."""
    torch.manual_seed(args.seed)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = Loader(root, args)
    losses: list[float] = []
    step, start_epoch = 0, 0
    if resume_from is not None:
        saved = torch.load(resume_from, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        torch.set_rng_state(saved["torch_rng"])
        losses, step, start_epoch = saved["losses"], saved["step"], saved["epoch"]
    model.train()
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)  # after a resume, the same epoch keeps the saved position
        for batch in loader.loader:
            loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step == stop_at:
                assert save_to is not None
                epoch_done = step % len(loader) == 0
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        # saved after an epoch's last batch, it resumes with the next
                        # epoch (with workers too): the loop goes on with that number
                        "loader": loader.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                        "losses": losses,
                        "step": step,
                        "epoch": epoch + 1 if epoch_done else epoch,
                    },
                    save_to,
                )
                return None
    return {
        "steps": step,
        "steps_per_epoch": len(loader),
        "losses": [x.hex() for x in losses],  # exact: float.fromhex gives the bits back
        "loss_values": losses,
        "weights_sha256": weights_sha256(model),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="dataset directory (written there when missing)")
    parser.add_argument("--threads", type=int, default=2, help="loader decode threads")
    parser.add_argument(
        "--workers", type=int, default=0, help="DataLoader workers (0: make_loader in-process)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads (part of the recipe)"
    )
    parser.add_argument("--resume-at", type=int, help="checkpoint after this step, then resume")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", help="write the losses and the weights' hash here (JSON)")
    args = parser.parse_args(argv)

    # torchdata's StatefulDataLoader calls a torch function deprecated in recent torch
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory(prefix="ferroload-deterministic-") as scratch:
        root = args.data or os.path.join(scratch, "data")
        if not os.path.exists(root):
            write_dataset(root)
        checkpoint = Path(scratch) / "checkpoint.pt"
        result = train(root, args, save_to=checkpoint, stop_at=args.resume_at)
        if result is None:  # stopped at --resume-at: new objects, from the checkpoint
            result = train(root, args, resume_from=checkpoint)
            assert result is not None
        elif args.resume_at is not None:
            parser.error(f"--resume-at {args.resume_at} is past the end of the run")
    for i, loss in enumerate(result["loss_values"], 1):
        print(f"step {i:3d}  loss {loss:.6f}")
    print(f"weights sha256 {result['weights_sha256']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
