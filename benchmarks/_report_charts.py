"""The charts of the generated benchmark page: matplotlib (Agg), a fixed size and dpi and no
metadata in the PNG, so the same JSON gives the same bytes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

FERROLOAD = ["#d9541e", "#f28e2b", "#f6b26b", "#a33b12", "#fdd0a2"]
PEERS = ["#4c72b0", "#55a868", "#8172b2", "#937860", "#64b5cd", "#8c8c8c", "#ccb974"]
SIZE = (7.0, 3.6)
DPI = 100
ENABLED = True  # False: the chart functions draw nothing (the page alone, e.g. --check)


def _colours(series: Sequence[str]) -> list[str]:
    """ferroload's series in shades of orange, the peers' (ferroload-rs, the Rust
    original, among them) in other colours, in order."""
    out, ours, peers = [], 0, 0
    for name in series:
        if name.startswith("ferroload") and not name.startswith("ferroload-rs"):
            out.append(FERROLOAD[ours % len(FERROLOAD)])
            ours += 1
        else:
            out.append(PEERS[peers % len(PEERS)])
            peers += 1
    return out


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)


def grouped_bars(
    path: Path,
    *,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    series: Sequence[str],
    values: Sequence[Sequence[float | None]],
    log: bool = False,
) -> None:
    """Bars per group (x) and series (colour); `values[s][g]`, None leaves a gap.
    Series whose name starts with `ferroload` are drawn in ferroload's colour."""
    if not ENABLED:
        return
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.8 / max(len(series), 1)
    colours = _colours(series)
    for s, name in enumerate(series):
        xs = [g + (s - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [0.0 if v is None else v for v in values[s]]
        ax.bar(xs, ys, width * 0.95, label=name, color=colours[s])
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)


def lines(
    path: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    x: Sequence[float],
    series: Sequence[str],
    values: Sequence[Sequence[float | None]],
    logx: bool = False,
    logy: bool = False,
) -> None:
    """One line with markers per series over the same x."""
    if not ENABLED:
        return
    fig, ax = plt.subplots(figsize=SIZE)
    colours = _colours(series)
    for s, name in enumerate(series):
        pts = [(a, b) for a, b in zip(x, values[s], strict=True) if b is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name, color=colours[s])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)
