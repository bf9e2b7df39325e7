"""The report `bench_loader.py` prints: per set, every configuration's throughput and memory, the notes that explain them (ferroload-rs 0.1.1 among them), the prefetch memory bound, every system under each load, and the goals."""

from __future__ import annotations

from typing import Any

from _report import MiB, goals_table, mib, run_header, table


def render(res: dict[str, Any]) -> str:
    """The human-readable report of a result dict."""
    m = res["meta"]
    out = [
        *run_header("ferroload loader benchmark", m),
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"ferroload via {m['ferroload_api']}; peers decode with {m['peer_pillow']}"
        + (f" ({m['stock_pillow']['reason']})" if m["stock_pillow"]["reason"] else ""),
        _rs011_line(m),
        f"images: {m['image_source']}; "
        + "; ".join(
            f"{k}: {d['samples']:,} x {d['desc']} (avg {d['avg_bytes']:,.0f} B)"
            for k, d in m["sets"].items()
        ),
        f"each configuration in its own fresh process: a warm-up epoch (checked), then best of "
        f"{m['rounds']} epochs, configurations interleaved; datasets hot in the page cache; "
        f"WebDataset: {m['wds_shards']} shards per set, shardshuffle=100, shuffle(1000)",
        "memory over the warm-up and timed epochs: peak PSS = the process tree (main + "
        "DataLoader workers), sampled every 50 ms, shared pages split between processes; "
        "RSS main + workers = the main process's peak RSS + workers x the largest worker's "
        "ru_maxrss (forked workers count the pages they share again)",
    ]
    for i, (key, st) in enumerate(res["sets"].items(), 1):
        d = m["sets"][key]
        out += [
            "",
            f"{i}. {key}: {st['samples']:,} x {d['desc']} -> uint8 "
            f"(B, {st['out']}, {st['out']}, 3) + int64 labels, batch {st['batch']}",
        ]
        out.append(_set_table(st))
        out += _set_notes(st)
    out += _prefetch_table(res)
    out += _loads_table(res)
    out += goals_table(res["goals"])
    refs = [st["reference_scaling_1_to_2"] for st in res["sets"].values()]
    if min(refs) < 0.9:
        out.append(
            f"note: the machine reference scaled only {min(refs):.2f}-{max(refs):.2f} of linear "
            "from 1 to 2 threads (other processes were using the CPUs): all-core figures are "
            "bounded by the machine, and ratios between systems that use 1 and 2 cores shift"
        )
    return "\n".join(out)


def _set_table(st: dict[str, Any]) -> str:
    """One set's table: every configuration's time, throughput and memory."""
    fl = st["configs"]["ferroload"].get("samples_per_s")
    rows = []
    for r in st["configs"].values():
        sps = r.get("samples_per_s")
        ratio = "-" if not sps or not fl else f"{fl / sps:.2f}x"
        main_w = "-"
        if "maxrss_self" in r:
            main_w = mib(r["maxrss_self"])
            if r["workers"]:
                main_w += f" + {r['workers']}x{mib(r['maxrss_children'])}"
        tp = r["tree_peak"]
        rows.append(
            [
                r["label"] + ("" if r["ok"] else "  FAILED"),
                "-" if not sps else f"{r['best_s']:.3f}",
                "-" if not sps else f"{sps:,.0f}",
                ratio,
                mib(tp["pss"]) if tp["pss"] else "-",
                mib(tp["pss_anon"]) if tp["pss"] else "-",
                main_w,
                mib(r.get("rss_setup")),
            ]
        )
    return table(
        [
            "system / configuration",
            "best s",
            "samples/s",
            "fl / this",
            "peak PSS MiB",
            "anon",
            "RSS MiB main + workers",
            "RSS setup",
        ],
        rows,
    )


