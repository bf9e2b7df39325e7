"""How the benchmarks measure memory: a process's peak RSS, a resettable high-water mark, and the PSS of a process tree sampled in a thread."""

from __future__ import annotations

import os
import resource
import sys
import threading

_HWM_FLOOR = 0  # this process's peak RSS before the last reset of VmHWM


def status_kib(field: str) -> int | None:
    """A `/proc/self/status` field given in kB (VmRSS, VmHWM, ...), in bytes; None without it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def maxrss(who: int) -> int:
    """Peak resident set size in bytes (`ru_maxrss` is KiB on Linux, bytes on macOS).

    For this process, VmHWM where there is one: Linux carries `ru_maxrss` over `execve`,
    so a process started from the (large) driver would report the driver's size."""
    if who == resource.RUSAGE_SELF:
        hwm = status_kib("VmHWM")
        if hwm is not None:
            return max(hwm, _HWM_FLOOR)
    v = resource.getrusage(who).ru_maxrss
    return int(v if sys.platform == "darwin" else v * 1024)


def reset_hwm() -> bool:
    """Reset this process's peak RSS (VmHWM), Linux only (`maxrss` still sees the old)."""
    global _HWM_FLOOR
    _HWM_FLOOR = max(_HWM_FLOOR, status_kib("VmHWM") or 0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def proc_tree(root: int) -> list[int]:
    """`root` and its descendants (scans /proc: no /proc/PID/task/TID/children here)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return [root]
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def smaps(pid: int) -> dict[str, int] | None:
    """Rss, Pss and Pss_Anon of one process, in bytes (Linux `smaps_rollup`)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss", "Pss_Anon"):
            out[key] = int(rest.split()[0]) * 1024
    return out


class MemSampler:
    """Samples the memory of a process tree every `interval` seconds, in a thread."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = {"rss": 0, "pss": 0, "pss_anon": 0, "procs": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        tot = {"rss": 0, "pss": 0, "pss_anon": 0}
        pids = proc_tree(self.pid)
        for pid in pids:
            s = smaps(pid)
            if s:
                tot["rss"] += s.get("Rss", 0)
                tot["pss"] += s.get("Pss", 0)
                tot["pss_anon"] += s.get("Pss_Anon", 0)
        for k, v in tot.items():
            self.peak[k] = max(self.peak[k], v)
        self.peak["procs"] = max(self.peak["procs"], len(pids))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> MemSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
