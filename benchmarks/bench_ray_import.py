"""Importing WebDataset tars from S3 through Ray: ferroload's importer as Ray tasks against the same importer on one machine and against Ray Data's `read_webdataset(...).write_parquet(...)`.

Two sets of WebDataset tars (`<key>.png|jpg` + `<key>.cls` members, written with
`tarfile`, mtime 0): tiny 32x32 PNGs and 256x256 JPEGs at quality 90 (`_data.py`'s
natural crops, fixed seeds), kept under the workdir between runs. A moto S3 server (a
child process on 127.0.0.1) holds them as `s3://bench-ray/<set>/shard-NNNN.tar`, and
each system imports them from there into a fresh S3 destination
(`s3://bench-ray-out/...`):

* `one_machine`: `ferroload.import_webdataset(src, dst, storage_options=..., progress=False)`
  with its default reading threads;
* `ray`: the same call with `executor=RayExecutor()`: the importer's work runs as Ray
  tasks on a local cluster (`ray.init(num_cpus=2)`), one commit at the end;
* `ray_parquet`: `ray.data.read_webdataset(src, filesystem=S3FileSystem(...),
  decoder=None).write_parquet(dst, filesystem=...)` on the same cluster, the members'
  bytes kept as they are (as ferroload keeps them; Ray's default decoder would decode
  every image into pixels).

Every system is timed end to end (the call to its return, the commit or the last
Parquet file included) in interleaved rounds (the order rotates each round), after one
untimed warm-up of each on two tars; figures are medians with min-max. Checks, outside
the timings: each ferroload dataset has every sample; the `ray` dataset equals the
`one_machine` one sample for sample (ids in order, labels, keys, tars, and the payload
bytes of sampled ids, which also equal the source members); the Parquet output has one
row per sample. The equality is the one goal (PASS / FAIL); the timings have none.

    uv run python benchmarks/bench_ray_import.py            # 200,000 tiny + 20,000 JPEGs, 3 rounds
    uv run python benchmarks/bench_ray_import.py --quick    # smoke run: 2,000 tiny + 400 JPEGs, 1 round
"""

from __future__ import annotations

import inspect
import io
import logging
import os
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import finish_run, log, run_meta, run_parser, start_run  # noqa: E402
from _meta import machine, pkg_version  # noqa: E402

from ferroload_core import exit_process  # noqa: E402

NAME = "bench_ray_import"
SEED = 20261215
BUCKET = "bench-ray"
OUT_BUCKET = "bench-ray-out"
RAY_CPUS = 2
SYSTEMS = ("one_machine", "ray", "ray_parquet")
PAYLOAD_CHECKS = 16  # sampled ids whose payload bytes are compared


class SetSpec(NamedTuple):
    key: str
    ext: str
    side: int
    samples: int
    tars: int


class Sizes(NamedTuple):
    sets: tuple[SetSpec, ...]
    rounds: int


FULL = Sizes(
    sets=(SetSpec("tiny", "png", 32, 200_000, 20), SetSpec("jpeg", "jpg", 256, 20_000, 20)),
    rounds=3,
)
QUICK = Sizes(
    sets=(SetSpec("tiny", "png", 32, 2_000, 4), SetSpec("jpeg", "jpg", 256, 400, 4)),
    rounds=1,
)


# --------------------------------------------------------------------------- the data


def _key(spec: SetSpec, i: int) -> str:
    return f"{spec.key}{i:07d}"


