"""One function per benchmark script: its result files as tables and charts for the
generated page (benchmarks/report.py). Each takes the script's results (sorted by file
name) and the chart folder, and returns a Section."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import _report_charts as charts
from _report_page import (
    Result,
    Section,
    goals,
    image,
    mb,
    md_table,
    num,
    over,
    run_facts,
    sig,
    times,
)

SETS = {"tiny": "tiny (32x32 PNG)", "jpeg": "jpeg (256x256 JPEG)"}


def _set_name(s: str) -> str:
    return SETS.get(s, s)


def _png(r: Result, base: str) -> str:
    """A chart's file name: `base.png` for the script's main result file, with the
    file's suffix for the others (`bench_format_quick.json` -> `format_write_quick.png`)."""
    suffix = r.name[len(r.script) :] if r.name.startswith(r.script) else f"_{r.name}"
    return f"{base}{suffix}.png"


def _runs(results: list[Result], body: Callable[[Result, Section], None]) -> Section:
    """Each result: a heading (when there are several), its run facts, then `body`."""
    sec = Section()
    for r in results:
        if len(results) > 1:
            sec.lines += [f"### `{r.name}.json`", ""]
        sec.lines += run_facts(r)
        body(r, sec)
        sec.lines += goals(r.data)
    return sec


# --- bench_format ---------------------------------------------------------------------

_WRITERS = [
    ("ferroload", "ferroload Writer"),
    ("webdataset", "WebDataset ShardWriter"),
    ("webdataset_mtime0", "WebDataset ShardWriter, mtime=0"),
    ("hf_save_to_disk", "HF from_dict + save_to_disk (one run)"),
]