def _set_notes(st: dict[str, Any]) -> list[str]:
    """What explains one set's table: the best peer, loader / codec, where a batch's time
    goes, page faults, the machine reference, the check."""
    notes = []
    if st.get("best_peer"):
        r, rm = st["ferroload_over_best_peer"], st["ferroload_over_best_peer_medians"]
        notes.append(
            f"best peer: {st['configs'][st['best_peer']]['label']} "
            f"({st['best_peer_samples_per_s']:,.0f} samples/s); ferroload / best peer = "
            + ("-" if r is None else f"{r:.2f}x")
            + ("" if rm is None else f" (on median epochs: {rm:.2f}x)")
        )
    if st.get("loader_over_codec") is not None:
        pm = st["loader_over_codec_paired_median"]
        notes.append(
            f"loader / codec, only these two processes alive = "
            f"{st['loader_over_codec']:.2f} (best epochs)"
            + ("" if pm is None else f", {pm:.2f} (median over rounds of neighbouring epochs)")
        )
    if st.get("loader_over_codec_crowded") is not None:
        pm = st["loader_over_codec_crowded_paired_median"]
        notes.append(
            f"loader / codec among the peers' idle processes (the table above) = "
            f"{st['loader_over_codec_crowded']:.2f} (best epochs)"
            + ("" if pm is None else f", {pm:.2f} (median of neighbouring epochs)")
        )
    bd = st.get("breakdown")
    if bd:
        codec_ms = bd["codec_best_ms_per_batch"]
        notes.append(
            f"ferroload per batch (an extra epoch, decode_batch timed): "
            f"{bd['build_ms_per_batch']:.2f} ms building on the prefetch thread = "
            f"{bd['decode_ms_per_batch']:.2f} ms decode_batch + "
            f"{bd['other_ms_per_batch']:.2f} ms the rest (reads, index columns, "
            f"collation: {bd['other_ms_per_batch'] / bd['build_ms_per_batch']:.0%}); "
            f"consumer waited {bd['wait_ms_per_batch']:.2f} ms; codec alone "
            + ("-" if codec_ms is None else f"{codec_ms:.2f} ms")
            + " per batch (best epoch)"
        )
        cf = bd["codec_page_faults_per_batch"]
        notes.append(
            f"minor page faults per batch (main process): ferroload "
            f"{bd['page_faults_per_batch']:,.0f}, codec alone "
            + ("-" if cf is None else f"{cf:,.0f}")
            + f" (a batch's output is {st['batch'] * st['out'] ** 2 * 3 / 4096:,.0f} pages)"
        )
    for how, v in st.get("vs_rs011", {}).items():
        pm = v["ratio_paired_median"]
        notes.append(
            f"{v['ours']} / ferroload-rs 0.1.1's {v['rs011']} ({how}) = {v['ratio_best']:.2f}x "
            f"(best epochs), {v['ratio_medians']:.2f}x (median epochs)"
            + ("" if pm is None else f", {pm:.2f}x (median of neighbouring epochs)")
        )
    notes.append(
        f"machine reference (sha256, 1 vs 2 threads, same rounds): "
        f"{st['reference_scaling_1_to_2']:.2f} of linear"
    )
    chk = st["check"]
    means = ", ".join(f"{k} {v:.2f}" for k, v in chk["mean_pixel"].items())
    notes.append(
        "check: "
        + (
            "same samples, shapes and dtypes everywhere"
            if chk["ok"]
            else "PROBLEMS: " + "; ".join(chk["problems"])
        )
        + f"; mean pixel: {means}"
    )
    return notes


def _prefetch_table(res: dict[str, Any]) -> list[str]:
    """The prefetch memory bound (jpeg set): the stalled consumer's figures."""
    jp = res["sets"]["jpeg"]["configs"]
    rows = []
    for key in ("ferroload_prefetch64", "ferroload"):
        r = jp.get(key, {})
        stall = r.get("stall")
        if not stall:
            continue
        sps = r.get("samples_per_s")
        rows.append(
            [
                f"prefetch_bytes={stall['prefetch_bytes'] // MiB} MiB",
                "-" if not sps else f"{sps:,.0f}",
                mib(stall["rss_before"]),
                mib(stall["peak_rss"]),
                mib(stall["delta"]),
                mib(stall["delta"] - stall["prefetch_bytes"]),
                mib(stall["peak_prefetch_bytes"]),
                f"{stall['waited_s']:.1f}",
            ]
        )
    if not rows:
        return []
    return [
        "",
        "3. prefetch memory bound (jpeg set): samples/s with a fast consumer; then one epoch "
        "whose consumer takes a batch and waits until the prefetch thread stops building",
        table(
            [
                "configuration",
                "samples/s",
                "RSS before",
                "peak RSS",
                "growth",
                "growth - budget",
                "loader's peak_prefetch",
                "waited s",
            ],
            rows,
        ),
    ]


def _rs011_line(m: dict[str, Any]) -> str:
    """Whether ferroload-rs 0.1.1 ran, and in which interpreter (or why not)."""
    rs = m.get("rs011") or {}
    if rs.get("python"):
        return (
            f"ferroload-rs {rs['version']}: its own venv ({rs['python']}), the same bytes "
            "written by its Writer, read by its make_loader"
        )
    return f"ferroload-rs {rs.get('version', '0.1.1')} left out: {rs.get('reason')}"


def _loads_table(res: dict[str, Any]) -> list[str]:
    """Every configuration's median samples/s (min-max over its epochs) under each load,
    and over its quiet figure; nothing when only the quiet load ran."""
    loads = res.get("loads") or {}
    if len(loads) < 2:
        return []
    m = res["meta"]["loads"]
    names = list(loads)
    rows = []
    for set_key, quiet in loads["quiet"].items():
        for key in quiet:
            q = quiet[key]["median_samples_per_s"]
            row = [f"{set_key}: {key}"]
            for load in names:
                r = loads[load].get(set_key, {}).get(key)
                if r is None:
                    row.append("-")
                    continue
                cell = (
                    f"{r['median_samples_per_s']:,.0f} "
                    f"({r['min_samples_per_s']:,.0f}-{r['max_samples_per_s']:,.0f})"
                )
                if load != "quiet":
                    cell += f" {r['median_samples_per_s'] / q:.2f}x"
                row.append(cell)
            rows.append(row)
    scaling = res.get("loads_reference_scaling_1_to_2", {})
    rows.append(
        ["machine reference 1 -> 2 threads"]
        + [", ".join(f"{v:.2f}" for v in scaling.get(x, {}).values()) or "-" for x in names]
    )
    return [
        "",
        f"4. under load: median samples/s (min-max over the epochs) and x its quiet median; "
        f"busyN = N competing CPU-bound processes, step = {m['step_ms']:g} ms of consumer CPU "
        "per batch",
        table(["set: configuration", *names], rows),
    ]
