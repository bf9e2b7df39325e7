"""What `bench_scale.py` makes of its measurements: the per-series table with power-law fits, the goals, the plots and the printed report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _report import print_markdown_table

GOALS = {"open_s": 0.050, "first_batch_s": 2.0, "loader_rss_mb": 1536.0, "flat": 1.5}


def _fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """A power law y = a * x^b fitted to the points (least squares in log-log)."""
    import numpy as np

    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y and y > 0]
    if len(pts) < 2:
        return None
    lx = np.log10([p[0] for p in pts])
    ly = np.log10([p[1] for p in pts])
    b, log_a = np.polyfit(lx, ly, 1)
    return {"a": float(10**log_a), "b": float(b), "at_1e9": float(10**log_a * 1e9**b)}


def _get(r: dict[str, Any], *path: str) -> float | None:
    for p in path:
        if not isinstance(r, dict) or p not in r:
            return None
        r = r[p]
    return float(r) if isinstance(r, int | float) else None


METRICS = {
    "open_s": ("open", "open_s"),
    "first_batch_s": ("loader", "first_batch_s"),
    "per_sample_us": ("loader", "per_sample_us"),
    "loader_rss_mb": ("loader", "peak_rss_mb"),
    "loader_rss_anon_mb": ("loader", "rss_end", "RssAnon"),
    "streaming_first_batch_s": ("loader_streaming", "first_batch_s"),
    "streaming_per_sample_us": ("loader_streaming", "per_sample_us"),
    "streaming_rss_mb": ("loader_streaming", "peak_rss_mb"),
    "order_first_s": ("order", "first_s"),
    "order_rss_mb": ("order", "peak_rss_mb"),
    "subset_selective_s": ("subset_selective", "s"),
    "subset_all_s": ("subset_all", "s"),
    "subset_selective_rss_mb": ("subset_selective", "peak_rss_mb"),
    "subset_all_rss_mb": ("subset_all", "peak_rss_mb"),
    "index_bytes": ("open", "index_bytes"),
}


def series_table(results: dict[str, Any]) -> dict[str, Any]:
    """Per series, per metric: the values by N and a power-law fit."""
    out: dict[str, Any] = {}
    for kind in ("meta", "image"):
        rows = [r for r in results["datasets"] if r["kind"] == kind]
        ns = [r["n"] for r in rows]
        series: dict[str, Any] = {"n": ns}
        for name, path in METRICS.items():
            vals = [_get(r, *path) for r in rows]
            series[name] = vals
            series[name + "_fit"] = _fit([float(x) for x in ns], [v or 0.0 for v in vals])
        out[kind] = series
    return out


def scale_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    meta = results["table"]["meta"]
    ns = meta["n"]
    if not ns:
        return []
    i = len(ns) - 1
    goals = []

    def goal(what: str, value: float | None, limit: float, ok: bool) -> None:
        goals.append(
            {"goal": what, "value": value, "limit": limit, "pass": bool(ok and value is not None)}
        )

    v = meta["open_s"][i]
    goal(f"open at {ns[i]:.0e} < 50 ms", v, GOALS["open_s"], v is not None and v < GOALS["open_s"])
    for order, pre in (("shuffled", ""), ("streaming", "streaming_")):
        v = meta[pre + "first_batch_s"][i]
        goal(
            f"first batch at {ns[i]:.0e} < 2 s ({order})",
            v,
            GOALS["first_batch_s"],
            v is not None and v < GOALS["first_batch_s"],
        )
        v = meta["loader_rss_mb" if not pre else "streaming_rss_mb"][i]
        goal(
            f"loader peak RSS at {ns[i]:.0e} < 1.5 GB, prefetch 512 MiB ({order})",
            v,
            GOALS["loader_rss_mb"],
            v is not None and v < GOALS["loader_rss_mb"],
        )
        per = [x for x in meta[pre + "per_sample_us"] if x]
        if len(per) == len(ns) and len(per) >= 2:
            ratio = max(per) / min(per)
            goal(
                f"loader time per sample flat {ns[0]:.0e}..{ns[i]:.0e}, max/min < 1.5 ({order})",
                ratio,
                GOALS["flat"],
                ratio < GOALS["flat"],
            )
    return goals


def _both_orders(
    metric: str, label: str, what: tuple[str, str], order: tuple[str, str]
) -> list[tuple[str, str, str]]:
    """The plot lines of `metric` in both series, each in the shuffled and the streaming
    order: `label` with `{what}` the series' name and `{order}` the order's."""
    out = []
    for kind, w in zip(("meta", "image"), what, strict=True):
        for pre, o in zip(("", "streaming_"), order, strict=True):
            out.append((kind, pre + metric, label.format(what=w, order=o)))
    return out


def plots(results: dict[str, Any], outdir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    tab = results["table"]
    written = []

    def panel(
        name: str,
        title: str,
        ylabel: str,
        lines: list[tuple[str, str, str]],
        goals: tuple[tuple[float, str], ...] = (),
    ) -> None:
        fig, ax = plt.subplots(figsize=(8.6, 4.2), dpi=110)
        for y, label in goals:
            ax.axhline(y, linestyle="--", linewidth=0.8, color="grey")
            ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), fontsize=7,
                        color="grey", va="bottom")  # fmt: skip
        for kind, metric, label in lines:
            xs, ys = tab[kind]["n"], tab[kind][metric]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples in the dataset")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = outdir / f"scale_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))

    panel(
        "time",
        "Start-up costs against dataset size",
        "seconds",
        [
            ("meta", "open_s", "open"),
            *_both_orders(
                "first_batch_s",
                "first batch ({what}{order})",
                ("metadata", "images"),
                ("", ", streaming"),
            ),
            ("meta", "order_first_s", "order: first batch of indices"),
            ("meta", "subset_selective_s", "subset, selective (1,000 rows)"),
            ("meta", "subset_all_s", "subset, half the rows"),
        ],
        goals=(
            (GOALS["open_s"], "goal: open 50 ms"),
            (GOALS["first_batch_s"], "goal: first batch 2 s"),
        ),
    )
    panel(
        "memory",
        "Peak RSS per process",
        "MB",
        [
            ("meta", "loader_rss_mb", "loader (metadata)"),
            ("meta", "streaming_rss_mb", "loader (metadata, streaming)"),
            ("image", "loader_rss_mb", "loader (images)"),
            ("image", "loader_rss_anon_mb", "loader (images), anonymous memory at the end"),
            ("meta", "order_rss_mb", "order (Sampler)"),
            ("meta", "subset_all_rss_mb", "subset, half the rows"),
        ],
        goals=((GOALS["loader_rss_mb"], "goal: loader 1.5 GB"),),
    )
    # index bytes in MB on the same kind of axes
    for kind in ("meta", "image"):
        tab[kind]["index_mb"] = [v / 1e6 if v else None for v in tab[kind]["index_bytes"]]
    panel(
        "index",
        "Index bytes on disk (parts, sample-id runs, manifest)",
        "MB",
        [("meta", "index_mb", "metadata series"), ("image", "index_mb", "image series")],
    )
    panel(
        "overhead",
        "Loader time per sample, steady state",
        "microseconds per sample",
        _both_orders(
            "per_sample_us",
            "{what}, {order}",
            ("metadata only", "4x4 PNG + label"),
            ("shuffled", "streaming"),
        ),
    )
    for kind in ("meta", "image"):
        tab[kind].pop("index_mb", None)
    return written


def _order(r: dict[str, Any]) -> str:
    return "streaming" if r["streaming"] else "shuffled"


def report_manifest(results: dict[str, Any]) -> None:
    man = results.get("manifest", {})
    if man.get("error"):
        print(f"\nmanifest: {man['error']}")
    if man.get("runs"):
        print_markdown_table(
            "manifest size",
            ["shards", "manifest bytes", "open ms", "shard lists", "their bytes",
             "first read of every shard record ms"],
            man["runs"],
            lambda r: [str(r["shards"]), str(r["manifest_bytes"]), f"{r['open_s'] * 1e3:.1f}",
                       str(r.get("shard_lists", 0)), str(r.get("list_bytes", 0)),
                       f"{r.get('resolve_shards_s', 0) * 1e3:.1f}"],
        )  # fmt: skip


def report_ranks(ranks: dict[str, Any]) -> None:
    print_markdown_table(
        f"many ranks: {ranks['n']} samples on moto S3",
        ["order", "world", "rank", "samples", "shards read", "GET requests", "to 1st batch",
         "MB"],
        ranks["runs"],
        lambda r: [_order(r), str(r["world"]), str(r["rank"]), str(r["samples"]),
                   str(r["shards_read"]), str(r["get_requests"]),
                   str(r["get_requests_to_first_batch"]), f"{r['bytes_read'] / 1e6:.1f}"],
    )  # fmt: skip


def report(results: dict[str, Any]) -> None:
    def fmt(v: float | None, unit: str) -> str:
        if v is None:
            return "—"
        if unit == "ms":
            return f"{v * 1e3:.1f}"
        if unit == "MB":
            return f"{v:.0f}"
        if unit == "us":
            return f"{v:.2f}"
        return f"{v:.3g}"

    cols = [
        ("open_s", "ms", "open ms"),
        ("first_batch_s", "ms", "1st batch ms"),
        ("per_sample_us", "us", "µs/sample"),
        ("loader_rss_mb", "MB", "loader RSS MB"),
        ("loader_rss_anon_mb", "MB", "anon MB"),
        ("streaming_first_batch_s", "ms", "stream 1st ms"),
        ("streaming_per_sample_us", "us", "stream µs/sample"),
        ("order_first_s", "ms", "order ms"),
        ("order_rss_mb", "MB", "order RSS MB"),
        ("subset_selective_s", "ms", "subset sel ms"),
        ("subset_all_s", "ms", "subset 50% ms"),
        ("subset_all_rss_mb", "MB", "subset RSS MB"),
    ]
    for kind in ("meta", "image"):
        tab = results["table"][kind]
        if not tab["n"]:
            continue
        print(f"\n{kind} series")
        print("| N | " + " | ".join(c[2] for c in cols) + " | index MB |")
        print("|---" * (len(cols) + 2) + "|")
        for i, n in enumerate(tab["n"]):
            cells = [fmt(tab[c][i], u) for c, u, _ in cols]
            ib = tab["index_bytes"][i]
            print(
                f"| {n:.0e} | " + " | ".join(cells) + f" | {fmt(ib / 1e6 if ib else None, 'MB')} |"
            )
    report_manifest(results)
    ranks = results.get("ranks")
    if ranks and ranks.get("remote"):
        print_markdown_table(
            "metadata datasets on moto S3: open and first batch (rank 3 of 8)",
            ["N", "order", "open ms", "first batch ms", "GET requests", "MB read"],
            ranks["remote"],
            lambda r: [f"{r['n']:.0e}", _order(r), f"{r['open_s'] * 1e3:.1f}",
                       f"{r['first_batch_s'] * 1e3:.0f}", str(r["get_requests"]),
                       f"{r['bytes_read'] / 1e6:.1f}"],
        )  # fmt: skip
    if ranks:
        report_ranks(ranks)
    print()
    for g in results["goals"]:
        print(f"{'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']}")