def bench_format(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        d = r.data
        write, ra, size = d.get("write", {}), d.get("random_access", {}), d.get("size", {})
        sec.lines += [
            "**Write** (best of the rounds; `ferroload speed-up` = that system's "
            "time over ferroload's):",
            "",
        ]
        rows = []
        for s, w in write.items():
            fl = w.get("ferroload", {}).get("best_s")
            for key, label in _WRITERS:
                if key in w:
                    x = w[key]
                    rows.append(
                        [
                            _set_name(s),
                            label,
                            num(x.get("samples_per_s")),
                            num(x.get("payload_mb_per_s")),
                            sig(x.get("best_s")),
                            times(over(x.get("best_s"), fl)),
                        ]
                    )
        sec.lines += md_table(
            ["set", "system", "samples/s", "MB/s", "best s", "ferroload speed-up"], rows, left=2
        )
        sec.lines += [
            "**Random access** (latency of one lookup in µs; `HF / this` = HF's "
            "latency over this reader's):",
            "",
        ]
        rows = []
        readers = [
            ("ferroload", "ferroload get(i, ['image'])"),
            ("ferroload_image_label", "ferroload get(i, ['image', 'label'])"),
            ("hf", "HF ds[i]"),
        ]
        for s, a in ra.items():
            hf = a.get("hf", {})
            for key, label in readers:
                x = a.get(key, {})
                rows.append(
                    [
                        _set_name(s),
                        label,
                        sig(x.get("p50_us")),
                        sig(x.get("p99_us")),
                        sig(x.get("mean_us")),
                        num(x.get("lookups_per_s")),
                        times(over(hf.get("p50_us"), x.get("p50_us"))),
                        times(over(hf.get("p99_us"), x.get("p99_us"))),
                    ]
                )
        sec.lines += md_table(
            ["set", "reader", "p50", "p99", "mean", "lookups/s", "HF / this p50", "HF / this p99"],
            rows,
            left=2,
        )
        o = d.get("open")
        if isinstance(o, dict):
            sec.lines += ["**Open** (`Dataset.open`, in-process, warm):", ""]
            sec.lines += md_table(
                [
                    "samples",
                    "median ms",
                    "min ms",
                    "max ms",
                    "bytes read",
                    "GETs",
                    "LISTs",
                    "manifest only",
                ],
                [
                    [
                        num(o.get("samples")),
                        sig(o.get("median_ms")),
                        sig(o.get("min_ms")),
                        sig(o.get("max_ms")),
                        num(o.get("bytes_read")),
                        num(o.get("get_requests")),
                        num(o.get("list_requests")),
                        "yes" if o.get("manifest_only") else "no",
                    ]
                ],
            )
        sec.lines += [
            "**Size on disk** (MB; `this / ferroload` above 1 means ferroload is smaller):",
            "",
        ]
        rows = []
        sizes = [
            ("ferroload", "ferroload"),
            ("webdataset", "WebDataset tars"),
            ("webdataset_mtime0", "WebDataset tars, mtime=0"),
            ("hf", "HF save_to_disk"),
        ]
        for s, z in size.items():
            for key, label in sizes:
                if key in z:
                    rows.append(
                        [_set_name(s), label, mb(z[key]), times(over(z[key], z.get("ferroload")))]
                    )
        sec.lines += md_table(["set", "system", "MB", "this / ferroload"], rows, left=2)
        sets = list(ra)
        charts.grouped_bars(
            out / _png(r, "format_random_access"),
            title="Random access: p50 and p99 latency",
            ylabel="µs per lookup (lower is better)",
            groups=[f"{s} p50" for s in sets] + [f"{s} p99" for s in sets],
            series=[
                "ferroload get(i, ['image'])",
                "ferroload get(i, ['image', 'label'])",
                "HF datasets ds[i]",
            ],
            values=[
                [ra[s].get(k, {}).get("p50_us") for s in sets]
                + [ra[s].get(k, {}).get("p99_us") for s in sets]
                for k in ("ferroload", "ferroload_image_label", "hf")
            ],
        )
        zsets = list(size)
        charts.grouped_bars(
            out / _png(r, "format_storage"),
            title="Bytes on disk",
            ylabel="MB (lower is better)",
            groups=zsets,
            series=[label for _, label in sizes],
            values=[[mb_float(size[s].get(k)) for s in zsets] for k, _ in sizes],
        )
        wsets = list(write)
        charts.grouped_bars(
            out / _png(r, "format_write"),
            title="Write throughput",
            ylabel="samples/s (log)",
            groups=wsets,
            series=[label for _, label in _WRITERS],
            log=True,
            values=[[write[s].get(k, {}).get("samples_per_s") for s in wsets] for k, _ in _WRITERS],
        )
        sec.charts += [
            _png(r, "format_write"),
            _png(r, "format_random_access"),
            _png(r, "format_storage"),
        ]
        sec.lines += image(_png(r, "format_write"), "write throughput")
        sec.lines += image(_png(r, "format_random_access"), "random-access latency")
        sec.lines += image(_png(r, "format_storage"), "bytes on disk")

    return _runs(results, body)


def mb_float(v: float | None) -> float | None:
    return None if v is None else v / 1e6


# --- bench_codec ----------------------------------------------------------------------


def bench_codec(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        cases: dict[str, Any] = r.data.get("cases", {})
        m = r.meta
        stock = m.get("stock_pillow", {})
        simd = m.get("pillow_simd", {})
        sec.lines += [
            f"Stock Pillow: {stock.get('pillow', 'not run')}; Pillow-SIMD: "
            f"{simd.get('pillow', 'not run')}; images: "
            f"{m.get('image_source', 'not recorded')}.",
            "",
        ]
        for key, c in cases.items():
            methods: dict[str, Any] = c.get("methods", {})
            base = methods.get(f"stock_{c.get('baseline')}", {})
            sec.lines += [
                f"**{c.get('title', key)}** (`{key}`, {num(c.get('images'))} "
                f"images; machine scaling 1 -> 2 threads: "
                f"{sig(c.get('reference_scaling_1_to_2'))}):",
                "",
            ]
            rows = [
                [
                    name,
                    num(x.get("threads")),
                    num(x.get("images_per_s")),
                    num(x.get("per_core_images_per_s")),
                    sig(x.get("us_per_image")),
                    times(over(x.get("per_core_images_per_s"), base.get("per_core_images_per_s"))),
                ]
                for name, x in methods.items()
            ]
            sec.lines += md_table(
                [
                    "method",
                    "threads",
                    "images/s",
                    "images/s per core",
                    "µs per image",
                    "per core / stock Pillow",
                ],
                rows,
            )
        names = list(cases)

        def rate(k: str, method: str) -> float | None:
            x = cases[k].get("methods", {}).get(method)
            return None if x is None else x.get("images_per_s")

        charts.grouped_bars(
            out / _png(r, "codec_threads"),
            title="Decode + resize: thread scaling against Pillow",
            ylabel="images/s (log)",
            groups=names,
            log=True,
            series=[
                "ferroload, 1 thread",
                "ferroload, 2 threads",
                "Pillow-SIMD, 1 core",
                "stock Pillow, 1 core",
            ],
            values=[
                [rate(k, "ferroload_t1") for k in names],
                [rate(k, "ferroload_t2") for k in names],
                [rate(k, f"simd_{cases[k].get('baseline')}") for k in names],
                [rate(k, f"stock_{cases[k].get('baseline')}") for k in names],
            ],
        )
        sec.charts.append(_png(r, "codec_threads"))
        sec.lines += image(_png(r, "codec_threads"), "decode thread scaling")

    return _runs(results, body)


# --- bench_loader ---------------------------------------------------------------------

_LOADER = [
    ("ferroload", "ferroload make_loader"),
    ("ferroload_prefetch64", "ferroload, prefetch 64 MiB"),
    ("ferroload_w2", "ferroload, DataLoader 2 workers"),
    ("codec", "ferroload codec alone"),
    ("ferroload_stream", "ferroload make_loader, streaming"),
    ("rs011", "ferroload-rs 0.1.1 make_loader"),
    ("rs011_stream", "ferroload-rs 0.1.1, streaming"),
    ("wds_w0", "WebDataset, 0 workers"),
    ("wds_w2", "WebDataset, 2 workers"),
    ("hf_w0", "HF datasets, 0 workers"),
    ("hf_w2", "HF datasets, 2 workers"),
]


def bench_loader(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        sets: dict[str, Any] = r.data.get("sets", {})
        configs = r.meta.get("configs", {})
        if configs:
            sec.lines += md_table(
                ["system", "configuration"], [[k, f"`{v}`"] for k, v in configs.items()], left=2
            )
        for s, x in sets.items():
            cfg: dict[str, Any] = x.get("configs", {})
            fl = cfg.get("ferroload", {}).get("samples_per_s")
            sec.lines += [
                f"**{_set_name(s)}**: {num(x.get('samples'))} samples, batches of "
                f"{x.get('batch')}; `ferroload / this` = ferroload's samples/s over "
                "this system's:",
                "",
            ]
            rows = []
            for key, c in cfg.items():
                peak = c.get("tree_peak") or {}
                rows.append(
                    [
                        c.get("label", key),
                        num(c.get("workers")),
                        num(c.get("samples_per_s")),
                        num(c.get("median_samples_per_s")),
                        times(over(fl, c.get("samples_per_s"))),
                        num(mib(peak.get("pss"))),
                        num(mib(peak.get("rss"))),
                    ]
                )
            sec.lines += md_table(
                [
                    "system",
                    "workers",
                    "samples/s (best)",
                    "samples/s (median)",
                    "ferroload / this",
                    "peak PSS MiB",
                    "peak RSS MiB",
                ],
                rows,
            )
        names = list(sets)
        charts.grouped_bars(
            out / _png(r, "loader_throughput"),
            title=f"Training loader throughput ({r.meta.get('cpu_count', '?')} CPUs)",
            ylabel="samples/s (log)",
            groups=[_set_name(s) for s in names],
            log=True,
            series=[label for _, label in _LOADER],
            values=[
                [sets[s].get("configs", {}).get(k, {}).get("samples_per_s") for s in names]
                for k, _ in _LOADER
            ],
        )
        charts.grouped_bars(
            out / _png(r, "loader_memory"),
            title="Peak memory of the whole process tree (PSS)",
            ylabel="MiB (lower is better)",
            groups=[_set_name(s) for s in names],
            series=[label for _, label in _LOADER],
            values=[
                [
                    mib((sets[s].get("configs", {}).get(k, {}).get("tree_peak") or {}).get("pss"))
                    for s in names
                ]
                for k, _ in _LOADER
            ],
        )
        loads: dict[str, Any] = r.data.get("loads", {})
        if len(loads) > 1:
            labels = dict(_LOADER)
            for s in names:
                systems = list(dict.fromkeys(k for ld in loads.values() for k in ld.get(s, {})))
                sec.lines += [
                    f"**{_set_name(s)} under load**: samples/s, median (min-max) of the "
                    "timed epochs (`busyN`: N competing CPU-bound processes; `step`: the "
                    "consumer spends CPU on every batch):",
                    "",
                ]
                rows = []
                for k in systems:
                    cells = []
                    for ld in loads.values():
                        x = ld.get(s, {}).get(k)
                        cells.append(
                            f"{num(x['median_samples_per_s'])} ({num(x['min_samples_per_s'])}"
                            f"-{num(x['max_samples_per_s'])})"
                            if x
                            else ""
                        )
                    rows.append([labels.get(k, k), *cells])
                sec.lines += md_table(["system", *loads], rows)
        sec.charts += [_png(r, "loader_throughput"), _png(r, "loader_memory")]
        sec.lines += image(_png(r, "loader_throughput"), "loader throughput")
        sec.lines += image(_png(r, "loader_memory"), "loader peak memory")

    return _runs(results, body)


def mib(v: float | None) -> float | None:
    return None if v is None else v / (1 << 20)


# --- bench_augment --------------------------------------------------------------------

_AUGMENT = {
    "ferroload_plain": "ferroload (a): resize only, uint8 NHWC",
    "ferroload_augment": "ferroload (b): crop, flip, float32, normalize",
    "torchvision": "torchvision (c): v2 transforms, 2 workers",
    "ferroload_augment_bf16": "ferroload (d): as (b), bfloat16",
    "ferroload_augment_uint8": "ferroload (e): as (b), uint8 NCHW",
}


def bench_augment(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        systems: dict[str, Any] = r.data.get("systems", {})
        tv = systems.get("torchvision", {}).get("samples_per_s")
        rows = [
            [
                x.get("label", k),
                num(x.get("samples_per_s")),
                num(x.get("median_samples_per_s")),
                times(over(x.get("samples_per_s"), tv)),
            ]
            for k, x in systems.items()
        ]
        sec.lines += [
            f"{num(r.data.get('samples'))} JPEGs; `this / torchvision` = samples/s "
            "over torchvision's:",
            "",
        ]
        sec.lines += md_table(
            ["system", "samples/s (best)", "samples/s (median)", "this / torchvision"], rows
        )
        keys = list(systems)
        charts.grouped_bars(
            out / _png(r, "augment_throughput"),
            title="Augmented, model-ready batches",
            ylabel="samples/s",
            groups=["best epoch"],
            series=[_AUGMENT.get(k, k) for k in keys],
            values=[[systems[k].get("samples_per_s")] for k in keys],
        )
        sec.charts.append(_png(r, "augment_throughput"))
        sec.lines += image(_png(r, "augment_throughput"), "augmentation throughput")

    return _runs(results, body)


# --- bench_store ----------------------------------------------------------------------


def _store_rows(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, epoch, config) for each figure: ferroload cold and warm, local, peers."""
    out = []
    for key, c in cfg.items():
        epochs = c.get("epochs") or []
        if not epochs:
            continue
        if key == "ferroload":
            out.append(("ferroload, cold (epoch 1)", epochs[0], c))
            if len(epochs) > 1:
                warm = max(epochs[1:], key=lambda e: e.get("samples_per_s") or 0)
                out.append(("ferroload, warm (from the cache, best)", warm, c))
        elif key == "local":
            best = max(epochs, key=lambda e: e.get("samples_per_s") or 0)
            out.append(("ferroload, local disk (best)", best, c))
        else:
            label = {
                "naive": "one GET per sample",
                "wds_w0": "WebDataset, 0 workers",
                "wds_w2": "WebDataset, 2 workers",
            }.get(key, key)
            out.append((label, epochs[0], c))
    return out


def bench_store(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        sets: dict[str, Any] = r.data.get("sets", {})
        sec.lines += [
            f"Delay per request: {sig(1000 * r.meta.get('delay_s', 0))} ms. "
            "`ferroload / this` = ferroload's cold samples/s over this row's. "
            "Requests and bytes: the store's own counts for ferroload's epochs, "
            "the proxy's for the others (the naive reader's run is timed for a "
            "fixed time: its bytes cover part of an epoch).",
            "",
        ]
        per_set: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
        for s, x in sets.items():
            rows_in = _store_rows(x.get("configs", {}))
            per_set[s] = rows_in
            cold = rows_in[0][1].get("samples_per_s") if rows_in else None
            rows = []
            for label, e, c in rows_in:
                store = e.get("store")
                if store is not None:
                    req, nbytes = store.get("get_requests"), store.get("bytes_read")
                    if label.startswith("ferroload, local"):
                        req, nbytes = 0, 0
                else:
                    req = (c.get("proxy") or {}).get("requests", e.get("requests"))
                    nbytes = (c.get("proxy") or {}).get("bytes")
                rows.append(
                    [
                        label,
                        num(e.get("n")),
                        num(e.get("samples_per_s")),
                        sig(e.get("first_batch_s")),
                        num(req),
                        mb(nbytes),
                        times(over(cold, e.get("samples_per_s"))),
                    ]
                )
            sec.lines += [f"**{_set_name(s)}**, {num(x.get('samples'))} samples:", ""]
            sec.lines += md_table(
                [
                    "system",
                    "samples",
                    "samples/s",
                    "first batch s",
                    "requests",
                    "MB over the network",
                    "ferroload / this",
                ],
                rows,
            )
        t = r.data.get("ttfb")
        if isinstance(t, dict):
            sec.lines += ["**Cold remote open** of a large dataset:", ""]
            sec.lines += md_table(
                [
                    "samples",
                    "dataset MB",
                    "open s",
                    "open GETs",
                    "first batch s",
                    "GETs to the first batch",
                    "MB to the first batch",
                ],
                [
                    [
                        num(t.get("samples")),
                        mb(t.get("dataset_bytes")),
                        sig(t.get("open_s")),
                        num((t.get("open_stats") or {}).get("get_requests")),
                        sig(t.get("first_batch_s")),
                        num((t.get("store") or {}).get("get_requests")),
                        mb((t.get("store") or {}).get("bytes_read")),
                    ]
                ],
            )
        names = list(per_set)
        labels: list[str] = []
        for s in names:
            labels += [lab for lab, _, _ in per_set[s] if lab not in labels]

        def pick(s: str, label: str, what: str) -> float | None:
            for lab, e, c in per_set[s]:
                if lab != label:
                    continue
                if what == "rate":
                    return e.get("samples_per_s")
                n = e.get("n") or 0
                if "store" in e:
                    v = e["store"].get("get_requests" if what == "req" else "bytes_read", 0)
                else:
                    proxy = c.get("proxy") or {}
                    v = proxy.get("requests", 0) if what == "req" else proxy.get("bytes", 0)
                    v = e.get("requests", v) if what == "req" else v
                return None if not n else 1000.0 * float(v) / n / (1.0 if what == "req" else 1e6)
            return None

        charts.grouped_bars(
            out / _png(r, "store_throughput"),
            title="One epoch from S3 through a 20 ms proxy",
            ylabel="samples/s (log)",
            groups=[_set_name(s) for s in names],
            log=True,
            series=labels,
            values=[[pick(s, lab, "rate") for s in names] for lab in labels],
        )
        remote = [
            lab
            for lab in labels
            if not lab.startswith("ferroload, local") and not lab.startswith("ferroload, warm")
        ]
        charts.grouped_bars(
            out / _png(r, "store_requests"),
            title="Requests per 1,000 samples (warm epochs from the cache: none)",
            ylabel="GET requests (log)",
            groups=[_set_name(s) for s in names],
            log=True,
            series=remote,
            values=[[pick(s, lab, "req") for s in names] for lab in remote],
        )
        charts.grouped_bars(
            out / _png(r, "store_bytes"),
            title="Bytes read from the store per 1,000 samples",
            ylabel="MB",
            groups=[_set_name(s) for s in names],
            series=remote,
            values=[[pick(s, lab, "bytes") for s in names] for lab in remote],
        )
        sec.charts += [
            _png(r, "store_throughput"),
            _png(r, "store_requests"),
            _png(r, "store_bytes"),
        ]
        sec.lines += image(_png(r, "store_throughput"), "remote throughput")
        sec.lines += image(_png(r, "store_requests"), "remote requests")
        sec.lines += image(_png(r, "store_bytes"), "remote bytes")

    return _runs(results, body)


# --- bench_convert --------------------------------------------------------------------

_CONVERT = [
    ("ferroload_w1", "ferroload import_image_folder, 1 thread"),
    ("ferroload_w8", "ferroload import_image_folder, 8 threads"),
    ("hf_imagefolder_save_to_disk", "HF imagefolder + save_to_disk"),
    ("webdataset_shardwriter", "WebDataset ShardWriter loop"),
]


def bench_convert(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        systems: dict[str, Any] = r.data.get("systems", {})
        fl = systems.get("ferroload_w8", {}).get("samples_per_s")
        m = r.meta
        sec.lines += [
            f"{num(m.get('samples'))} JPEGs, {mb(m.get('jpeg_bytes'))} MB; "
            f"page cache {'emptied before each system' if m.get('cold') else 'warm'}"
            "; `ferroload (8) / this` = samples/s of ferroload with 8 threads over "
            "this system's:",
            "",
        ]
        rows = [
            [
                dict(_CONVERT).get(k, k),
                num(x.get("samples_per_s")),
                sig(x.get("seconds")),
                mb(x.get("bytes")),
                times(over(fl, x.get("samples_per_s"))),
            ]
            for k, x in systems.items()
        ]
        sec.lines += md_table(
            ["system", "samples/s", "seconds", "MB written", "ferroload (8) / this"], rows
        )

    sec = _runs(results, body)
    groups = ["cold" if r.meta.get("cold") else "warm" for r in results]
    charts.grouped_bars(
        out / "convert_throughput.png",
        title="Importing a folder of JPEGs",
        ylabel="samples/s",
        groups=groups,
        series=[label for _, label in _CONVERT],
        values=[
            [r.data.get("systems", {}).get(k, {}).get("samples_per_s") for r in results]
            for k, _ in _CONVERT
        ],
    )
    sec.charts.append("convert_throughput.png")
    sec.lines += image("convert_throughput.png", "import throughput")
    return sec


# --- bench_map ------------------------------------------------------------------------

_MAP = {
    "ferroload_threads": "ferroload map, threads",
    "ferroload_processes": "ferroload map, processes",
    "ferroload_ray": "ferroload map, Ray",
    "hf_num_proc2": "HF datasets map(num_proc=2)",
}


def bench_map(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        systems: dict[str, Any] = r.data.get("systems", {})
        base = r.meta.get("base_bytes", {})
        hf = systems.get("hf_num_proc2", {})
        sec.lines += [
            f"{num(r.meta.get('samples'))} samples; the dataset before the map: "
            f"ferroload {mb(base.get('ferroload'))} MB, HF {mb(base.get('hf'))} MB. "
            "`this / HF` = samples/s over HF's; `HF / this` = HF's bytes written "
            "over this system's:",
            "",
        ]
        rows = [
            [
                _MAP.get(k, k),
                num(x.get("samples_per_s")),
                sig(x.get("s")),
                mb(x.get("bytes_written")),
                times(over(x.get("samples_per_s"), hf.get("samples_per_s"))),
                times(over(hf.get("bytes_written"), x.get("bytes_written"))),
                ", ".join(x.get("columns", [])),
            ]
            for k, x in systems.items()
        ]
        sec.lines += md_table(
            [
                "system",
                "samples/s",
                "seconds",
                "MB written",
                "this / HF",
                "HF / this (bytes)",
                "columns after",
            ],
            rows,
        )
        keys = list(systems)
        charts.grouped_bars(
            out / _png(r, "map_throughput"),
            title="Adding two computed columns",
            ylabel="samples/s",
            groups=["samples/s"],
            series=[_MAP.get(k, k) for k in keys],
            values=[[systems[k].get("samples_per_s")] for k in keys],
        )
        sec.charts.append(_png(r, "map_throughput"))
        sec.lines += image(_png(r, "map_throughput"), "map throughput")

    return _runs(results, body)


# --- bench_ray_import -----------------------------------------------------------------

_RAY_IMPORT = {
    "one_machine": "ferroload import_webdataset, one machine (threads)",
    "ray": "ferroload import_webdataset, executor=RayExecutor()",
    "ray_parquet": "Ray Data read_webdataset + write_parquet",
}
_RAY_SETS = {"tiny": "tiny (32x32 PNG)", "jpeg": "jpeg (256x256 JPEG q90)"}
_RAY_SERIES = {  # the chart's legend
    "one_machine": "ferroload, one machine",
    "ray": "ferroload, RayExecutor",
    "ray_parquet": "Ray Data to Parquet",
}


def bench_ray_import(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        sets: dict[str, Any] = r.data.get("sets", {})
        skipped: dict[str, Any] = r.meta.get("skipped") or {}
        sec.lines += [
            f"Ray with {r.meta.get('ray_num_cpus', '-')} CPUs; "
            f"{r.meta.get('rounds', '-')} interleaved round(s), samples/s median (min-max) "
            "of the end-to-end imports; `ray / this` = the Ray import's median samples/s "
            "over this row's:",
            "",
        ]
        for k, why in skipped.items():
            sec.lines += [f"`{k}` was not run: {why}.", ""]
        names, values = [], []
        for name, s in sets.items():
            systems: dict[str, Any] = s.get("systems", {})
            ray_sps = systems.get("ray", {}).get("samples_per_s", {}).get("median")
            check = s.get("check", {})
            sec.lines += [
                f"**{_RAY_SETS.get(name, name)}**: {num(s.get('samples'))} samples in "
                f"{num(s.get('tars'))} tars, {mb(s.get('tar_bytes'))} MB on the server; the "
                f"Ray import equal to the one-machine one: {_yes_no(check.get('ray_equal'))}; "
                f"Parquet rows {', '.join(num(x) for x in check.get('parquet_rows', [])) or '-'}",
                "",
            ]
            rows = []
            for k, x in systems.items():
                if "skipped" in x:
                    rows.append([_RAY_IMPORT.get(k, k), "not run", "-", "-", "-"])
                    continue
                sp = x.get("samples_per_s", {})
                rows.append(
                    [
                        _RAY_IMPORT.get(k, k),
                        f"{num(sp.get('median'))} ({num(sp.get('min'))}-{num(sp.get('max'))})",
                        sig(x.get("median_s")),
                        mb(x.get("bytes_written")),
                        "" if k == "ray" else times(over(ray_sps, sp.get("median"))),
                    ]
                )
            sec.lines += md_table(
                ["system", "samples/s", "seconds (median)", "MB written", "ray / this"], rows
            )
            names.append(name)
            values.append({k: x.get("samples_per_s", {}).get("median") for k, x in systems.items()})
        chart = _png(r, "ray_import_throughput")
        charts.grouped_bars(
            out / chart,
            title="Importing WebDataset tars from S3",
            ylabel="samples/s (median)",
            groups=names,
            series=list(_RAY_SERIES.values()),
            values=[[v.get(k) for v in values] for k in _RAY_SERIES],
        )
        sec.charts.append(chart)
        sec.lines += image(chart, "WebDataset import throughput")

    return _runs(results, body)


def _yes_no(v: Any) -> str:
    return "not checked" if v is None else ("yes" if v else "no")


# --- bench_appends --------------------------------------------------------------------


def _appends_order(r: Result) -> tuple[int, int, str]:
    return (0 if r.name.endswith("_before") else 1, int(r.data.get("n", 0)), r.name)


def bench_appends(results: list[Result], out: Path) -> Section:
    runs = sorted(results, key=_appends_order)
    sec = Section()
    checkpoints = sorted({int(k) for r in runs for k in r.data.get("append_s", {})})
    sec.lines += [
        "One row per file (run facts below). Times in ms; `x compacted` = open + "
        "first batch + subset after the appends over the same after `compact()`.",
        "",
    ]
    rows = []
    for r in runs:
        d = r.data
        man = d.get("manifest", {})
        ap = d.get("append_s", {})
        at = [f"#{k}: {sig(1000 * ap[str(k)])}" for k in checkpoints if str(k) in ap and k >= 100]
        rows.append(
            [
                f"`{r.name}`",
                str(r.meta.get("commit", "-")),
                num(d.get("n")),
                "; ".join(at),
                sig(1000 * d.get("append_stats", {}).get("median_s", 0)),
                num(d.get("all_appends_s")),
                num(man.get("parts")),
                sig(man["bytes"] / 1e3) if "bytes" in man else "-",
                sig(d.get("compact_s")),
                sig(1000 * d.get("read_appended", {}).get("total", 0)),
                sig(1000 * d.get("read_compacted", {}).get("total", 0)),
                sig(1000 * d.get("read_once", {}).get("total", 0)),
                times(
                    over(
                        d.get("read_appended", {}).get("total"),
                        d.get("read_compacted", {}).get("total"),
                    )
                ),
            ]
        )
    sec.lines += md_table(
        [
            "file",
            "commit",
            "N",
            "append #k ms",
            "median append ms",
            "all appends s",
            "index parts",
            "manifest kB",
            "compact s",
            "read after appends ms",
            "read compacted ms",
            "read written at once ms",
            "x compacted",
        ],
        rows,
    )
    charts.lines(
        out / "appends.png",
        title="Time of the k-th one-sample append",
        xlabel="k (log)",
        ylabel="ms (log)",
        x=[float(k) for k in checkpoints],
        logx=True,
        logy=True,
        series=[
            ("ferroload " if not r.name.endswith("_before") else "before: ") + r.name for r in runs
        ],
        values=[
            [
                1000 * r.data["append_s"][str(k)] if str(k) in r.data.get("append_s", {}) else None
                for k in checkpoints
            ]
            for r in runs
        ],
    )
    sec.charts.append("appends.png")
    sec.lines += image("appends.png", "append time")
    for r in runs:
        sec.lines += [f"### `{r.name}.json`", ""]
        sec.lines += run_facts(r)
        sec.lines += goals(r.data)
    return sec


# --- bench_scale ----------------------------------------------------------------------

_SCALE_COLS = [
    ("open_s", "open ms", 1000.0),
    ("first_batch_s", "first batch s (shuffled)", 1.0),
    ("per_sample_us", "µs per sample (shuffled)", 1.0),
    ("loader_rss_mb", "peak RSS MB (shuffled)", 1.0),
    ("streaming_first_batch_s", "first batch s (streaming)", 1.0),
    ("streaming_per_sample_us", "µs per sample (streaming)", 1.0),
    ("streaming_rss_mb", "peak RSS MB (streaming)", 1.0),
    ("subset_selective_s", "selective subset s", 1.0),
    ("index_bytes", "index MB", 1e-6),
]


def bench_scale(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        table: dict[str, Any] = r.data.get("table", {})
        for series, t in table.items():
            cols = [c for c in _SCALE_COLS if c[0] in t]
            sec.lines += [f"**{series} series**:", ""]
            rows = [
                [num(n)] + [sig(None if t[k][i] is None else t[k][i] * f) for k, _, f in cols]
                for i, n in enumerate(t.get("n", []))
            ]
            sec.lines += md_table(["samples", *[label for _, label, _ in cols]], rows)
        man = r.data.get("manifest")
        if isinstance(man, dict) and man.get("runs"):
            sec.lines += ["**Manifest size** (`Dataset.open` against the number of shards):", ""]
            rows = [
                [
                    num(m.get("shards")),
                    sig(m["manifest_bytes"] / 1e3) if "manifest_bytes" in m else "-",
                    num(m.get("inline_shards")) if "inline_shards" in m else "-",
                    num(m.get("shard_lists")) if "shard_lists" in m else "-",
                    sig(1000 * m["open_s"]),
                    sig(1000 * m["resolve_shards_s"]) if "resolve_shards_s" in m else "-",
                ]
                for m in man["runs"]
            ]
            sec.lines += md_table(
                [
                    "shards",
                    "manifest kB",
                    "inline shards",
                    "shard lists",
                    "open ms",
                    "every shard record ms",
                ],
                rows,
            )
        ranks = r.data.get("ranks")
        if isinstance(ranks, dict) and ranks.get("runs"):
            sec.lines += [
                f"**Ranks on S3** ({num(ranks.get('n'))} samples, shards of "
                f"{mb(ranks.get('shard_size'))} MB):",
                "",
            ]
            rows = [
                [
                    num(x.get("world")),
                    num(x.get("rank")),
                    "streaming" if x.get("streaming") else "shuffled",
                    num(x.get("samples")),
                    num(x.get("shards_read")),
                    num(x.get("get_requests")),
                    mb(x.get("bytes_read")),
                    sig(x.get("first_batch_s")),
                    sig(x.get("peak_rss_mb")),
                ]
                for x in ranks["runs"]
            ]
            sec.lines += md_table(
                [
                    "world",
                    "rank",
                    "order",
                    "samples",
                    "shards read",
                    "GETs",
                    "MB read",
                    "first batch s",
                    "peak RSS MB",
                ],
                rows,
            )
        if isinstance(ranks, dict) and ranks.get("remote"):
            sec.lines += ["**Remote open** (S3, cold):", ""]
            rows = [
                [
                    num(x.get("n")),
                    "streaming" if x.get("streaming") else "shuffled",
                    sig(1000 * x.get("open_s", 0)),
                    sig(x.get("first_batch_s")),
                    num(x.get("get_requests")),
                    mb(x.get("bytes_read")),
                    sig(x.get("peak_rss_mb")),
                ]
                for x in ranks["remote"]
            ]
            sec.lines += md_table(
                ["samples", "order", "open ms", "first batch s", "GETs", "MB read", "peak RSS MB"],
                rows,
            )

    return _runs(results, body)


# --- bench_scale_epoch ----------------------------------------------------------------


def bench_scale_epoch(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        rows = [
            [
                num(x.get("n")),
                "streaming" if x.get("streaming") else "shuffled",
                sig(x.get("per_sample_us")),
                sig(x.get("peak_rss_mb")),
                sig(x.get("first_batch_s")),
                num(x.get("items")),
            ]
            for x in r.data.get("table", [])
        ]
        sec.lines += [
            f"Rank {r.meta.get('rank')} of {r.meta.get('world')}, batches of "
            f"{r.meta.get('batch')}, {len(r.data.get('runs', []))} runs in all:",
            "",
        ]
        sec.lines += md_table(
            [
                "samples",
                "order",
                "µs per sample",
                "peak RSS MB",
                "first batch s",
                "samples in the epoch",
            ],
            rows,
        )

    sec = _runs(results, body)
    main = next((r for r in results if r.name == "bench_scale_epoch"), None)
    table = main.data.get("table", []) if main else []
    ns = sorted({int(x["n"]) for x in table})
    if ns:

        def per_sample(streaming: bool) -> list[float | None]:
            got = {
                int(x["n"]): x.get("per_sample_us")
                for x in table
                if bool(x.get("streaming")) == streaming
            }
            return [got.get(n) for n in ns]

        commit = main.meta.get("commit", "?") if main else "?"
        charts.lines(
            out / "scale_epoch.png",
            title=f"One rank's whole epoch: time per sample (commit {commit})",
            xlabel="samples in the dataset (log)",
            ylabel="µs per sample",
            x=[float(n) for n in ns],
            logx=True,
            series=["ferroload, shuffled", "ferroload, streaming"],
            values=[per_sample(False), per_sample(True)],
        )
        sec.charts.append("scale_epoch.png")
        sec.lines += image("scale_epoch.png", "time per sample over a whole epoch at scale")
    return sec


# --- a script without a renderer, and files without a script ----------------------------


def _scalars(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's numbers, booleans and short strings, with those of its `median` (or
    `codec` / `loader`) sub-entries under a prefixed name; lists and other dicts left out."""
    got: dict[str, Any] = {}
    for k, v in entry.items():
        if isinstance(v, dict) and k in ("median", "codec", "loader"):
            prefix = "" if k == "median" else f"{k} "
            got.update({prefix + a: b for a, b in _scalars(v).items()})
        elif isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 40):
            got[k] = v
    return got


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return num(v)
    return sig(v) if isinstance(v, float) else str(v)


def _tables(r: Result, sec: Section) -> None:
    """Each top-level mapping of named entries (`systems`, `sets`, ...) as a table: one
    row per entry, one column per figure the entries hold."""
    for key, value in r.data.items():
        if key in ("meta", "goals") or not isinstance(value, dict) or not value:
            continue
        if not all(isinstance(v, dict) for v in value.values()):
            continue
        rows = {name: _scalars(entry) for name, entry in value.items()}
        cols = list(dict.fromkeys(c for row in rows.values() for c in row))
        if not cols:
            continue
        sec.lines += [f"`{key}`:", ""]
        sec.lines += md_table(
            ["", *cols],
            [[f"`{n}`", *(_cell(row.get(c, "-")) for c in cols)] for n, row in rows.items()],
        )


def generic(results: list[Result], out: Path) -> Section:
    """Run facts, a table per mapping of named entries the results hold (systems, sets),
    and goals: for a script this report does not know in detail."""
    return _runs(results, _tables)


# --- bench_tiny -----------------------------------------------------------------------

_TINY_KINDS = {
    "loader": "ferroload make_loader",
    "loader_stream": "ferroload make_loader, streaming",
    "codec": "ferroload codec alone (every CPU)",
    "codec1": "ferroload codec alone (one thread)",
    "codec_shuffled": "ferroload codec alone, loader's order",
    "rs011": "ferroload-rs 0.1.1 make_loader",
    "rs011_stream": "ferroload-rs 0.1.1 make_loader, streaming",
}
_TINY_LINES = ("loader", "loader_stream", "rs011", "rs011_stream")
_TINY_PAIRS = (("loader", "rs011", "shuffled"), ("loader_stream", "rs011_stream", "streaming"))


def _spread_cell(x: dict[str, Any] | None) -> str:
    if not x:
        return ""
    sp = x["samples_per_s"]
    return f"{num(sp['median'])} ({num(sp['min'])}-{num(sp['max'])})"


def bench_tiny(results: list[Result], out: Path) -> Section:
    def body(r: Result, sec: Section) -> None:
        why = r.meta.get("rs011_unavailable")
        if why:
            sec.lines += [f"ferroload-rs 0.1.1 was not measured: {why}.", ""]
        for fmt, s in r.data.get("sets", {}).items():
            loads: dict[str, Any] = s.get("loads", {})
            if not loads:
                continue
            name = f"32x32 {fmt.upper()}"
            sec.lines += [
                f"**{name}**: {num(s.get('samples'))} samples of {num(s.get('avg_bytes'))} "
                "bytes on average; samples/s, median (min-max) of the fresh-process epochs "
                "under each load:",
                "",
            ]
            kinds = [k for k in _TINY_KINDS if any(k in x for x in loads.values())]
            rows = []
            for k in kinds:
                quiet = loads.get("quiet", {}).get(k) or {}
                rows.append(
                    [_TINY_KINDS[k]]
                    + [_spread_cell(loads[ld].get(k)) for ld in loads]
                    + [
                        num(quiet.get("median_cpu_us_per_sample"), 1),
                        num(quiet.get("median_maxrss_mib")),
                    ]
                )
            sec.lines += md_table(
                ["system", *loads, "CPU us/sample (quiet)", "peak RSS MiB (quiet)"], rows
            )
            ratio_rows = []
            for ours, theirs, mode in _TINY_PAIRS:
                cells = []
                for ld in loads:
                    a, b = loads[ld].get(ours), loads[ld].get(theirs)
                    cells.append(
                        times(over(a["samples_per_s"]["median"], b["samples_per_s"]["median"]))
                        if a and b
                        else ""
                    )
                if any(cells):
                    ratio_rows.append([f"ferroload / ferroload-rs 0.1.1, {mode}", *cells])
            if ratio_rows:
                sec.lines += md_table(["", *loads], ratio_rows)
            xs = [(n, ld) for n, ld in enumerate(("quiet", "busy1", "busy2")) if ld in loads]
            if len(xs) > 1:
                chart = _png(r, f"tiny_load_{fmt}")
                charts.lines(
                    out / chart,
                    title=f"{name}: samples/s against competing CPU-bound processes",
                    xlabel="competing processes",
                    ylabel="samples/s (median)",
                    x=[n for n, _ in xs],
                    series=[_TINY_KINDS[k] for k in _TINY_LINES],
                    values=[
                        [
                            (loads[ld].get(k) or {}).get("samples_per_s", {}).get("median")
                            for _, ld in xs
                        ]
                        for k in _TINY_LINES
                    ],
                )
                sec.charts.append(chart)
                sec.lines += image(chart, f"{name} throughput against competing load")

    return _runs(results, body)


RENDERERS: dict[str, Callable[[list[Result], Path], Section]] = {
    "bench_appends": bench_appends,
    "bench_augment": bench_augment,
    "bench_codec": bench_codec,
    "bench_convert": bench_convert,
    "bench_format": bench_format,
    "bench_loader": bench_loader,
    "bench_map": bench_map,
    "bench_ray_import": bench_ray_import,
    "bench_scale": bench_scale,
    "bench_scale_epoch": bench_scale_epoch,
    "bench_store": bench_store,
    "bench_tiny": bench_tiny,
}
