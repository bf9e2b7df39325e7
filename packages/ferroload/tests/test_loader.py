"""`ferroload.loader`: the loader package, its adapters imported only on first use."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import ferroload
import ferroload.loader
import ferroload_loader


def _python(code: str) -> list[str]:
    """The lines `code` prints in a fresh interpreter."""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()


def test_loader_reexports_the_loader_package() -> None:
    # the facade's three take ferroload-rs 0.1.1's calls too (ferroload.compat)
    facade = {"make_loader", "FerroLoader", "Sampler"}
    for name in ferroload_loader.__all__:
        if name not in facade:
            assert getattr(ferroload.loader, name) is getattr(ferroload_loader, name)
    for name in facade:
        assert getattr(ferroload.loader, name) is getattr(ferroload, name)
    assert issubclass(ferroload.Sampler, ferroload_loader.Sampler)
    listed = dir(ferroload.loader)
    for name in ("make_loader", "FerroTorchDataset", "FerroDataModule", "torch", "lightning"):
        assert name in listed
    with pytest.raises(AttributeError, match=r"module 'ferroload.loader' has no attribute 'nope'"):
        ferroload.loader.nope  # type: ignore[attr-defined]  # noqa: B018


def test_import_loader_imports_no_adapter() -> None:
    code = (
        "import sys, ferroload.loader\n"
        "print(sorted(m for m in sys.modules if m in {'torch', 'lightning'} "
        "or m.startswith(('ferroload.loader.', 'ferroload_loader.'))"
        " and not m.startswith('ferroload_loader._')))\n"
    )
    assert _python(code) == ["[]"]


def test_torch_submodule() -> None:
    pytest.importorskip("torch", reason="ferroload.loader.torch needs the torch extra")
    import ferroload.loader.torch
    import ferroload_loader.torch
    from ferroload.loader.torch import FerroIterableDataset, FerroTorchDataset

    assert FerroTorchDataset is ferroload_loader.torch.FerroTorchDataset
    assert FerroIterableDataset is ferroload_loader.torch.FerroIterableDataset
    assert ferroload.loader.torch.__all__ == ferroload_loader.torch.__all__
    for name in ferroload_loader.torch.__all__:
        assert getattr(ferroload.loader.torch, name) is getattr(ferroload_loader.torch, name)
    # ferroload.loader's is 0.2's class to isinstance and to a 0.2 call; a call with an
    # argument only ferroload-rs 0.1.1 took makes 0.1.1's dataset (ferroload.compat)
    assert issubclass(FerroTorchDataset, ferroload.loader.FerroTorchDataset)
    assert issubclass(FerroIterableDataset, ferroload.loader.FerroIterableDataset)
    # reached as an attribute, without importing it first
    code = (
        "import sys, ferroload\n"
        "print('torch' in sys.modules)\n"
        "print(ferroload.loader.torch.__name__, ferroload.loader.torch.FerroTorchDataset.__module__)\n"
        "print('torch' in sys.modules)\n"
    )
    assert _python(code) == ["False", "ferroload.loader.torch ferroload_loader.torch", "True"]


def test_lightning_submodule() -> None:
    pytest.importorskip("lightning", reason="ferroload.loader.lightning needs the lightning extra")
    import ferroload.loader.lightning
    import ferroload_loader.lightning
    from ferroload.loader.lightning import FerroDataModule, LightningLoader

    assert FerroDataModule is ferroload_loader.lightning.FerroDataModule
    assert LightningLoader is ferroload_loader.lightning.LightningLoader
    assert ferroload.loader.lightning.__all__ == ferroload_loader.lightning.__all__
    for name in ferroload_loader.lightning.__all__:
        assert getattr(ferroload.loader.lightning, name) is getattr(
            ferroload_loader.lightning, name
        )
    assert ferroload.loader.FerroDataModule is FerroDataModule
    code = (
        "import ferroload.loader.lightning as m\n"
        "from ferroload.loader.lightning import FerroDataModule\n"
        "print(m.__name__, FerroDataModule.__module__)\n"
    )
    assert _python(code) == ["ferroload.loader.lightning ferroload_loader.lightning"]


def test_a_closed_loader_says_nothing_at_exit(tmp_path: Path) -> None:
    """A training script with torch imported that closes its loader and exits: no
    "Exception ignored in FerroLoader.__del__" (the finalizer once used a module global
    that the interpreter had already cleared)."""
    pytest.importorskip("torch", reason="out='torch' needs the torch extra")
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(png, "PNG")
    w = ferroload.Writer(tmp_path / "ds", "tiny")
    w.declare("image", "png", "tensor", "image")
    for i in range(8):
        w.add(f"s{i}", {"image": png.getvalue()}, {"label": i})
    w.close()
    code = f"""
import torch, ferroload
dl = ferroload.make_loader({str(tmp_path / "ds")!r}, batch_size=4, images=["image"],
                           meta=["label"], resize=(8, 8), out="torch", seed=0)
print(len(next(iter(dl))["label"]))
dl.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["4"] and "Exception ignored" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    "statement",
    [
        "from ferroload.loader.torch import FerroTorchDataset",
        "import ferroload; ferroload.loader.torch",
    ],
)
def test_the_torch_adapters_without_torch_name_the_install(statement: str) -> None:
    code = f"import sys; sys.modules['torch'] = None\n{statement}"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1
    assert "needs torch" in last and "pip install 'ferroload-loader[torch]'" in last, last