def _per_tar(spec: SetSpec) -> int:
    return -(-spec.samples // spec.tars)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def make_tars(spec: SetSpec, root: Path) -> Path:
    """The set's tars under `root/<set>-<samples>-<tars>/` (written once, reused after:
    a `done` file marks a finished folder). Tar `t` holds samples `t * per_tar ...`, each
    `<key>.<ext>` then `<key>.cls`; its images are drawn with seed `SEED + 1000 * set + t`."""
    from _data import encode_natural, natural_photos

    folder = root / f"{spec.key}-{spec.samples}-{spec.tars}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    photos = natural_photos(SEED)
    per, salt = _per_tar(spec), 1000 * (1 + [s.key for s in FULL.sets].index(spec.key))
    for t in range(spec.tars):
        first = t * per
        n = min(per, spec.samples - first)
        s = encode_natural(
            spec.key, n, fmt=spec.ext, size=spec.side, seed=SEED + salt + t, photos=photos
        )
        tmp = folder / f"shard-{t:04d}.tar.tmp"
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            for j, (payload, label) in enumerate(zip(s.payloads, s.labels, strict=True)):
                key = _key(spec, first + j)
                _add(tar, f"{key}.{spec.ext}", payload)
                _add(tar, f"{key}.cls", str(label).encode())
        tmp.rename(folder / f"shard-{t:04d}.tar")
    (folder / "done").write_text("")
    return folder


def source_member(folder: Path, spec: SetSpec, i: int) -> bytes:
    """Sample `i`'s image member, read back from its local tar."""
    with tarfile.open(folder / f"shard-{i // _per_tar(spec):04d}.tar") as tar:
        f = tar.extractfile(f"{_key(spec, i)}.{spec.ext}")
        assert f is not None
        return f.read()


# --------------------------------------------------------------------------- S3


def s3_filesystem(endpoint: str, region: str) -> Any:
    """A pyarrow S3 filesystem on the moto server (for Ray Data, uploads and listings)."""
    from pyarrow import fs

    host = endpoint.split("://", 1)[1]
    return fs.S3FileSystem(
        access_key="testing", secret_key="testing", region=region,
        endpoint_override=host, scheme="http", allow_bucket_creation=False,
    )  # fmt: skip


def upload(s3: Any, folder: Path, prefix: str) -> int:
    """Copy the folder's tars to `prefix` (bucket/path); returns the bytes copied."""
    total = 0
    for p in sorted(folder.glob("shard-*.tar")):
        data = p.read_bytes()
        with s3.open_output_stream(f"{prefix}/{p.name}") as out:
            out.write(data)
        total += len(data)
    return total


def tree_bytes(s3: Any, prefix: str) -> int:
    from pyarrow import fs

    infos = s3.get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.type == fs.FileType.File)


def parquet_rows(s3: Any, prefix: str) -> int:
    import pyarrow.parquet as pq
    from pyarrow import fs

    infos = s3.get_file_info(fs.FileSelector(prefix, recursive=True))
    rows = 0
    for i in infos:
        if i.type == fs.FileType.File and i.path.endswith(".parquet"):
            with s3.open_input_file(i.path) as f:
                rows += pq.ParquetFile(f).metadata.num_rows
    return rows


# --------------------------------------------------------------------------- systems


def ray_unavailable() -> str | None:
    """Why the `ray` system cannot run (None when it can)."""
    import ferroload

    if "executor" not in inspect.signature(ferroload.import_webdataset).parameters:
        return (
            "ferroload.import_webdataset has no `executor` parameter in this build "
            "(the Ray import is not there yet)"
        )
    return None


def run_ferroload(
    src: str | list[str], dst: str, options: dict[str, Any], executor: Any = None
) -> int:
    import ferroload

    kwargs: dict[str, Any] = {} if executor is None else {"executor": executor}
    report = ferroload.import_webdataset(
        src, dst, storage_options=options, progress=False, **kwargs
    )
    return int(report.num_samples)


def run_ray_parquet(src: str | list[str], dst: str, s3: Any) -> None:
    import ray.data

    ds = ray.data.read_webdataset(src, filesystem=s3, decoder=None)
    ds.write_parquet(dst, filesystem=s3)


def compare(a_uri: str, b_uri: str, options: dict[str, Any], spec: SetSpec, folder: Path) -> str:
    """'' when dataset `b` equals `a` sample for sample (ids in order, every metadata column,
    the payload bytes of sampled ids, which must also be the source's), else what differs."""
    import ferroload

    a = ferroload.Dataset.open(a_uri, storage_options=options)
    b = ferroload.Dataset.open(b_uri, storage_options=options)
    if a.num_samples != b.num_samples:
        return f"{b.num_samples} samples, not {a.num_samples}"
    if set(a.columns) != set(b.columns):
        return f"columns {sorted(b.columns)}, not {sorted(a.columns)}"
    for col in ("sample_id", "label", "wds_key", "wds_shard", "wds_members"):
        if col in a.columns and a.column(col).to_pylist() != b.column(col).to_pylist():
            return f"column {col} differs"
    ids = a.column("wds_key").to_pylist()
    rng = np.random.default_rng(SEED)
    n = a.num_samples
    picks = sorted({0, n - 1, *rng.integers(0, n, PAYLOAD_CHECKS).tolist()})
    for i in picks:
        pa_, pb = a.get(i, [spec.ext])[spec.ext], b.get(i, [spec.ext])[spec.ext]
        if bytes(pa_) != bytes(pb):
            return f"payload of sample {i} differs"
        src = source_member(folder, spec, int(str(ids[i])[len(spec.key) :]))
        if bytes(pa_) != src:
            return f"payload of sample {i} differs from the source tar"
    return ""


