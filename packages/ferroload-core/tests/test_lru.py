"""The one LRU: count and weight bounds, recency, the eviction hook, threads."""

from __future__ import annotations

import threading

import pytest

from ferroload_core import LRU


def test_count_bound_evicts_least_recently_used() -> None:
    cache = LRU[str, int](2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert cache.held() == ["a", "c"]
    assert cache.get("b") is None
    assert len(cache) == 2 and "a" in cache and "b" not in cache
    assert cache.values() == [1, 3]  # looking does not reorder
    assert cache.held() == ["a", "c"]


def test_weight_bound_and_replacing_a_key() -> None:
    cache = LRU[str, bytes](10, weigh=len)
    cache.put("a", b"x" * 4)
    cache.put("b", b"x" * 4)
    cache.put("a", b"x" * 6)  # replaced: weight 10, nothing evicted
    assert cache.weight == 10 and cache.held() == ["b", "a"]
    cache.put("c", b"x")
    assert cache.held() == ["a", "c"] and cache.weight == 7


def test_a_value_heavier_than_the_bound_is_not_kept_and_drops_the_old_one() -> None:
    cache = LRU[str, bytes](4, weigh=len)
    cache.put("a", b"12")
    cache.put("a", b"12345")
    assert cache.get("a") is None and cache.weight == 0


def test_on_evict_sees_each_pushed_out_entry_but_not_pop_or_clear() -> None:
    seen: list[tuple[str, int]] = []
    cache = LRU[str, int](1, on_evict=lambda k, v: seen.append((k, v)))
    cache.put("a", 1)
    cache.put("b", 2)
    assert seen == [("a", 1)]
    assert cache.pop("b") == 2 and cache.pop("b") is None
    cache.put("c", 3)
    cache.clear()
    assert seen == [("a", 1)] and len(cache) == 0 and cache.weight == 0


def test_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_weight"):
        LRU[str, int](-1)


def test_threads_keep_the_weight_consistent() -> None:
    cache = LRU[int, int](64, weigh=lambda v: v % 3 + 1)

    def work(base: int) -> None:
        for i in range(2000):
            cache.put((base + i) % 200, i)
            cache.get((base * 7 + i) % 200)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.weight <= 64
    assert cache.weight == sum(v % 3 + 1 for v in cache.values())
