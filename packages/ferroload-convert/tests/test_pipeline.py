from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ferroload_convert._pipeline import Failed, ordered_map, ordered_streams


def test_ordered_map_keeps_input_order_and_wraps_failures() -> None:
    def work(i: int) -> int:
        time.sleep((7 - i % 7) * 0.001)  # later items finish first
        if i == 5:
            raise ValueError("five")
        return i * i

    out = list(ordered_map(range(30), work, workers=6))
    assert [item for item, _ in out] == list(range(30))
    assert [r for i, r in out if i != 5] == [i * i for i in range(30) if i != 5]
    failed = out[5][1]
    assert isinstance(failed, Failed) and str(failed.error) == "five"


def test_ordered_map_bounds_the_work_in_flight() -> None:
    started = 0
    lock = threading.Lock()

    def work(i: int) -> int:
        nonlocal started
        with lock:
            started += 1
        return i

    consumed = 0
    for _ in ordered_map(range(200), work, workers=4, window=10):
        consumed += 1
        time.sleep(0.0005)
        assert started - consumed <= 10
    assert consumed == 200


def test_ordered_streams_drain_sources_in_order_and_stop_early() -> None:
    def stream(n: int) -> Iterator[str]:
        for k in range(n):
            time.sleep(0.001 * ((n + k) % 3))
            yield f"{n}.{k}"
        if n == 2:
            raise OSError("broken after two")

    out = list(ordered_streams([3, 2, 0, 4], stream, workers=3, buffer=2))
    assert [s for s, _ in out] == [3, 3, 3, 2, 2, 2, 4, 4, 4, 4]
    values = [v for _, v in out]
    assert values[:5] == ["3.0", "3.1", "3.2", "2.0", "2.1"]
    assert isinstance(values[5], Failed) and "broken" in str(values[5].error)
    assert values[6:] == ["4.0", "4.1", "4.2", "4.3"]

    produced = []

    def endless(n: int) -> Iterator[int]:
        k = 0
        while True:
            produced.append(n)
            yield k
            k += 1

    gen = ordered_streams(range(10), endless, workers=4, buffer=3)
    assert [next(gen)[1] for _ in range(5)] == [0, 1, 2, 3, 4]
    start = time.perf_counter()
    gen.close()  # producers blocked on full queues stop too
    assert time.perf_counter() - start < 5
    count = len(produced)
    time.sleep(0.3)
    assert len(produced) == count
    assert set(produced) <= {0, 1, 2, 3}  # never more sources than workers


def test_unexpected_errors_of_the_consumer_stop_the_pool() -> None:
    def work(i: int) -> int:
        return i

    with pytest.raises(KeyError):
        for _i, _ in ordered_map(range(1000), work, workers=2):
            raise KeyError("consumer failed")


def test_a_source_that_fails_before_yielding_ends_its_stream() -> None:
    def fn(source: int) -> list[int]:  # a plain function, not a generator: it raises at once
        if source == 1:
            raise OSError("cannot open source 1")
        return [10 * source, 10 * source + 1]

    got = list(ordered_streams([0, 1, 2], fn, workers=2))
    assert [(s, r) for s, r in got if not isinstance(r, Failed)] == [
        (0, 0),
        (0, 1),
        (2, 20),
        (2, 21),
    ]
    failed = [(s, r) for s, r in got if isinstance(r, Failed)]
    assert len(failed) == 1 and failed[0][0] == 1 and "source 1" in str(failed[0][1].error)