def spread(times: list[float], n: int) -> dict[str, Any]:
    return {
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "samples_per_s": {
            "median": n / statistics.median(times),
            "min": n / max(times),
            "max": n / min(times),
        },
    }


# --------------------------------------------------------------------------- the run


def render(res: dict[str, Any]) -> str:
    lines = [
        f"import of WebDataset tars from moto S3 ({res['meta']['mode']}, "
        f"{res['meta']['rounds']} round(s), Ray with {RAY_CPUS} CPUs)"
    ]
    for name, s in res["sets"].items():
        lines += [
            "",
            f"{name}: {s['samples']:,} samples in {s['tars']} tars, {s['tar_bytes'] / 1e6:.1f} MB",
            f"  {'system':<13}{'samples/s median (min-max)':>30}{'s median':>10}{'MB out':>9}",
        ]
        for k, v in s["systems"].items():
            if "skipped" in v:
                lines.append(f"  {k:<13}  skipped: {v['skipped']}")
                continue
            sp = v["samples_per_s"]
            cell = f"{sp['median']:,.0f} ({sp['min']:,.0f}-{sp['max']:,.0f})"
            lines.append(
                f"  {k:<13}{cell:>30}{v['median_s']:>10.2f}{v['bytes_written'] / 1e6:>9.1f}"
            )
        for k, v in s["ratios"].items():
            lines.append(f"  {k}: {'-' if v is None else f'{v:.2f}x'}")
        c = s["check"]
        lines.append(
            f"  check: samples {c['samples_ok']}, parquet rows {c['parquet_rows']}, "
            f"ray equal {c['ray_equal']}" + (f" ({c['ray_detail']})" if c["ray_detail"] else "")
        )
    if res["goals"]:
        lines += ["", "GOALS"]
        lines += [
            f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']}" for g in res["goals"]
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = run_parser(__doc__, NAME, quick="smoke run: 2,000 tiny + 400 JPEGs, 1 round")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3, quick 1)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rounds = args.rounds or sizes.rounds
    run = start_run(args, NAME, "ray-import-{mode}")
    data_root = Path(args.workdir) / "ray-import-data"

    folders = {}
    for spec in sizes.sets:
        log(f"tars of {spec.key}: {spec.samples:,} samples in {spec.tars} (cached)")
        folders[spec.key] = make_tars(spec, data_root)

    # Ray workers run this venv's Python directly: under `uv run`, Ray would otherwise
    # package the repository and start every worker through uv, seconds each, some of
    # them inside the timed runs (Ray Data starts workers as it needs them)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    # imports before any timing
    import ray
    import ray.data

    import ferroload
    from ferroload_map import RayExecutor
    from ferroload_testing import MotoServer

    skip_ray = ray_unavailable()
    if skip_ray:
        log(f"ray left out: {skip_ray}")
    res: dict[str, Any] = {
        "meta": {
            **run_meta(run, RAY_CPUS),
            "machine": machine(),
            "command": " ".join(
                [
                    "uv run python benchmarks/bench_ray_import.py",
                    *(sys.argv[1:] if argv is None else argv),
                ]
            ),
            "rounds": rounds,
            "ray_num_cpus": RAY_CPUS,
            "ray_enable_uv_run_runtime_env": os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"],
            "versions": {
                p: pkg_version(p) for p in ("ferroload-convert", "ray", "pyarrow", "moto")
            },
            "systems": {
                "one_machine": "ferroload.import_webdataset(src, dst, storage_options=..., "
                "progress=False), default reading threads",
                "ray": "the same with executor=RayExecutor() (Ray tasks, one commit)",
                "ray_parquet": "ray.data.read_webdataset(src, filesystem=S3FileSystem, "
                "decoder=None).write_parquet(dst, filesystem=...)",
            },
            "skipped": {"ray": skip_ray} if skip_ray else {},
            "method": "end to end wall time of each call; untimed warm-up of each system on "
            "two tars; interleaved rounds, order rotating; medians with min-max",
        },
        "sets": {},
        "goals": [],
    }
    systems = [s for s in SYSTEMS if not (s == "ray" and skip_ray)]

    ray.init(
        num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False,
        logging_level=logging.WARNING,
    )  # fmt: skip
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    try:
        with MotoServer() as server:
            options = server.storage_options(BUCKET)
            server.create_bucket(OUT_BUCKET)
            s3 = s3_filesystem(server.endpoint, server.region)
            for spec in sizes.sets:
                log(f"uploading {spec.key}")
                tar_bytes = upload(s3, folders[spec.key], f"{BUCKET}/{spec.key}")
                res["sets"][spec.key] = {
                    "samples": spec.samples,
                    "tars": spec.tars,
                    "tar_bytes": tar_bytes,
                    "source": f"s3://{BUCKET}/{spec.key}/",
                }

            def one(system: str, src: str | list[str], dst: str, n: int) -> float:
                """Run `system` once from `src` to `dst`; its seconds."""
                t0 = time.perf_counter()
                if system == "ray_parquet":
                    run_ray_parquet(src, dst, s3)
                    got = n  # checked afterwards, outside the timing
                else:
                    got = run_ferroload(
                        src, dst, options, RayExecutor() if system == "ray" else None
                    )
                dt = time.perf_counter() - t0
                if got != n:
                    raise RuntimeError(f"{system} imported {got} samples, not {n}")
                return dt

            first = sizes.sets[0]
            # two tars: two tasks at once, so that both Ray workers have imported what
            # the systems run before any timing
            warm = [f"s3://{BUCKET}/{first.key}/shard-{t:04d}.tar" for t in range(2)]
            for system in systems:
                log(f"warm-up {system}")
                one(system, warm, f"s3://{OUT_BUCKET}/warmup-{system}", 2 * _per_tar(first))
                s3.delete_dir(f"{OUT_BUCKET}/warmup-{system}")

            times: dict[str, dict[str, list[float]]] = {
                s.key: {k: [] for k in systems} for s in sizes.sets
            }
            written: dict[str, dict[str, list[int]]] = {
                s.key: {k: [] for k in systems} for s in sizes.sets
            }
            checks: dict[str, dict[str, Any]] = {
                s.key: {"samples_ok": True, "parquet_rows": [], "ray_equal": None, "ray_detail": ""}
                for s in sizes.sets
            }
            for r in range(rounds):
                order = systems[r % len(systems) :] + systems[: r % len(systems)]
                for spec in sizes.sets:
                    src = f"s3://{BUCKET}/{spec.key}/"
                    outs = {k: f"{OUT_BUCKET}/r{r}-{spec.key}-{k}" for k in systems}
                    for system in order:
                        dt = one(system, src, f"s3://{outs[system]}", spec.samples)
                        times[spec.key][system].append(dt)
                        written[spec.key][system].append(tree_bytes(s3, outs[system]))
                        log(
                            f"round {r + 1} {spec.key} {system}: {dt:.2f} s "
                            f"({spec.samples / dt:,.0f} samples/s)"
                        )
                    c = checks[spec.key]
                    for system in systems:
                        if system == "ray_parquet":
                            c["parquet_rows"].append(parquet_rows(s3, outs[system]))
                        else:
                            got = ferroload.Dataset.open(
                                f"s3://{outs[system]}", storage_options=options
                            ).num_samples
                            c["samples_ok"] = c["samples_ok"] and got == spec.samples
                    if "ray" in systems:
                        why = compare(
                            f"s3://{outs['one_machine']}", f"s3://{outs['ray']}",
                            options, spec, folders[spec.key],
                        )  # fmt: skip
                        c["ray_equal"] = (c["ray_equal"] is not False) and not why
                        c["ray_detail"] = c["ray_detail"] or why
                    for out in outs.values():
                        s3.delete_dir(out)
    finally:
        ray.shutdown()

    for spec in sizes.sets:
        s = res["sets"][spec.key]
        s["systems"] = {}
        for k in SYSTEMS:
            if k not in systems:
                s["systems"][k] = {"skipped": skip_ray}
                continue
            s["systems"][k] = {
                **spread(times[spec.key][k], spec.samples),
                "bytes_written": int(statistics.median(written[spec.key][k])),
            }
        med = {
            k: v["samples_per_s"]["median"] for k, v in s["systems"].items() if "skipped" not in v
        }
        ray_sps = med.get("ray")
        s["ratios"] = {
            "ray_over_one_machine": None if ray_sps is None else ray_sps / med["one_machine"],
            "ray_over_ray_parquet": None if ray_sps is None else ray_sps / med["ray_parquet"],
        }
        c = checks[spec.key]
        c["parquet_rows_ok"] = all(x == spec.samples for x in c["parquet_rows"])
        s["check"] = c
        if "ray" in systems:
            res["goals"].append(
                {
                    "goal": f"{spec.key}: the Ray import equals the one-machine import, "
                    "sample for sample (ids in order, metadata, sampled payloads)",
                    "value": "equal" if c["ray_equal"] else f"differs: {c['ray_detail']}",
                    "pass": bool(c["ray_equal"]),
                }
            )
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
