"""The scripts in examples/ run as documented (docs/examples.md), each in a subprocess.

train_deterministic.py runs six times with one seed (decode threads 1 and 2, DataLoader
workers 0 and 2, uninterrupted, resumed mid-epoch and at an epoch's end, its own dataset
and a shared one) and every run must give the same losses (compared as float.hex
strings) and the same weights' sha256. A run takes about 5 s of CPU (3 s of it importing
torch), so about 30 s for the six; the audio and video examples about 4 s each, the
three `--help` runs about 8 s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _proctree import run_tree

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(script: str, *args: str | Path) -> str:
    proc = run_tree([sys.executable, EXAMPLES / script, *args], cwd=ROOT, timeout=300)
    assert proc.returncode == 0, f"{script} {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.slow
def test_training_is_bitwise_deterministic(tmp_path: Path) -> None:
    data = tmp_path / "data"  # written by the first run that names it, read by the others

    def train(name: str, *args: str | Path) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        run_example("train_deterministic.py", "--seed", "3", "--out", out, *args)
        result: dict[str, Any] = json.loads(out.read_text())
        return result

    runs = {
        # its own dataset, written in a temporary directory: the generator is deterministic
        "own data, threads 2": train("own", "--threads", "2"),
        "threads 1": train("t1", "--data", data, "--threads", "1"),
        "2 workers": train("w2", "--data", data, "--workers", "2"),
        # 8 steps an epoch: step 11 is part-way through the second epoch
        "resumed at 11": train("r11", "--data", data, "--resume-at", "11"),
        "2 workers, threads 1, resumed at 5": train(
            "w2r5", "--data", data, "--workers", "2", "--threads", "1", "--resume-at", "5"
        ),
        # the end of the first epoch: the checkpoint holds no loader position
        "2 workers, resumed at 8": train(
            "w2r8", "--data", data, "--workers", "2", "--resume-at", "8"
        ),
    }
    reference = runs["own data, threads 2"]
    assert reference["steps"] == 16 and reference["steps_per_epoch"] == 8
    assert 11 % reference["steps_per_epoch"] != 0  # mid-epoch
    assert reference["loss_values"][-1] < reference["loss_values"][0]  # it learns
    assert len(set(reference["losses"])) == 16  # real, changing losses
    for name, result in runs.items():
        assert result["losses"] == reference["losses"], f"{name}: other losses"
        assert [float.fromhex(x) for x in result["losses"]] == result["loss_values"]
        assert result["weights_sha256"] == reference["weights_sha256"], f"{name}: other weights"


def test_audio_example() -> None:
    out = run_example("audio_loader.py")
    assert "batch 0: audio (8, 1, 16000) torch.float32" in out
    assert "batch 1: audio (8, 1, 16000) torch.float32" in out
    assert "source rate" in out and "44100" in out
    assert "same seed, one thread: identical crops" in out


def test_video_example() -> None:
    out = run_example("video_loader.py")
    assert "batch 0: video (4, 8, 32, 32, 3) torch.uint8" in out
    assert "batch 1: video (2, 8, 32, 32, 3) torch.uint8" in out
    # uniform sampling: the centre frame of each of 8 equal segments of 20 frames
    assert out.count("frames [1, 3, 6, 8, 11, 13, 16, 18]") == 6


def test_examples_document_themselves() -> None:
    for script in sorted(EXAMPLES.glob("*.py")):
        out = run_example(script.name, "--help")
        assert "usage:" in out, script.name
        assert f"uv run python examples/{script.name}" in script.read_text(), script.name
        assert f"examples/{script.name}" in (ROOT / "docs" / "examples.md").read_text()
